-- The per-event shape compared in BENCHMARKS.md ("Choosing the statement's shape"): one
-- PL/pgSQL function that claims and applies a checkout. Not a migration: it was measured, not
-- chosen (the claim would live in every provider's SQL).
CREATE FUNCTION stripe_checkout_delivery(p_event_id text, p_sha bytea, p_customer text, p_email text, OUT won boolean, OUT stored_sha256 bytea)
LANGUAGE plpgsql SET lock_timeout = '2s' AS $$
BEGIN
  INSERT INTO processed_events (provider, event_id, event_type, payload_sha256)
  VALUES ('stripe', p_event_id, 'checkout.session.completed', p_sha) ON CONFLICT (provider, event_id) DO NOTHING;
  won := FOUND;
  IF won THEN
    INSERT INTO customers (stripe_customer_id, email) VALUES (p_customer, p_email)
    ON CONFLICT (stripe_customer_id) DO UPDATE SET email = COALESCE(EXCLUDED.email, customers.email), updated_at = now();
    IF p_email IS NOT NULL THEN
      INSERT INTO outbox (topic, payload, provider, event_id, dedup_key)
      VALUES ('email.welcome', jsonb_build_object('stripe_customer_id', p_customer, 'email', p_email), 'stripe', p_event_id, p_customer)
      ON CONFLICT DO NOTHING;
    END IF;
  ELSE
    SELECT e.payload_sha256 INTO stored_sha256 FROM processed_events e WHERE e.provider = 'stripe' AND e.event_id = p_event_id;
  END IF;
END $$;
