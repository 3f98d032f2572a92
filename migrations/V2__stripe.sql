-- Stripe reference effects.

-- Provisioned by checkout.session.completed, credited by invoice.paid.
CREATE TABLE customers (
    stripe_customer_id   text PRIMARY KEY,
    email                text,
    credit_balance_cents bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- Kept by customer.subscription.created|updated|deleted; event_created orders the events, so
-- an older event arriving late never overwrites a newer state.
CREATE TABLE subscriptions (
    stripe_subscription_id text PRIMARY KEY,
    stripe_customer_id     text,
    status                 text NOT NULL,
    event_created          timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX subscriptions_customer_idx ON subscriptions (stripe_customer_id);
