\set id random(1, 9000000000000000)
SELECT * FROM stripe_checkout_delivery('pgb_' || :client_id || '_' || :id, '\x00', 'cus_pgb_' || :client_id || '_' || :id, 'x@example.com');
