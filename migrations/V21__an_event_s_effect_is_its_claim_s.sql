-- An effect that writes an event's id writes its claim's id, as the forwards do.
--
-- claimonce_take_claim_v1 returns the event id of the claim an effect spends, and
-- claimonce_forward_v1/_v2 refuse to write any other. resend_record_v2 and stripe_provision_v2
-- discarded it: a stolen Resend login that claimed message A could write message B's
-- email_events row and suppress B's recipients, and a Stripe login could put a welcome in the
-- outbox under another event's id. Both now refuse (42501) an event id that is not the claim's;
-- the code calls them with the claim's own, so a delivery sees no change.

CREATE OR REPLACE FUNCTION resend_record_v2(
    p_event_id text,
    p_email_id text,
    p_event_type text,
    p_recipients text[],
    p_occurred_at text,
    p_suppress_reason text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    IF claimonce_take_claim_v1('resend') IS DISTINCT FROM p_event_id THEN
        RAISE EXCEPTION 'claimonce: an effect writes the event of the claim it runs under'
            USING ERRCODE = '42501';
    END IF;
    INSERT INTO email_events (event_id, email_id, event_type, recipients, occurred_at)
    VALUES (p_event_id, p_email_id, p_event_type, p_recipients, CAST(p_occurred_at AS timestamptz))
    ON CONFLICT (event_id) DO NOTHING;
    IF p_suppress_reason IS NOT NULL THEN
        INSERT INTO email_suppressions (email, reason, source_event_id)
        SELECT address, p_suppress_reason, p_event_id FROM unnest(p_recipients) AS address
        ON CONFLICT (email) DO NOTHING;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION stripe_provision_v2(p_customer text, p_email text, p_event_id text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    IF claimonce_take_claim_v1('stripe') IS DISTINCT FROM p_event_id THEN
        RAISE EXCEPTION 'claimonce: an effect writes the event of the claim it runs under'
            USING ERRCODE = '42501';
    END IF;
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
