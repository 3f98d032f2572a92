-- The schema every migration leaves, functions and grants included: what a fresh
-- database looks like after `migrate`. Rendered with pg_dump --schema-only; a test
-- (migrations::the_committed_schema_is_what_the_migrations_make) fails when it is
-- stale: CLAIMONCE_WRITE_SCHEMA=1 cargo test --test integration committed_schema
-- writes it again. Not applied by anything: the migrations are the source.
SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

CREATE FUNCTION public.claimonce_claim_held_v1(p_provider text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

COMMENT ON FUNCTION public.claimonce_claim_held_v1(p_provider text) IS 'Row-level security for Rust effects: true under a claim this transaction won for the provider and no SQL effect took, else 42501.';

CREATE FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) RETURNS record
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

COMMENT ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) IS 'Claims (provider, event_id) in the ledger: won = true for the first delivery; for a duplicate, won = false and the first delivery''s payload hash.';

CREATE FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) RETURNS SETOF text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

COMMENT ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) IS 'The ids among p_event_ids that the ledger holds for p_provider; for that provider''s logins only.';

CREATE FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

COMMENT ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) IS 'Queues a claimed event''s body in the outbox under a topic: the effect of an event that is only handed on.';

CREATE FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

COMMENT ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) IS 'Queues a claimed event''s signed body in the outbox under a topic, with the header that signed it: the effect of an event that is only handed on.';

CREATE FUNCTION public.claimonce_take_claim_v1(p_provider text) RETURNS text
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
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

