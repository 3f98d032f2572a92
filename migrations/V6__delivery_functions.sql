-- One statement per delivery. The claim and every effect are PL/pgSQL functions, and the
-- shared crate sends one unnamed statement per delivery:
--
--   SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN <effect>_v<n>($5, ...) END
--   FROM claimonce_claim_v1($1, $2, $3, $4) AS c
--
-- The claim runs first (it is the row source) and the effect runs only for a row whose claim
-- was won; both run in the statement's one implicit transaction, so they commit together or
-- not at all. PL/pgSQL keeps the plans of the statements inside a function for the life of
-- the server connection, so an unnamed call through a transaction pooler runs at about the
-- speed of a prepared statement, with nothing left on the session for the pooler to pin.
--
-- Bounds live here, not on the wire: each function carries its own lock_timeout (a
-- concurrent duplicate waits at most this long for the first delivery's claim); the login
-- role's statement_timeout (set by the migrate function) bounds the whole statement.
--
-- Names carry a version. A changed signature or meaning is a new function (`_v2`) added by a
-- new migration, while the old one stays for the functions still running the older code
-- during a deployment; a later migration drops it.

CREATE FUNCTION claimonce_claim_v1(
    p_provider text,
    p_event_id text,
    p_event_type text,
    p_payload_sha256 bytea,
    OUT won boolean,
    OUT stored_sha256 bytea
)
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO processed_events (provider, event_id, event_type, payload_sha256)
    VALUES (p_provider, p_event_id, p_event_type, p_payload_sha256)
    ON CONFLICT (provider, event_id) DO NOTHING;
    won := FOUND;
    IF NOT won THEN
        -- A new snapshot for this statement (the function is volatile): it sees the claim
        -- that the insert above waited for and found committed.
        SELECT e.payload_sha256 INTO stored_sha256
        FROM processed_events AS e
        WHERE e.provider = p_provider AND e.event_id = p_event_id;
    END IF;
END
$$;

COMMENT ON FUNCTION claimonce_claim_v1(text, text, text, bytea) IS
    'Claims (provider, event_id) in the ledger: won = true for the first delivery; for a '
    'duplicate, won = false and the first delivery''s payload hash.';

-- Stripe: checkout.session.completed provisions the customer and queues one welcome email
-- per customer through the outbox (only when Stripe sent an address). The outbox insert
-- names no conflict target: naming one needs SELECT on the outbox, which handlers lack.
CREATE FUNCTION stripe_provision_v1(p_customer text, p_email text, p_event_id text)
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
        INSERT INTO outbox (topic, payload, provider, event_id, dedup_key)
        VALUES ('email.welcome',
                jsonb_build_object('stripe_customer_id', p_customer, 'email', p_email),
                'stripe', p_event_id, p_customer)
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;

-- Stripe: invoice.paid credits the account, creating the customer if it is not known yet.
CREATE FUNCTION stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO customers (stripe_customer_id, email, credit_balance_cents)
    VALUES (p_customer, p_email, p_amount_cents)
    ON CONFLICT (stripe_customer_id) DO UPDATE
    SET credit_balance_cents = customers.credit_balance_cents + EXCLUDED.credit_balance_cents,
        email = COALESCE(customers.email, EXCLUDED.email),
        updated_at = now();
END
$$;

-- Stripe: customer.subscription.* keeps the newest state. A stored state is replaced only by
-- a strictly newer event, or on a tie by a deletion (a subscription cannot come back from
-- canceled).
CREATE FUNCTION stripe_keep_subscription_v1(
    p_subscription text,
    p_customer text,
    p_status text,
    p_event_created bigint,
    p_deleted boolean
)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO subscriptions (stripe_subscription_id, stripe_customer_id, status, event_created)
    VALUES (p_subscription, p_customer, p_status, to_timestamp(p_event_created))
    ON CONFLICT (stripe_subscription_id) DO UPDATE
    SET stripe_customer_id = EXCLUDED.stripe_customer_id,
        status = EXCLUDED.status,
        event_created = EXCLUDED.event_created,
        updated_at = now()
    WHERE subscriptions.event_created < EXCLUDED.event_created
       OR (subscriptions.event_created = EXCLUDED.event_created AND p_deleted);
END
$$;

-- Resend: every email.* event is recorded (p_occurred_at is the event's RFC 3339 created_at,
-- checked by the parser); when p_suppress_reason is given, the recipients
-- are suppressed too (the first reason an address was suppressed is kept).
CREATE FUNCTION resend_record_v1(
    p_event_id text,
    p_email_id text,
    p_event_type text,
    p_recipients text[],
    p_occurred_at text,
    p_suppress_reason text
)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO email_events (event_id, email_id, event_type, recipients, occurred_at)
    VALUES (p_event_id, p_email_id, p_event_type, p_recipients, CAST(p_occurred_at AS timestamptz));
    IF p_suppress_reason IS NOT NULL THEN
        INSERT INTO email_suppressions (email, reason, source_event_id)
        SELECT address, p_suppress_reason, p_event_id FROM unnest(p_recipients) AS address
        ON CONFLICT (email) DO NOTHING;
    END IF;
END
$$;

-- Functions run with the caller's privileges (SECURITY INVOKER): a handler can do through
-- them exactly what its table grants allow, no more. Only the handlers call them.
REVOKE EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    stripe_provision_v1(text, text, text),
    stripe_credit_v1(text, text, bigint),
    stripe_keep_subscription_v1(text, text, text, bigint, boolean),
    resend_record_v1(text, text, text, text[], text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    stripe_provision_v1(text, text, text),
    stripe_credit_v1(text, text, bigint),
    stripe_keep_subscription_v1(text, text, text, bigint, boolean),
    resend_record_v1(text, text, text, text[], text, text)
TO claimonce_handler;
