-- Effects written in Rust (claimonce::effect): a provider's function login writes its own
-- tables with plain statements on the claim's transaction, not through a SECURITY DEFINER
-- function. The database guards those tables as it guards the SQL effects (V9): a provider's
-- migration grants its role the DML a Rust effect needs on a table, enables row-level
-- security on it, and adds a policy that calls this function, so a statement that reads or
-- writes a row there outside a claim this very transaction won for that provider is refused
-- (42501), whatever the client sends.
--
-- Unlike claimonce_take_claim_v1 it does not spend the claim: a Rust effect sends several
-- statements under one claim. The claim's ledger row is found as the take does: by the ctid
-- the won claim put in the transaction-local setting, counted only if this transaction
-- inserted it (its xmin), which nobody but the claim function can do.

CREATE FUNCTION claimonce_claim_held_v1(p_provider text)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    PERFORM 1
    FROM processed_events AS e
    WHERE e.ctid = nullif(current_setting('claimonce.claim', true), '')::tid
      AND e.provider = p_provider
      AND e.xmin = pg_current_xact_id()::xid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claimonce: this table is written only under a claim this transaction won'
            USING ERRCODE = '42501';
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION claimonce_claim_held_v1(text) IS
    'Row-level security for Rust effects: true under a claim this transaction won for the provider, else 42501.';

-- Each provider's migration grants it to its own role, with the policies that use it.
REVOKE EXECUTE ON FUNCTION claimonce_claim_held_v1(text) FROM PUBLIC;