CREATE FUNCTION public.github_keep_installation_v1(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

CREATE FUNCTION public.github_keep_installation_v2(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

CREATE FUNCTION public.resend_record_v1(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
    AS $$
BEGIN
    PERFORM resend_record_v2(p_event_id, p_email_id, p_event_type, p_recipients, p_occurred_at,
                             p_suppress_reason);
END
$$;

CREATE FUNCTION public.resend_record_v2(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

CREATE FUNCTION public.shopify_keep_order_v1(p_order_id bigint, p_state text, p_updated_at text, p_rank smallint, p_email text, p_financial_status text, p_total_price text, p_currency text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
    AS $$
DECLARE
    v_at timestamptz := CAST(p_updated_at AS timestamptz);
BEGIN
    PERFORM claimonce_take_claim_v1('shopify');
    INSERT INTO shopify_orders AS o (order_id, state, email, financial_status, total_price,
        currency, source_updated_at, source_rank)
    VALUES (p_order_id, p_state, p_email, p_financial_status, CAST(p_total_price AS numeric),
        p_currency, v_at, p_rank)
    ON CONFLICT (order_id) DO UPDATE SET
        state = CASE WHEN o.state = 'cancelled' THEN 'cancelled' ELSE EXCLUDED.state END,
        email = EXCLUDED.email,
        financial_status = EXCLUDED.financial_status,
        total_price = EXCLUDED.total_price,
        currency = EXCLUDED.currency,
        source_updated_at = EXCLUDED.source_updated_at,
        source_rank = EXCLUDED.source_rank,
        updated_at = now()
    WHERE (EXCLUDED.source_updated_at, EXCLUDED.source_rank)
        > (o.source_updated_at, o.source_rank);
END
$$;

COMMENT ON FUNCTION public.shopify_keep_order_v1(p_order_id bigint, p_state text, p_updated_at text, p_rank smallint, p_email text, p_financial_status text, p_total_price text, p_currency text) IS 'Shopify orders/*: keeps the order''s newest state (a cancellation wins a tie and stays).';

CREATE FUNCTION public.shopify_mark_uninstalled_v1(p_shop_id bigint, p_domain text, p_updated_at text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
    AS $$
BEGIN
    PERFORM claimonce_take_claim_v1('shopify');
    INSERT INTO shopify_shops AS s (myshopify_domain, shop_id, uninstalled_at)
    VALUES (p_domain, p_shop_id, CAST(p_updated_at AS timestamptz))
    ON CONFLICT (myshopify_domain) DO UPDATE SET
        shop_id = EXCLUDED.shop_id,
        uninstalled_at = EXCLUDED.uninstalled_at
    WHERE EXCLUDED.uninstalled_at > s.uninstalled_at;
END
$$;

COMMENT ON FUNCTION public.shopify_mark_uninstalled_v1(p_shop_id bigint, p_domain text, p_updated_at text) IS 'Shopify app/uninstalled: marks the shop with the newest uninstall time.';

CREATE FUNCTION public.stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

CREATE FUNCTION public.stripe_keep_subscription_v2(p_subscription text, p_customer text, p_status text, p_event_created bigint, p_event_rank smallint) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

CREATE FUNCTION public.stripe_provision_v2(p_customer text, p_email text, p_event_id text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    SET lock_timeout TO '2s'
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

SET default_tablespace = '';

SET default_table_access_method = heap;

CREATE TABLE public.customers (
    stripe_customer_id text NOT NULL,
    email text,
    credit_balance_cents bigint DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    welcomed_at timestamp with time zone
);

COMMENT ON COLUMN public.customers.welcomed_at IS 'When the welcome email was queued in the outbox; NULL until then. Never cleared.';

CREATE TABLE public.email_events (
    event_id text NOT NULL,
    email_id text,
    event_type text NOT NULL,
    recipients text[] DEFAULT '{}'::text[] NOT NULL,
    occurred_at timestamp with time zone,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.email_suppressions (
    email text NOT NULL,
    reason text NOT NULL,
    source_event_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.github_installation_repositories (
    installation_id bigint NOT NULL,
    repository_id bigint NOT NULL,
    full_name text NOT NULL,
    present boolean NOT NULL,
    source_updated_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.github_installations (
    installation_id bigint NOT NULL,
    account_login text NOT NULL,
    account_id bigint NOT NULL,
    repository_selection text NOT NULL,
    state text NOT NULL,
    source_updated_at timestamp with time zone NOT NULL,
    source_rank smallint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT github_installations_state_check CHECK ((state = ANY (ARRAY['active'::text, 'suspended'::text, 'deleted'::text])))
);

CREATE TABLE public.outbox (
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    topic text NOT NULL,
    payload jsonb NOT NULL,
    provider text,
    event_id text,
    dedup_key text,
    dispatched_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    last_attempt_at timestamp with time zone,
    last_error text,
    next_attempt_at timestamp with time zone,
    dead_at timestamp with time zone,
    body text,
    signature_header text,
    signature text,
    CONSTRAINT outbox_topic_check CHECK ((topic <> ''::text))
);

COMMENT ON TABLE public.outbox IS 'Messages written by webhook effects in the claim transaction, handed on by the outbox relay (idempotency key = id). Handlers insert only; the relay reads and marks; the retention sweep deletes dispatched rows older than RETENTION_DAYS.';

COMMENT ON COLUMN public.outbox.next_attempt_at IS 'Not before this time is a failed row tried again (NULL: at once).';

COMMENT ON COLUMN public.outbox.dead_at IS 'When the relay set the row aside after its last allowed attempt; NULL while it is tried.';

COMMENT ON COLUMN public.outbox.body IS 'A forwarded event''s body exactly as its sender signed it (NULL for other messages).';

COMMENT ON COLUMN public.outbox.signature_header IS 'The header that signed `body` (e.g. X-Hub-Signature-256), NULL when none is kept.';

COMMENT ON COLUMN public.outbox.signature IS 'That header''s value as it arrived.';

ALTER TABLE public.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.processed_events (
    id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    payload_sha256 bytea
);

COMMENT ON TABLE public.processed_events IS 'Exactly-once claim ledger. Append-only: handlers insert and read, never update or delete. Retention: rows older than RETENTION_DAYS (default 90 days, past the senders'' retry windows of 3 days) are removed by the retention sweep only; a redelivery after that would be applied again.';

COMMENT ON COLUMN public.processed_events.payload_sha256 IS 'SHA-256 of the raw body of the first delivery; a duplicate with another hash is logged.';

ALTER TABLE public.processed_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.processed_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    sha256 bytea NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.shopify_order_events (
    id bigint NOT NULL,
    order_id bigint NOT NULL,
    event_id text NOT NULL,
    topic text NOT NULL,
    state text NOT NULL,
    order_updated_at timestamp with time zone NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE public.shopify_order_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.shopify_order_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.shopify_orders (
    order_id bigint NOT NULL,
    state text NOT NULL,
    email text,
    financial_status text,
    total_price numeric,
    currency text,
    source_updated_at timestamp with time zone NOT NULL,
    source_rank smallint NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT shopify_orders_state_check CHECK ((state = ANY (ARRAY['open'::text, 'cancelled'::text])))
);

CREATE TABLE public.shopify_shops (
    myshopify_domain text NOT NULL,
    shop_id bigint NOT NULL,
    uninstalled_at timestamp with time zone NOT NULL
);

CREATE TABLE public.subscriptions (
    stripe_subscription_id text NOT NULL,
    stripe_customer_id text,
    status text NOT NULL,
    event_created timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    event_rank smallint DEFAULT 1 NOT NULL
);

COMMENT ON COLUMN public.subscriptions.event_rank IS 'Kind of the event that set the state, for same-second ties: 0 created, 1 updated, 2 deleted.';

ALTER TABLE ONLY public.customers
    ADD CONSTRAINT customers_pkey PRIMARY KEY (stripe_customer_id);

ALTER TABLE ONLY public.email_events
    ADD CONSTRAINT email_events_pkey PRIMARY KEY (event_id);

ALTER TABLE ONLY public.email_suppressions
    ADD CONSTRAINT email_suppressions_pkey PRIMARY KEY (email);

ALTER TABLE ONLY public.github_installation_repositories
    ADD CONSTRAINT github_installation_repositories_pkey PRIMARY KEY (installation_id, repository_id);

ALTER TABLE ONLY public.github_installations
    ADD CONSTRAINT github_installations_pkey PRIMARY KEY (installation_id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.outbox
    ADD CONSTRAINT outbox_topic_dedup_key_key UNIQUE (topic, dedup_key);

ALTER TABLE ONLY public.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.processed_events
    ADD CONSTRAINT processed_events_provider_event_id_key UNIQUE (provider, event_id);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.shopify_order_events
    ADD CONSTRAINT shopify_order_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.shopify_orders
    ADD CONSTRAINT shopify_orders_pkey PRIMARY KEY (order_id);

ALTER TABLE ONLY public.shopify_shops
    ADD CONSTRAINT shopify_shops_pkey PRIMARY KEY (myshopify_domain);

ALTER TABLE ONLY public.subscriptions
    ADD CONSTRAINT subscriptions_pkey PRIMARY KEY (stripe_subscription_id);

CREATE INDEX email_events_email_id_idx ON public.email_events USING btree (email_id);

CREATE INDEX outbox_dispatched_at_idx ON public.outbox USING btree (dispatched_at) WHERE (dispatched_at IS NOT NULL);

CREATE INDEX outbox_event_idx ON public.outbox USING btree (provider, event_id);

CREATE INDEX outbox_undispatched_idx ON public.outbox USING btree (id) WHERE (dispatched_at IS NULL);

CREATE INDEX processed_events_received_at_idx ON public.processed_events USING btree (received_at);

CREATE UNIQUE INDEX shopify_order_events_event ON public.shopify_order_events USING btree (event_id);

CREATE INDEX shopify_order_events_order ON public.shopify_order_events USING btree (order_id, order_updated_at);

CREATE UNIQUE INDEX shopify_order_events_version ON public.shopify_order_events USING btree (order_id, topic, state, order_updated_at);

CREATE INDEX subscriptions_customer_idx ON public.subscriptions USING btree (stripe_customer_id);

ALTER TABLE public.shopify_order_events ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.shopify_orders ENABLE ROW LEVEL SECURITY;

CREATE POLICY under_a_claim ON public.shopify_order_events TO claimonce_shopify USING (public.claimonce_claim_held_v1('shopify'::text)) WITH CHECK (public.claimonce_claim_held_v1('shopify'::text));

CREATE POLICY under_a_claim ON public.shopify_orders TO claimonce_shopify USING (public.claimonce_claim_held_v1('shopify'::text)) WITH CHECK (public.claimonce_claim_held_v1('shopify'::text));

GRANT USAGE ON SCHEMA public TO claimonce_handler;
GRANT USAGE ON SCHEMA public TO claimonce_sweeper;
GRANT USAGE ON SCHEMA public TO claimonce_relay;
GRANT USAGE ON SCHEMA public TO claimonce_stripe;
GRANT USAGE ON SCHEMA public TO claimonce_resend;
GRANT USAGE ON SCHEMA public TO claimonce_github;
GRANT USAGE ON SCHEMA public TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.claimonce_claim_held_v1(p_provider text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claimonce_claim_held_v1(p_provider text) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) TO claimonce_handler;
GRANT ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) TO claimonce_stripe;
GRANT ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) TO claimonce_resend;
GRANT ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) TO claimonce_github;
GRANT ALL ON FUNCTION public.claimonce_claim_v1(p_provider text, p_event_id text, p_event_type text, p_payload_sha256 bytea, OUT won boolean, OUT stored_sha256 bytea) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) TO claimonce_handler;
GRANT ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) TO claimonce_stripe;
GRANT ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) TO claimonce_resend;
GRANT ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) TO claimonce_github;
GRANT ALL ON FUNCTION public.claimonce_claimed_v1(p_provider text, p_event_ids text[]) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) TO claimonce_handler;
GRANT ALL ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) TO claimonce_stripe;
GRANT ALL ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) TO claimonce_resend;
GRANT ALL ON FUNCTION public.claimonce_forward_v1(p_provider text, p_event_id text, p_topic text, p_payload text) TO claimonce_github;

REVOKE ALL ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) TO claimonce_stripe;
GRANT ALL ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) TO claimonce_resend;
GRANT ALL ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) TO claimonce_github;
GRANT ALL ON FUNCTION public.claimonce_forward_v2(p_provider text, p_event_id text, p_topic text, p_body text, p_signature_header text, p_signature text) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.claimonce_take_claim_v1(p_provider text) FROM PUBLIC;

