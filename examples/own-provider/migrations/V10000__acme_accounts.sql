-- Acme (examples/own-provider): its role, its tables, and the guard that lets its login write
-- them only under a claim its own transaction won. Applied after claimonce's shared
-- migrations; numbered from 10000 up, the range claimonce leaves to crates outside its
-- repository.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_acme') THEN
        CREATE ROLE claimonce_acme NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_acme;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    claimonce_claim_held_v1(text)
TO claimonce_acme;

-- One row per credit applied, keyed by the event: a second application of one event would
-- fail here instead of crediting twice.
CREATE TABLE acme_credits (
    event_id     text        PRIMARY KEY,
    account      text        NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents > 0),
    currency     text        NOT NULL,
    applied_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE acme_balances (
    account       text        NOT NULL,
    currency      text        NOT NULL,
    balance_cents bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, currency)
);

GRANT INSERT ON acme_credits TO claimonce_acme;
GRANT SELECT, INSERT, UPDATE ON acme_balances TO claimonce_acme;

ALTER TABLE acme_credits ENABLE ROW LEVEL SECURITY;
ALTER TABLE acme_balances ENABLE ROW LEVEL SECURITY;
CREATE POLICY under_a_claim ON acme_credits TO claimonce_acme
    USING (claimonce_claim_held_v1('acme'))
    WITH CHECK (claimonce_claim_held_v1('acme'));
CREATE POLICY under_a_claim ON acme_balances TO claimonce_acme
    USING (claimonce_claim_held_v1('acme'))
    WITH CHECK (claimonce_claim_held_v1('acme'));
