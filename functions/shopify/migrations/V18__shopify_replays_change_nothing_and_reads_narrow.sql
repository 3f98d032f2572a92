-- Two narrowings of what a claim opens to Shopify's login (the Rust effect of V15).
--
-- A replay after the sweep changes nothing. Shopify signs no timestamp, so a body replayed
-- after the sweep removed its ledger row is claimed again and its effect runs again. The
-- order's state is newest-wins and so unchanged, but the timeline took a second row for the
-- same event. The timeline is now one row per event id: the effect inserts with ON CONFLICT
-- DO NOTHING, with no conflict target (naming one would need SELECT on it; the event id's
-- unique index is the only constraint an insert can meet, the key being an identity). Rows a replay already doubled are removed first, the
-- first kept.
--
-- The login reads no column its effect does not need. The effect's upsert reads the stored
-- order's state, time and rank to decide newest-wins (and the conflict target); it writes the
-- rest from its own parameters, so it needs no SELECT on the email, status or amounts that a
-- stolen login could otherwise read for every order under a claim of its own. The previous
-- release's statement read EXCLUDED.email and is refused (42501) between this migration and
-- the new function (the deploy applies migrations first); Shopify retries it.

DELETE FROM shopify_order_events AS later
USING shopify_order_events AS first
WHERE later.event_id = first.event_id
  AND later.id > first.id;

CREATE UNIQUE INDEX shopify_order_events_event ON shopify_order_events (event_id);

REVOKE SELECT ON shopify_orders FROM claimonce_shopify;
GRANT SELECT (order_id, state, source_updated_at, source_rank) ON shopify_orders
TO claimonce_shopify;
