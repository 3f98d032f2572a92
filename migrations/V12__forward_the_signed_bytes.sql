-- A forwarded event leaves as the bytes its sender signed (issue 22). Until now the outbox
-- kept a forwarded body as `jsonb` and the relay sent `payload::text`: jsonb reorders keys,
-- drops duplicates and adds spaces, so a consumer could not check the sender's signature, and
-- a body near the receiver's limit grew past what SQS takes.
--
-- `body` holds the signed bytes as text (the receiver forwards only UTF-8 JSON), and
-- `signature_header`/`signature` the header that signed them, as it arrived, so a consumer
-- holding the webhook secret can verify the message as a receiver would.
--
-- Rollout (expand first). The columns are nullable with no default: adding them rewrites
-- nothing. claimonce_forward_v2 writes `payload` as before as well as `body`, so the previous
-- release's relay, which reads `payload`, keeps working while the receivers are replaced; the
-- previous release's receivers keep calling claimonce_forward_v1, whose rows have no `body` and
-- leave the new relay in the old format. A later migration stops writing `payload` for
-- forwards once no released relay reads it.
ALTER TABLE outbox
    ADD COLUMN body text,
    ADD COLUMN signature_header text,
    ADD COLUMN signature text;

COMMENT ON COLUMN outbox.body IS
    'A forwarded event''s body exactly as its sender signed it (NULL for other messages).';
COMMENT ON COLUMN outbox.signature_header IS
    'The header that signed `body` (e.g. X-Hub-Signature-256), NULL when none is kept.';
COMMENT ON COLUMN outbox.signature IS
    'That header''s value as it arrived.';

-- The forward, gated as v1 is. The topic and the signature are bounded here so that every
-- forwarded message fits the room the shared crate leaves for its attributes beside the
-- body (`FORWARD_ATTRIBUTE_ROOM`); a provider passing more is a bug, answered 500.
CREATE FUNCTION claimonce_forward_v2(
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

COMMENT ON FUNCTION claimonce_forward_v2(text, text, text, text, text, text) IS
    'Queues a claimed event''s signed body in the outbox under a topic, with the header that '
    'signed it: the effect of an event that is only handed on.';

REVOKE EXECUTE ON FUNCTION claimonce_forward_v2(text, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION claimonce_forward_v2(text, text, text, text, text, text)
TO claimonce_stripe, claimonce_resend, claimonce_github;
