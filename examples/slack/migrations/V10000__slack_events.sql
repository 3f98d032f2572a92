-- Slack (examples/slack): its role, its table, and the guard that lets its login write it only
-- under a claim its own transaction won. Applied after claimonce's shared migrations; numbered
-- from 10000 up, the range claimonce leaves to crates outside its repository.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_slack') THEN
        CREATE ROLE claimonce_slack NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_slack;
GRANT EXECUTE ON FUNCTION
    claimonce_claim_v1(text, text, text, bytea),
    claimonce_claim_held_v1(text)
TO claimonce_slack;

-- One row per event applied, keyed by Slack's event_id: the record a bot's work starts from.
CREATE TABLE slack_events (
    event_id   text        PRIMARY KEY,
    team_id    text        NOT NULL,
    event_type text        NOT NULL,
    channel    text,
    event_ts   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

GRANT INSERT ON slack_events TO claimonce_slack;

ALTER TABLE slack_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY under_a_claim ON slack_events TO claimonce_slack
    USING (claimonce_claim_held_v1('slack'))
    WITH CHECK (claimonce_claim_held_v1('slack'));
