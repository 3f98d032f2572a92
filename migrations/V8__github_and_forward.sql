-- GitHub, and forwarding a claimed event to the outbox unchanged.
--
-- 1. Forwarding. `claimonce_forward_v1` is the effect of any event a provider hands on
-- without a table of its own ("verified, exactly once, onto a queue"): it inserts the signed
-- body into the outbox under a topic, tagged with the claim's provider and event id, in the
-- claim's transaction. The shared crate passes the claim's own `$1, $2` first, so a provider
-- cannot tag a forwarded event with another event's identity. The body reaches it as text,
-- already checked by the receiver to be JSON that `jsonb` accepts (no `\u0000`).

CREATE FUNCTION claimonce_forward_v1(
    p_provider text,
    p_event_id text,
    p_topic text,
    p_payload text
)
RETURNS void
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $$
BEGIN
    INSERT INTO outbox (topic, payload, provider, event_id)
    VALUES (p_topic, CAST(p_payload AS jsonb), p_provider, p_event_id);
END
$$;

COMMENT ON FUNCTION claimonce_forward_v1(text, text, text, text) IS
    'Queues a claimed event''s body in the outbox under a topic: the effect of an event that '
    'is only handed on.';

-- 2. GitHub App installations, kept newest-first from `installation` and
-- `installation_repositories` events, which GitHub may deliver out of order.
--
-- Order. GitHub's deliveries carry no signed timestamp; the payload's
-- `installation.updated_at` is the installation's own last change, and it is what orders two
-- events about one installation. A same-second tie goes to the later kind of event (created
-- < any other < deleted). What stays ambiguous: two changes of one kind in the same second
-- (a suspend and an unsuspend in one second keep whichever arrived first).
--
-- A deleted installation is a tombstone: GitHub never reuses an installation id, so nothing
-- that arrives after the deletion (a late `created`, a replay) brings it back.
CREATE TABLE github_installations (
    installation_id      bigint      PRIMARY KEY,
    account_login        text        NOT NULL,
    account_id           bigint      NOT NULL,
    -- 'all' or 'selected'.
    repository_selection text        NOT NULL,
    state                text        NOT NULL CHECK (state IN ('active', 'suspended', 'deleted')),
    -- The ordering key of the event that wrote the row: installation.updated_at, then the
    -- event's rank.
    source_updated_at    timestamptz NOT NULL,
    source_rank          smallint    NOT NULL,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- The repositories an installation with selected repositories can reach. A removed
-- repository stays as a row (present = false), so a late `added` older than the removal
-- loses to it.
CREATE TABLE github_installation_repositories (
    installation_id   bigint      NOT NULL,
    repository_id     bigint      NOT NULL,
    full_name         text        NOT NULL,
    present           boolean     NOT NULL,
    source_updated_at timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (installation_id, repository_id)
);

GRANT SELECT, INSERT, UPDATE ON github_installations, github_installation_repositories
    TO claimonce_handler;

-- Keeps the installation's newest state. `p_state` is the state the event leaves it in;
-- `p_rank` breaks a same-second tie (0 created, 1 other, 2 deleted). `p_added_*` are the
-- repositories the event says it can reach (created: `repositories`; added:
-- `repositories_added`), `p_removed_ids` those it says it lost; each repository row is kept
-- newest-first on its own, by the same `updated_at`.
CREATE FUNCTION github_keep_installation_v1(
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
SET lock_timeout = '2s'
AS $$
DECLARE
    v_at timestamptz := CAST(p_source_updated_at AS timestamptz);
BEGIN
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

    INSERT INTO github_installation_repositories AS r
        (installation_id, repository_id, full_name, present, source_updated_at)
    SELECT p_installation_id, d.id, '', false, v_at
    FROM unnest(p_removed_ids) AS d (id)
    ON CONFLICT (installation_id, repository_id) DO UPDATE
    SET present = false,
        source_updated_at = EXCLUDED.source_updated_at,
        updated_at = now()
    WHERE r.source_updated_at < EXCLUDED.source_updated_at;
END
$$;

REVOKE EXECUTE ON FUNCTION
    claimonce_forward_v1(text, text, text, text),
    github_keep_installation_v1(bigint, text, bigint, text, text, text, smallint, bigint[],
        text[], bigint[])
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    claimonce_forward_v1(text, text, text, text),
    github_keep_installation_v1(bigint, text, bigint, text, text, text, smallint, bigint[],
        text[], bigint[])
TO claimonce_handler;
