\set id random(1, 9000000000000000)
\startpipeline
BEGIN;
SET LOCAL statement_timeout = 8000;
SET LOCAL lock_timeout = 8000;
SET LOCAL idle_in_transaction_session_timeout = 8000;
INSERT INTO processed_events (provider, event_id, event_type, payload_sha256) VALUES ('stripe', 'pgb_' || :client_id || '_' || :id, 'x', '\x00') ON CONFLICT (provider, event_id) DO NOTHING RETURNING id;
\endpipeline
\startpipeline
INSERT INTO customers (stripe_customer_id, email) VALUES ('cus_pgb_' || :client_id || '_' || :id, 'x@example.com') ON CONFLICT (stripe_customer_id) DO UPDATE SET email = COALESCE(EXCLUDED.email, customers.email), updated_at = now();
INSERT INTO outbox (topic, payload, provider, event_id, dedup_key) SELECT 'email.welcome', jsonb_build_object('stripe_customer_id', 'cus_pgb_' || :client_id || '_' || :id, 'email', 'x@example.com'), 'stripe', 'pgb_' || :client_id || '_' || :id, 'cus_pgb_' || :client_id || '_' || :id ON CONFLICT DO NOTHING;
COMMIT;
\endpipeline
