-- Database roles. claimonce_handler is what the webhook functions' login role is granted; it
-- may claim (INSERT) and read the ledger but never change or remove a claim, so the ledger is
-- append-only at the database level. claimonce_sweeper, for the retention sweep, may delete.
-- The roles are NOLOGIN: grant them to the login (or IAM) users of each function.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_handler') THEN
        CREATE ROLE claimonce_handler NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'claimonce_sweeper') THEN
        CREATE ROLE claimonce_sweeper NOLOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO claimonce_handler, claimonce_sweeper;

GRANT SELECT, INSERT ON processed_events TO claimonce_handler;
GRANT SELECT, INSERT, UPDATE ON customers, subscriptions, email_events, email_suppressions
    TO claimonce_handler;

GRANT SELECT, DELETE ON processed_events TO claimonce_sweeper;
