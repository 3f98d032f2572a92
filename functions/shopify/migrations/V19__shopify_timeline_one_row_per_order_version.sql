-- One timeline row per version of an order, whichever way its event arrived.
--
-- Shopify's ledger key is the body's hash (Shopify signs no id). An order event subscribed both
-- by webhook and through Amazon EventBridge arrives as two different byte strings (EventBridge
-- carries its own JSON of the payload), so it is two claims. The order and the shop are
-- newest-first, so the second claim changes neither; the timeline, unique only by event id
-- (V18), took a second row. It is now also unique by the order's version: the order, the
-- topic, the state and the order's own updated_at. The effect's insert already has ON CONFLICT
-- DO NOTHING with no conflict target, which meets this index as it meets the event id's.
-- Rows a second path already doubled are removed first, the first kept.

DELETE FROM shopify_order_events AS later
USING shopify_order_events AS first
WHERE later.order_id = first.order_id
  AND later.topic = first.topic
  AND later.state = first.state
  AND later.order_updated_at = first.order_updated_at
  AND later.id > first.id;

CREATE UNIQUE INDEX shopify_order_events_version
    ON shopify_order_events (order_id, topic, state, order_updated_at);
