-- Paddle (examples/paddle): its role, its tables, and the guard that lets its login write them
-- only under a claim its own transaction won. Applied after claimonce's shared migrations;
-- numbered from 10000 up, the range claimonce leaves to crates outside its repository.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_paddle') THEN
        CREATE ROLE claimonce_paddle NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_paddle;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    claimonce_claim_held_v1(text)
TO claimonce_paddle;

-- One row per completed transaction credited, keyed by the transaction: a second application
-- (another event about the same transaction) would fail here instead of crediting twice.
CREATE TABLE paddle_credits (
    transaction_id text        PRIMARY KEY,
    event_id       text        NOT NULL UNIQUE,
    customer_id    text        NOT NULL,
    currency       text        NOT NULL,
    amount         bigint      NOT NULL CHECK (amount >= 0),
    applied_at     timestamptz NOT NULL DEFAULT now()
);

-- Each customer's balance per currency, in the currency's lowest denomination.
CREATE TABLE paddle_balances (
    customer_id text        NOT NULL,
    currency    text        NOT NULL,
    balance     bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (customer_id, currency)
);

GRANT INSERT ON paddle_credits TO claimonce_paddle;
GRANT SELECT, INSERT, UPDATE ON paddle_balances TO claimonce_paddle;

ALTER TABLE paddle_credits ENABLE ROW LEVEL SECURITY;
ALTER TABLE paddle_balances ENABLE ROW LEVEL SECURITY;
CREATE POLICY under_a_claim ON paddle_credits TO claimonce_paddle
    USING (claimonce_claim_held_v1('paddle'))
    WITH CHECK (claimonce_claim_held_v1('paddle'));
CREATE POLICY under_a_claim ON paddle_balances TO claimonce_paddle
    USING (claimonce_claim_held_v1('paddle'))
    WITH CHECK (claimonce_claim_held_v1('paddle'));
