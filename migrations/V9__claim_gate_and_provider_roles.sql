-- The database enforces the claim gate (issue 22). Until V8 the gate lived only in the shared
-- crate, which composes the delivery statement: a function's own login could call an effect
-- with no claim, write the effect tables and the ledger directly, shadow the ledger with a
-- temporary table, and, as every webhook login shared claimonce_handler, run another
-- provider's effects. From here:
--
-- 1. Every function runs with its owner's rights (SECURITY DEFINER) and pins its search_path
--    (pg_catalog, public, then pg_temp last, so no temporary object can shadow a table).
-- 2. A won claim names its ledger row in a transaction-local setting, and every effect begins
--    by taking that claim (claimonce_take_claim_v1): it refuses (42501) unless the row it
--    names was inserted by this very transaction (its xmin is this transaction's id) for the
--    effect's own provider, and one claim drives one effect. A setting alone proves nothing
--    (anyone may set it); the ledger row is what the caller cannot forge, since only the
--    claim function inserts there.
-- 3. One role per provider: claimonce_stripe, claimonce_resend, claimonce_github. The claim
--    refuses a provider the session's login is not a member of, and each provider's effects
--    are executable by its role only.
-- 4. Function logins get no DML on the ledger, the outbox or any effect table (the jobs keep
--    their own roles and grants), and no TEMP on the database.
--
-- Rollout: the functions keep their names and signatures (CREATE OR REPLACE), so a binary of
-- the previous release, whose login is granted claimonce_handler, keeps working while this
-- migration is applied and afterwards: claimonce_handler is made a member of the three provider
-- roles for the transition. The migrate function moves each login it is told about
-- (DB_HANDLER_USERS `user:role`) onto its provider's role and out of claimonce_handler; a later
-- migration drops claimonce_handler once no deployment uses it.
--
-- Superseded functions that no released binary calls are dropped here: stripe_provision_v1
-- and stripe_keep_subscription_v1 (replaced by their _v2 in V7, whose binaries have shipped).

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_stripe') THEN
        CREATE ROLE claimonce_stripe NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_resend') THEN
        CREATE ROLE claimonce_resend NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_github') THEN
        CREATE ROLE claimonce_github NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_stripe, claimonce_resend, claimonce_github;
-- The transition: a login still granted only claimonce_handler claims as any provider.
GRANT claimonce_stripe, claimonce_resend, claimonce_github TO claimonce_handler;

-- No direct DML for function logins: everything they write goes through the functions below.
REVOKE ALL ON processed_events, outbox, customers, subscriptions, email_events,
    email_suppressions, github_installations, github_installation_repositories
    FROM claimonce_handler;

-- No temporary objects for anyone but those granted them by name (the owner and superusers
-- keep them): a temporary table stays on a pooled server connection for the next client.
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
END
$$;

DROP FUNCTION stripe_provision_v1(text, text, text);
DROP FUNCTION stripe_keep_subscription_v1(text, text, text, bigint, boolean);

-- The claim. As in V6, plus: the session's login must be a member of the provider's role, and
-- a won claim names its ledger row (its ctid) in a transaction-local setting for the effect.
CREATE OR REPLACE FUNCTION claimonce_claim_v1(
    p_provider text,
    p_event_id text,
    p_event_type text,
    p_payload_sha256 bytea,
    OUT won boolean,
    OUT stored_sha256 bytea
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
DECLARE
    v_row tid;
BEGIN
    IF NOT pg_has_role(session_user, 'claimonce_' || p_provider, 'MEMBER') THEN
        RAISE EXCEPTION 'claimonce: this login may not claim events of that provider'
            USING ERRCODE = '42501';
    END IF;
    INSERT INTO processed_events (provider, event_id, event_type, payload_sha256)
    VALUES (p_provider, p_event_id, p_event_type, p_payload_sha256)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING ctid INTO v_row;
    won := FOUND;
    IF won THEN
        PERFORM set_config('claimonce.claim', v_row::text, true);
    ELSE
        -- A new snapshot for this statement (the function is volatile): it sees the claim
        -- that the insert above waited for and found committed.
        SELECT e.payload_sha256 INTO stored_sha256
        FROM processed_events AS e
        WHERE e.provider = p_provider AND e.event_id = p_event_id;
    END IF;
END
$$;

-- The gate every effect passes first. Returns the claimed event id and spends the claim, so
-- one claim drives one effect. The setting names a row by its ctid (a TID scan, the cheapest
-- look-up there is); the row counts only if this very transaction inserted it (its xmin) for
-- this provider, which nobody but the claim function can do. Nothing updates a ledger row, so
-- its ctid does not move within the transaction. Not callable by function logins: only from
-- the effects, which run as the owner.
CREATE FUNCTION claimonce_take_claim_v1(p_provider text)
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
      AND e.xmin = pg_current_xact_id()::xid;
    IF v_event_id IS NULL THEN
        RAISE EXCEPTION 'claimonce: an effect runs only under a claim this transaction won'
            USING ERRCODE = '42501';
    END IF;
    PERFORM set_config('claimonce.claim', '', true);
    RETURN v_event_id;
END
$$;

REVOKE EXECUTE ON FUNCTION claimonce_take_claim_v1(text) FROM PUBLIC;

-- The effects: the bodies of V6-V8 behind the gate.

CREATE OR REPLACE FUNCTION stripe_provision_v2(p_customer text, p_email text, p_event_id text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    PERFORM claimonce_take_claim_v1('stripe');
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

CREATE OR REPLACE FUNCTION stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    PERFORM claimonce_take_claim_v1('stripe');
    INSERT INTO customers (stripe_customer_id, email, credit_balance_cents)
    VALUES (p_customer, p_email, p_amount_cents)
    ON CONFLICT (stripe_customer_id) DO UPDATE
    SET credit_balance_cents = customers.credit_balance_cents + EXCLUDED.credit_balance_cents,
        email = COALESCE(customers.email, EXCLUDED.email),
        updated_at = now();
END
$$;

CREATE OR REPLACE FUNCTION stripe_keep_subscription_v2(
    p_subscription text,
    p_customer text,
    p_status text,
    p_event_created bigint,
    p_event_rank smallint
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
AS $$
BEGIN
    PERFORM claimonce_take_claim_v1('stripe');
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

-- Resend, v2: an event claimed again after its ledger row was swept (or deleted by an
-- operator's replay) finds its email_events row from the first time. v1 failed on its primary
-- key on every retry; v2 keeps the first row and still suppresses (idempotent).
CREATE FUNCTION resend_record_v2(
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
    PERFORM claimonce_take_claim_v1('resend');
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

-- V6's Resend effect, for the previous release's binary: now v2's body (a redelivery after the
-- sweep no longer fails there either).
CREATE OR REPLACE FUNCTION resend_record_v1(
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
    PERFORM resend_record_v2(p_event_id, p_email_id, p_event_type, p_recipients, p_occurred_at,
                             p_suppress_reason);
END
$$;

-- The forward is every provider's: the claim it takes must be for the identity it is given,
-- which the shared crate passes from the claim's own parameters.
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
    INSERT INTO outbox (topic, payload, provider, event_id)
    VALUES (p_topic, CAST(p_payload AS jsonb), p_provider, p_event_id);
END
$$;

CREATE OR REPLACE FUNCTION github_keep_installation_v1(
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

-- Who may call what. The claim and the forward are every provider's; each effect is its
-- provider's only; claimonce_handler has them all through its membership of the three.
REVOKE EXECUTE ON FUNCTION resend_record_v2(text, text, text, text[], text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    claimonce_forward_v1(text, text, text, text)
TO claimonce_stripe, claimonce_resend, claimonce_github;
GRANT EXECUTE ON FUNCTION
    stripe_provision_v2(text, text, text),
    stripe_credit_v1(text, text, bigint),
    stripe_keep_subscription_v2(text, text, text, bigint, smallint)
TO claimonce_stripe;
GRANT EXECUTE ON FUNCTION
    resend_record_v1(text, text, text, text[], text, text),
    resend_record_v2(text, text, text, text[], text, text)
TO claimonce_resend;
GRANT EXECUTE ON FUNCTION
    github_keep_installation_v1(bigint, text, bigint, text, text, text, smallint, bigint[],
        text[], bigint[])
TO claimonce_github;
