-- Three corrections to V5/V6 (issue 14). V6's functions stay as they are, for the functions
-- still running the older code during a deployment; a later migration drops them.

-- 1. One welcome per customer for good. V6 relied on the outbox's UNIQUE (topic, dedup_key),
-- but the retention sweep deletes sent rows after RETENTION_DAYS, and then a returning
-- customer's checkout queued a second welcome. The guard now lives on the customer row, which
-- nothing deletes. It is "welcomed", not "new": Stripe does not order its events, and a
-- customer first created by an invoice.paid must still be welcomed at its checkout.
ALTER TABLE customers ADD COLUMN welcomed_at timestamptz;

COMMENT ON COLUMN customers.welcomed_at IS
    'When the welcome email was queued in the outbox; NULL until then. Never cleared.';

-- Customers whose welcome is still in the outbox were welcomed. A welcome already swept
-- before this migration leaves no trace: such a customer may be welcomed once more, once.
UPDATE customers AS c SET welcomed_at = o.created_at
FROM outbox AS o
WHERE o.topic = 'email.welcome' AND o.dedup_key = c.stripe_customer_id;

CREATE FUNCTION stripe_provision_v2(p_customer text, p_email text, p_event_id text)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO customers (stripe_customer_id, email)
    VALUES (p_customer, p_email)
    ON CONFLICT (stripe_customer_id) DO UPDATE
    SET email = COALESCE(EXCLUDED.email, customers.email), updated_at = now();
    IF p_email IS NOT NULL THEN
        -- The row is locked by the upsert above, so two checkouts of one customer cannot both
        -- find it unwelcomed.
        UPDATE customers SET welcomed_at = now()
        WHERE stripe_customer_id = p_customer AND welcomed_at IS NULL;
        IF FOUND THEN
            INSERT INTO outbox (topic, payload, provider, event_id, dedup_key)
            VALUES ('email.welcome',
                    jsonb_build_object('stripe_customer_id', p_customer, 'email', p_email),
                    'stripe', p_event_id, p_customer)
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
END
$$;

-- 2. Same-second ties. Stripe's `created` has one-second resolution, and a subscription is
-- typically created (incomplete) and updated (active) within one second. On a tie the event
-- of the later kind in a subscription's life wins: created (0) < updated (1) < deleted (2).
-- Two updates in one second stay ambiguous (nothing in the event orders them): the stored one
-- is kept.
ALTER TABLE subscriptions ADD COLUMN event_rank smallint NOT NULL DEFAULT 1;

COMMENT ON COLUMN subscriptions.event_rank IS
    'Kind of the event that set the state, for same-second ties: 0 created, 1 updated, '
    '2 deleted.';

-- V6 stored canceled only from a deletion (and kept it on every tie).
UPDATE subscriptions SET event_rank = 2 WHERE status = 'canceled';

CREATE FUNCTION stripe_keep_subscription_v2(
    p_subscription text,
    p_customer text,
    p_status text,
    p_event_created bigint,
    p_event_rank smallint
)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO subscriptions
        (stripe_subscription_id, stripe_customer_id, status, event_created, event_rank)
    VALUES (p_subscription, p_customer, p_status, to_timestamp(p_event_created), p_event_rank)
    ON CONFLICT (stripe_subscription_id) DO UPDATE
    SET stripe_customer_id = EXCLUDED.stripe_customer_id,
        status = EXCLUDED.status,
        event_created = EXCLUDED.event_created,
        event_rank = EXCLUDED.event_rank,
        updated_at = now()
    WHERE (subscriptions.event_created, subscriptions.event_rank)
        < (EXCLUDED.event_created, EXCLUDED.event_rank);
END
$$;

REVOKE EXECUTE ON FUNCTION
    stripe_provision_v2(text, text, text),
    stripe_keep_subscription_v2(text, text, text, bigint, smallint)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    stripe_provision_v2(text, text, text),
    stripe_keep_subscription_v2(text, text, text, bigint, smallint)
TO claimonce_handler;

-- 3. Least privilege. A handler could insert a ledger row with any received_at (the sweep
-- would then delete a fresh claim, and its redelivery would apply again) and an outbox row
-- with any dispatched_at (never relayed). Handlers now insert only the columns the claim and
-- the effects write; the functions run with the caller's rights (SECURITY INVOKER), so the
-- column grants are exactly what they can do.
REVOKE INSERT ON processed_events FROM claimonce_handler;
GRANT INSERT (provider, event_id, event_type, payload_sha256) ON processed_events
    TO claimonce_handler;

REVOKE INSERT ON outbox FROM claimonce_handler;
GRANT INSERT (topic, payload, provider, event_id, dedup_key) ON outbox TO claimonce_handler;

-- Grants nothing uses: the effects never update an email event (event_id is its key, written
-- once under the claim) nor a suppression (ON CONFLICT DO NOTHING keeps the first reason).
REVOKE UPDATE ON email_events, email_suppressions FROM claimonce_handler;

-- PostgreSQL 14 and older let every role create objects in `public`: a function planted
-- there could shadow one the sweep or a migration calls. Only the owner creates from now on.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
