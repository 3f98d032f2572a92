-- One claim drives one effect call, even for a caller that forges the setting again.
--
-- claimonce_take_claim_v1 cleared the transaction-local setting that names the won claim's
-- ledger row, but anyone may set it: a stolen function login could claim one event, call an
-- effect, set the setting back to the same row and call another effect (or several) under
-- that one ledger row. The take now spends the claim on the row itself: it locks the ledger
-- row (FOR NO KEY UPDATE, a lock the transaction ends with) and refuses a row that is already
-- locked. A row this transaction inserted can be locked by no other transaction (none can see
-- it), so a nonzero xmax on it means an effect of this transaction took it already, at the top
-- level or in a savepoint; a savepoint rolled back with its effect leaves the claim spent, with
-- nothing applied. The lock writes no new row version: the cost is one lock record per
-- processed delivery (BENCHMARKS.md, "The database's claim gate").
--
-- claimonce_claim_held_v1 (the row-level security of Rust effects) refuses a spent claim too,
-- so no Rust-effect table is written after an SQL effect took the claim.

CREATE OR REPLACE FUNCTION claimonce_take_claim_v1(p_provider text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_event_id text;
BEGIN
    SELECT e.event_id INTO v_event_id
    FROM processed_events AS e
    WHERE e.ctid = nullif(current_setting('claimonce.claim', true), '')::tid
      AND e.provider = p_provider
      AND e.xmin = pg_current_xact_id()::xid
      AND e.xmax = '0'::xid
    FOR NO KEY UPDATE;
    IF v_event_id IS NULL THEN
        RAISE EXCEPTION 'claimonce: an effect runs only under a claim this transaction won and no effect took'
            USING ERRCODE = '42501';
    END IF;
    PERFORM set_config('claimonce.claim', '', true);
    RETURN v_event_id;
END
$$;

REVOKE EXECUTE ON FUNCTION claimonce_take_claim_v1(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION claimonce_claim_held_v1(p_provider text)
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
      AND e.xmin = pg_current_xact_id()::xid
      AND e.xmax = '0'::xid;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claimonce: this table is written only under a claim this transaction won and no effect took'
            USING ERRCODE = '42501';
    END IF;
    RETURN true;
END
$$;

COMMENT ON FUNCTION claimonce_claim_held_v1(text) IS
    'Row-level security for Rust effects: true under a claim this transaction won for the provider and no SQL effect took, else 42501.';
