-- GitHub repositories follow the installation's rules (issue 22):
--
-- 1. Removal wins a tie. V8 kept a repository row newest-first by `installation.updated_at`
--    with a strict comparison on both sides, so an `added` and a `removed` of the same second
--    left whichever arrived first: a same-second add then remove left the repository present.
-- 2. A deleted installation reaches no repository. Its own `deleted` event lists the
--    repositories it had, which V8 stored as present, and later additions landed on the
--    tombstone. Now the deletion marks every repository row of the installation absent, and
--    nothing adds one to a deleted installation again.
--
-- github_keep_installation_v1 stays (gated by V9) for the previous release's binary.

CREATE FUNCTION github_keep_installation_v2(
    p_installation_id bigint,
    p_account_login text,
    p_account_id bigint,
    p_repository_selection text,
    p_state text,
    p_source_updated_at text,
    p_rank smallint,
    p_added_ids bigint[],
    p_added_names text[],
    p_removed_ids bigint[]
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    v_at timestamptz := CAST(p_source_updated_at AS timestamptz);
    v_deleted boolean;
BEGIN
    PERFORM claimonce_take_claim_v1('github');
    INSERT INTO github_installations AS i
        (installation_id, account_login, account_id, repository_selection, state,
         source_updated_at, source_rank)
    VALUES (p_installation_id, p_account_login, p_account_id, p_repository_selection, p_state,
            v_at, p_rank)
    ON CONFLICT (installation_id) DO UPDATE
    SET account_login = EXCLUDED.account_login,
        account_id = EXCLUDED.account_id,
        repository_selection = EXCLUDED.repository_selection,
        state = EXCLUDED.state,
        source_updated_at = EXCLUDED.source_updated_at,
        source_rank = EXCLUDED.source_rank,
        updated_at = now()
    WHERE i.state <> 'deleted'
        AND (i.source_updated_at, i.source_rank) < (EXCLUDED.source_updated_at, EXCLUDED.source_rank);

    -- The row is locked by the upsert above: its state is this transaction's to read.
    SELECT i.state = 'deleted' INTO v_deleted
    FROM github_installations AS i
    WHERE i.installation_id = p_installation_id;

    IF v_deleted THEN
        UPDATE github_installation_repositories AS r
        SET present = false, source_updated_at = greatest(r.source_updated_at, v_at),
            updated_at = now()
        WHERE r.installation_id = p_installation_id AND r.present;
        RETURN;
    END IF;

    INSERT INTO github_installation_repositories AS r
        (installation_id, repository_id, full_name, present, source_updated_at)
    SELECT p_installation_id, a.id, a.full_name, true, v_at
    FROM unnest(p_added_ids, p_added_names) AS a (id, full_name)
    ON CONFLICT (installation_id, repository_id) DO UPDATE
    SET full_name = EXCLUDED.full_name,
        present = true,
        source_updated_at = EXCLUDED.source_updated_at,
        updated_at = now()
    WHERE r.source_updated_at < EXCLUDED.source_updated_at;

    -- A removal of the same second as the stored state wins it.
    INSERT INTO github_installation_repositories AS r
        (installation_id, repository_id, full_name, present, source_updated_at)
    SELECT p_installation_id, d.id, '', false, v_at
    FROM unnest(p_removed_ids) AS d (id)
    ON CONFLICT (installation_id, repository_id) DO UPDATE
    SET present = false,
        source_updated_at = EXCLUDED.source_updated_at,
        updated_at = now()
    WHERE r.source_updated_at <= EXCLUDED.source_updated_at;
END
$$;

REVOKE EXECUTE ON FUNCTION
    github_keep_installation_v2(bigint, text, bigint, text, text, text, smallint, bigint[],
        text[], bigint[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    github_keep_installation_v2(bigint, text, bigint, text, text, text, smallint, bigint[],
        text[], bigint[])
TO claimonce_github;
