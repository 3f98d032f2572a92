-- The claim ledger: one row per (provider, event_id) ever applied. The unique key is the
-- whole exactly-once mechanism: a delivery claims its event by inserting here, in the same
-- transaction as the event's effect.
CREATE TABLE processed_events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider       text        NOT NULL,
    event_id       text        NOT NULL,
    event_type     text        NOT NULL,
    received_at    timestamptz NOT NULL DEFAULT now(),
    payload_sha256 bytea,
    CONSTRAINT processed_events_provider_event_id_key UNIQUE (provider, event_id)
);

-- The retention sweep deletes by age.
CREATE INDEX processed_events_received_at_idx ON processed_events (received_at);

COMMENT ON TABLE processed_events IS
    'Exactly-once claim ledger. Append-only: handlers insert and read, never update or delete. '
    'Retention: rows older than RETENTION_DAYS (default 90 days, past the senders'' retry '
    'windows of 3 days) are removed by the retention sweep only; a redelivery after that '
    'would be applied again.';
COMMENT ON COLUMN processed_events.payload_sha256 IS
    'SHA-256 of the raw body of the first delivery; a duplicate with another hash is logged.';