REVOKE ALL ON FUNCTION public.github_keep_installation_v1(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.github_keep_installation_v1(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) TO claimonce_handler;
GRANT ALL ON FUNCTION public.github_keep_installation_v1(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) TO claimonce_github;

REVOKE ALL ON FUNCTION public.github_keep_installation_v2(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) FROM PUBLIC;
GRANT ALL ON FUNCTION public.github_keep_installation_v2(p_installation_id bigint, p_account_login text, p_account_id bigint, p_repository_selection text, p_state text, p_source_updated_at text, p_rank smallint, p_added_ids bigint[], p_added_names text[], p_removed_ids bigint[]) TO claimonce_github;

REVOKE ALL ON FUNCTION public.resend_record_v1(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.resend_record_v1(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) TO claimonce_handler;
GRANT ALL ON FUNCTION public.resend_record_v1(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) TO claimonce_resend;

REVOKE ALL ON FUNCTION public.resend_record_v2(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.resend_record_v2(p_event_id text, p_email_id text, p_event_type text, p_recipients text[], p_occurred_at text, p_suppress_reason text) TO claimonce_resend;

REVOKE ALL ON FUNCTION public.shopify_keep_order_v1(p_order_id bigint, p_state text, p_updated_at text, p_rank smallint, p_email text, p_financial_status text, p_total_price text, p_currency text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.shopify_keep_order_v1(p_order_id bigint, p_state text, p_updated_at text, p_rank smallint, p_email text, p_financial_status text, p_total_price text, p_currency text) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.shopify_mark_uninstalled_v1(p_shop_id bigint, p_domain text, p_updated_at text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.shopify_mark_uninstalled_v1(p_shop_id bigint, p_domain text, p_updated_at text) TO claimonce_shopify;

REVOKE ALL ON FUNCTION public.stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint) TO claimonce_handler;
GRANT ALL ON FUNCTION public.stripe_credit_v1(p_customer text, p_email text, p_amount_cents bigint) TO claimonce_stripe;

REVOKE ALL ON FUNCTION public.stripe_keep_subscription_v2(p_subscription text, p_customer text, p_status text, p_event_created bigint, p_event_rank smallint) FROM PUBLIC;
GRANT ALL ON FUNCTION public.stripe_keep_subscription_v2(p_subscription text, p_customer text, p_status text, p_event_created bigint, p_event_rank smallint) TO claimonce_handler;
GRANT ALL ON FUNCTION public.stripe_keep_subscription_v2(p_subscription text, p_customer text, p_status text, p_event_created bigint, p_event_rank smallint) TO claimonce_stripe;

REVOKE ALL ON FUNCTION public.stripe_provision_v2(p_customer text, p_email text, p_event_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.stripe_provision_v2(p_customer text, p_email text, p_event_id text) TO claimonce_handler;
GRANT ALL ON FUNCTION public.stripe_provision_v2(p_customer text, p_email text, p_event_id text) TO claimonce_stripe;

GRANT SELECT ON TABLE public.outbox TO claimonce_relay;
GRANT SELECT,DELETE ON TABLE public.outbox TO claimonce_sweeper;

GRANT UPDATE(dispatched_at) ON TABLE public.outbox TO claimonce_relay;

GRANT UPDATE(attempts) ON TABLE public.outbox TO claimonce_relay;

GRANT UPDATE(last_attempt_at) ON TABLE public.outbox TO claimonce_relay;

GRANT UPDATE(last_error) ON TABLE public.outbox TO claimonce_relay;

GRANT UPDATE(next_attempt_at) ON TABLE public.outbox TO claimonce_relay;

GRANT UPDATE(dead_at) ON TABLE public.outbox TO claimonce_relay;

GRANT SELECT,DELETE ON TABLE public.processed_events TO claimonce_sweeper;

GRANT INSERT ON TABLE public.shopify_order_events TO claimonce_shopify;

GRANT INSERT,UPDATE ON TABLE public.shopify_orders TO claimonce_shopify;

GRANT SELECT(order_id) ON TABLE public.shopify_orders TO claimonce_shopify;

GRANT SELECT(state) ON TABLE public.shopify_orders TO claimonce_shopify;

GRANT SELECT(source_updated_at) ON TABLE public.shopify_orders TO claimonce_shopify;

GRANT SELECT(source_rank) ON TABLE public.shopify_orders TO claimonce_shopify;

