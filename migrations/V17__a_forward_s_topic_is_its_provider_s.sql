-- A forward's topic belongs to the provider whose claim it runs under. The forward already
-- carries the claim's provider and event id (the gate, V9), but the topic was free: a login
-- that stole one provider's role could, under a claim of its own, put a message on another
-- provider's topic (GitHub's login writing `email.welcome` with a customer's payload), and the
-- relay would hand it to that topic's consumer. A provider's forwards are now named
-- `<provider>.<anything>` (GitHub's are `github.<event>`), and any other topic is refused
-- before anything is written. Topics a provider's own effect writes (Stripe's
-- `email.welcome`) are written by that effect, never through a forward.

CREATE OR REPLACE FUNCTION claimonce_forward_v1(
    p_provider text,
    p_event_id text,
    p_topic text,
    p_payload text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    IF claimonce_take_claim_v1(p_provider) IS DISTINCT FROM p_event_id THEN
        RAISE EXCEPTION 'claimonce: a forward carries the identity of the claim it runs under'
            USING ERRCODE = '42501';
    END IF;
    IF left(p_topic, length(p_provider) + 1) IS DISTINCT FROM p_provider || '.' THEN
        RAISE EXCEPTION 'claimonce: a forward''s topic is named after its provider'
            USING ERRCODE = '42501';
    END IF;
    INSERT INTO outbox (topic, payload, provider, event_id)
    VALUES (p_topic, CAST(p_payload AS jsonb), p_provider, p_event_id);
END
$$;

CREATE OR REPLACE FUNCTION claimonce_forward_v2(
    p_provider text,
    p_event_id text,
    p_topic text,
    p_body text,
    p_signature_header text,
    p_signature text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    IF claimonce_take_claim_v1(p_provider) IS DISTINCT FROM p_event_id THEN
        RAISE EXCEPTION 'claimonce: a forward carries the identity of the claim it runs under'
            USING ERRCODE = '42501';
    END IF;
    IF left(p_topic, length(p_provider) + 1) IS DISTINCT FROM p_provider || '.' THEN
        RAISE EXCEPTION 'claimonce: a forward''s topic is named after its provider'
            USING ERRCODE = '42501';
    END IF;
    IF octet_length(p_topic) > 128 OR octet_length(p_signature_header) > 64
        OR octet_length(p_signature) > 256 THEN
        RAISE EXCEPTION 'claimonce: a forward''s topic or signature is longer than its room'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO outbox (topic, payload, body, signature_header, signature, provider, event_id)
    VALUES (p_topic, CAST(p_body AS jsonb), p_body, p_signature_header, p_signature,
            p_provider, p_event_id);
END
$$;
