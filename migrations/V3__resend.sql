-- Resend reference effects.

-- One row per email.* event.
CREATE TABLE email_events (
    event_id    text PRIMARY KEY,
    email_id    text,
    event_type  text        NOT NULL,
    recipients  text[]      NOT NULL DEFAULT '{}',
    occurred_at timestamptz,
    received_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX email_events_email_id_idx ON email_events (email_id);

-- Addresses that bounced or complained; the first reason is kept.
CREATE TABLE email_suppressions (
    email           text PRIMARY KEY,
    reason          text        NOT NULL,
    source_event_id text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
