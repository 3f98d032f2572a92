-- The outbox never starves (issue 22). A row that could not be sent was retried by every run,
-- first (runs go in id order), with no bound: a message SQS refuses for good held up every
-- later row, welcome emails included. From here a failed row waits before its next attempt
-- (`next_attempt_at`, the relay's backoff), and after OUTBOX_MAX_ATTEMPTS it is set aside
-- (`dead_at`, with `last_error` kept): never tried again until an operator requeues it
-- (OPERATIONS.md, "outbox set-aside rows"), counted in the relay's OutboxSetAside metric.
--
-- Both columns are nullable with no default, so adding them rewrites nothing. The previous
-- release's relay ignores them (it retries as before) until its code is replaced.
ALTER TABLE outbox
    ADD COLUMN next_attempt_at timestamptz,
    ADD COLUMN dead_at timestamptz;

COMMENT ON COLUMN outbox.next_attempt_at IS
    'Not before this time is a failed row tried again (NULL: at once).';
COMMENT ON COLUMN outbox.dead_at IS
    'When the relay set the row aside after its last allowed attempt; NULL while it is tried.';

GRANT UPDATE (next_attempt_at, dead_at) ON outbox TO claimonce_relay;
