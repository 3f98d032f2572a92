-- Shopify (functions/shopify): its role, its tables and its two effects, shipped with its
-- crate. The migrations crate compiles in every provider's `migrations/` folder beside the
-- shared one, in one version sequence.
--
-- Every effect here is newest-first, so a body replayed after its ledger row was swept (the
-- ledger key is the body's hash: Shopify signs no id and no time) changes nothing.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_shopify') THEN
        CREATE ROLE claimonce_shopify NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_shopify;

-- An order as its newest event left it. Ordered by the order's own `updated_at`; at the same
-- instant a cancellation (rank 1) wins over any other event (rank 0), and of two events of one
-- rank the first to arrive stays. A cancelled order stays cancelled: Shopify cannot restore
-- one, so a later event (a refund, a note) updates its other fields only.
CREATE TABLE shopify_orders (
    order_id          bigint      PRIMARY KEY,
    state             text        NOT NULL CHECK (state IN ('open', 'cancelled')),
    email             text,
    financial_status  text,
    total_price       numeric,
    currency          text,
    source_updated_at timestamptz NOT NULL,
    source_rank       smallint    NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Shops that uninstalled the app, with the time the uninstall event's shop object names:
-- a replay, or an older event arriving late, never moves it back.
CREATE TABLE shopify_shops (
    myshopify_domain text        PRIMARY KEY,
    shop_id          bigint      NOT NULL,
    uninstalled_at   timestamptz NOT NULL
);

CREATE FUNCTION shopify_keep_order_v1(
    p_order_id bigint,
    p_state text,
    p_updated_at text,
    p_rank smallint,
    p_email text,
    p_financial_status text,
    p_total_price text,
    p_currency text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
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

CREATE FUNCTION shopify_mark_uninstalled_v1(
    p_shop_id bigint,
    p_domain text,
    p_updated_at text
)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s'
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

COMMENT ON FUNCTION shopify_keep_order_v1(bigint, text, text, smallint, text, text, text, text) IS
    'Shopify orders/*: keeps the order''s newest state (a cancellation wins a tie and stays).';
COMMENT ON FUNCTION shopify_mark_uninstalled_v1(bigint, text, text) IS
    'Shopify app/uninstalled: marks the shop with the newest uninstall time.';

REVOKE EXECUTE ON FUNCTION
    shopify_keep_order_v1(bigint, text, text, smallint, text, text, text, text),
    shopify_mark_uninstalled_v1(bigint, text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    claimonce_forward_v2(text, text, text, text, text, text),
    shopify_keep_order_v1(bigint, text, text, smallint, text, text, text, text),
    shopify_mark_uninstalled_v1(bigint, text, text)
TO claimonce_shopify;
