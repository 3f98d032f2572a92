-- Shopify's order events are applied by a Rust effect (shopify_webhook::keep_order, through
-- claimonce::effect::Tx): two statements on the claim's transaction, the order kept
-- newest-first as shopify_keep_order_v1 keeps it, and one row of the order's timeline.
-- shopify_keep_order_v1 stays for the previous release's binary; a later migration drops it.
--
-- The tables the Rust effect writes are guarded by row-level security (V14): the login may
-- read and write their rows only under a claim its own transaction won for Shopify.

-- One row per order event applied: what the order's timeline shows. Not unique by event: the
-- ledger makes each event apply once, and a second application would show here as a second
-- row (what the fault suite counts).
CREATE TABLE shopify_order_events (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id         bigint      NOT NULL,
    event_id         text        NOT NULL,
    topic            text        NOT NULL,
    state            text        NOT NULL,
    order_updated_at timestamptz NOT NULL,
    applied_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shopify_order_events_order ON shopify_order_events (order_id, order_updated_at);

GRANT EXECUTE ON FUNCTION claimonce_claim_held_v1(text) TO claimonce_shopify;
GRANT SELECT, INSERT, UPDATE ON shopify_orders TO claimonce_shopify;
GRANT INSERT ON shopify_order_events TO claimonce_shopify;

ALTER TABLE shopify_orders ENABLE ROW LEVEL SECURITY;
ALTER TABLE shopify_order_events ENABLE ROW LEVEL SECURITY;
-- The owner (the migrate user, and so the SECURITY DEFINER effects) is not subject to them.
CREATE POLICY under_a_claim ON shopify_orders TO claimonce_shopify
    USING (claimonce_claim_held_v1('shopify'))
    WITH CHECK (claimonce_claim_held_v1('shopify'));
CREATE POLICY under_a_claim ON shopify_order_events TO claimonce_shopify
    USING (claimonce_claim_held_v1('shopify'))
    WITH CHECK (claimonce_claim_held_v1('shopify'));
