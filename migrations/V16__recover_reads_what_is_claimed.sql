-- What a recover function asks before it applies what it listed from its sender: which of
-- these event ids the ledger already holds for its provider (applied by the webhook, or by an
-- earlier run). Without it a run spends its cap on the same events every time, and never
-- reaches the ones behind them. Only a login of the provider's role may ask, as for the claim;
-- it returns ids it was given, never a payload or a fingerprint.

CREATE FUNCTION claimonce_claimed_v1(p_provider text, p_event_ids text[])
RETURNS SETOF text
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    IF NOT pg_has_role(session_user, 'claimonce_' || p_provider, 'MEMBER') THEN
        RAISE EXCEPTION 'claimonce: this login may not read that provider''s ledger'
            USING ERRCODE = '42501';
    END IF;
    RETURN QUERY
        SELECT e.event_id
        FROM processed_events AS e
        WHERE e.provider = p_provider
          AND e.event_id = ANY (p_event_ids);
END
$$;

COMMENT ON FUNCTION claimonce_claimed_v1(text, text[]) IS
    'The ids among p_event_ids that the ledger holds for p_provider; for that provider''s logins only.';

REVOKE EXECUTE ON FUNCTION claimonce_claimed_v1(text, text[]) FROM PUBLIC;

-- The roles that exist now (a provider left out of a deployment has none); a provider added
-- later grants its role this in its own migration, as it does the claim.
DO $$
DECLARE
    v_role text;
BEGIN
    FOR v_role IN
        SELECT rolname FROM pg_roles
        WHERE rolname IN ('claimonce_handler', 'claimonce_stripe', 'claimonce_resend',
                          'claimonce_github', 'claimonce_shopify')
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION claimonce_claimed_v1(text, text[]) TO %I',
                       v_role);
    END LOOP;
END
$$;
