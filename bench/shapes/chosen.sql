\set id random(1, 9000000000000000)
SELECT c.won, c.stored_sha256, CASE WHEN c.won THEN stripe_provision_v1('cus_pgb_' || :client_id || '_' || :id, 'x@example.com', 'pgb_' || :client_id || '_' || :id) END FROM claimonce_claim_v1('stripe', 'pgb_' || :client_id || '_' || :id, 'x', '\x00') AS c;
