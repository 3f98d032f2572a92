-- Transactional outbox. An effect that must reach another system (a welcome email, a CRM
-- ping) never calls it from inside the claim transaction: it inserts a row here in that same
-- transaction, so the message exists exactly when the claim and the effect committed. The
-- outbox relay hands undispatched rows on (SQS) with the row id as the idempotency key and
-- marks them; several relays never take one row twice (FOR UPDATE SKIP LOCKED).
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- What the message is, for routing by consumers: e.g. 'email.welcome'.
    topic           text        NOT NULL CHECK (topic <> ''),
    payload         jsonb       NOT NULL,
    -- The webhook event whose effect wrote the row, for tracing (NULL when not from one).
    provider        text,
    event_id        text,
    -- Optional: at most one row per (topic, dedup_key), for messages that must go out once
    -- per business key rather than once per event (one welcome email per customer). An
    -- effect inserts with ON CONFLICT DO NOTHING. NULL never conflicts.
    dedup_key       text,
    dispatched_at   timestamptz,
    -- Send attempts so far, successful or not, and the last failure (data-free: the
    -- dispatcher's error category, never the payload).
    attempts        integer     NOT NULL DEFAULT 0,
    last_attempt_at timestamptz,
    last_error      text,
    CONSTRAINT outbox_topic_dedup_key_key UNIQUE (topic, dedup_key)
);

-- The relay's queue: undispatched rows in id order. Partial, so it stays as small as the
-- backlog however large the table grows.
CREATE INDEX outbox_undispatched_idx ON outbox (id) WHERE dispatched_at IS NULL;
-- The retention sweep removes dispatched rows by age.
CREATE INDEX outbox_dispatched_at_idx ON outbox (dispatched_at) WHERE dispatched_at IS NOT NULL;
-- Which messages an event produced.
CREATE INDEX outbox_event_idx ON outbox (provider, event_id);

COMMENT ON TABLE outbox IS
    'Messages written by webhook effects in the claim transaction, handed on by the outbox '
    'relay (idempotency key = id). Handlers insert only; the relay reads and marks; the '
    'retention sweep deletes dispatched rows older than RETENTION_DAYS.';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_relay') THEN
        CREATE ROLE claimonce_relay NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_relay;

-- Handlers only add messages. INSERT alone is enough for ON CONFLICT DO NOTHING without a
-- conflict target; naming a target would also need SELECT on its columns.
GRANT INSERT ON outbox TO claimonce_handler;

-- The relay reads the queue and may change only the delivery bookkeeping: never the message.
-- (UPDATE on some column is also what SELECT ... FOR UPDATE requires.)
GRANT SELECT ON outbox TO claimonce_relay;
GRANT UPDATE (dispatched_at, attempts, last_attempt_at, last_error) ON outbox TO claimonce_relay;

-- The sweep prunes delivered messages past the retention window.
GRANT SELECT, DELETE ON outbox TO claimonce_sweeper;
