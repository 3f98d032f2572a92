//! Stripe: the `Stripe-Signature` scheme, Stripe's event envelope, and the reference effects
//! (provision a customer and queue its welcome email in the outbox, credit an account, keep
//! subscriptions newest-first).

use claimonce::complete::{Incomplete, SenderApi};
use claimonce::config;
use claimonce::prelude::*;
use claimonce::verify::timestamp_v1::TimestampV1;
use serde::Deserialize;
use serde_json::value::RawValue;

mod thin;
pub use thin::{Thin, parse_thin};

/// The header Stripe signs with (lower case, as `http` stores header names).
pub const SIGNATURE_HEADER: &str = "stripe-signature";

/// The Stripe receiver's provider half.
#[derive(Debug, Clone)]
pub struct Stripe {
    /// `None` for the recover function's provider, which reads Stripe's API and takes no
    /// webhooks.
    verifier: Option<TimestampV1>,
}

impl Stripe {
    /// A provider that accepts signatures from any of `secrets` within `tolerance` seconds.
    pub fn new(secrets: &[&str], tolerance: u64) -> Result<Self, ConfigError> {
        let verifier = TimestampV1::new(SIGNATURE_HEADER, secrets, tolerance)
            .ok_or_else(|| ConfigError::new("STRIPE_WEBHOOK_SECRET holds no secret".into()))?;
        Ok(Self {
            verifier: Some(verifier),
        })
    }

    /// The provider of `stripe-recover`: Stripe's parser and effects, with no webhook secret
    /// and no verifier (it takes no webhooks; the events come from Stripe's API).
    pub fn without_webhooks() -> Self {
        Self { verifier: None }
    }

    /// From the secrets' text, comma-separated during a rotation (`STRIPE_WEBHOOK_SECRET`, or the
    /// secret `STRIPE_WEBHOOK_SECRET_ARN` names: `claimonce::secrets`) and `WEBHOOK_TOLERANCE_SECONDS`.
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw), config::tolerance_seconds()?)
    }
}

/// The events this receiver acts on; every other type is claimed and ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeEvent {
    /// `checkout.session.completed` with a customer: provision it.
    CheckoutCompleted {
        /// `data.object.customer`.
        customer: String,
        /// `data.object.customer_details.email`.
        email: Option<String>,
    },
    /// `invoice.paid`: credit the customer with `amount_paid`.
    InvoicePaid {
        /// `data.object.customer`.
        customer: String,
        /// `data.object.amount_paid`, in the currency's smallest unit.
        amount_paid: i64,
        /// `data.object.customer_email`, used if the customer is not known yet.
        email: Option<String>,
    },
    /// `customer.subscription.created|updated|deleted`: keep the newest state.
    Subscription {
        /// `data.object.id`.
        id: String,
        /// `data.object.customer`.
        customer: Option<String>,
        /// `data.object.status`.
        status: String,
        /// The event's `created` (unix seconds): newer wins.
        created: i64,
        /// The event's kind, which breaks a same-second tie.
        kind: SubscriptionKind,
    },
    /// A thin event, completed from Stripe's API before its claim into one of the above
    /// (`thin`); never planned itself.
    Thin(Thin),
    /// Any other type, or a known type without what its effect needs.
    Other,
}

/// The latest `created` stored, in Unix seconds: 9999-12-31T23:59:59Z.
pub const MAX_CREATED: i64 = 253_402_300_799;

/// The kind of a `customer.subscription.*` event, in the order of a subscription's life:
/// on a same-second tie the later kind wins (created < updated < deleted). Two updates in
/// one second stay unordered; the stored one is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SubscriptionKind {
    /// `customer.subscription.created`.
    Created = 0,
    /// `customer.subscription.updated`.
    Updated = 1,
    /// `customer.subscription.deleted`: a subscription does not come back from canceled.
    Deleted = 2,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    id: String,
    object: &'a str,
    #[serde(rename = "type")]
    event_type: String,
    created: i64,
    #[serde(borrow)]
    data: Data<'a>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(borrow)]
    object: &'a RawValue,
}

/// An id field that Stripe sends as a string, or as an object when expanded.
#[derive(Deserialize)]
#[serde(untagged)]
enum Expandable {
    Id(String),
    Object { id: String },
}

impl Expandable {
    fn into_id(self) -> String {
        match self {
            Expandable::Id(id) | Expandable::Object { id } => id,
        }
    }
}

#[derive(Deserialize)]
struct CheckoutSession {
    customer: Option<Expandable>,
    customer_details: Option<CustomerDetails>,
}

#[derive(Deserialize)]
struct CustomerDetails {
    email: Option<String>,
}

#[derive(Deserialize)]
struct Invoice {
    customer: Option<Expandable>,
    amount_paid: i64,
    customer_email: Option<String>,
}

#[derive(Deserialize)]
struct Subscription {
    id: String,
    customer: Option<Expandable>,
    status: String,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// The event types that have an effect here; every other is claimed and `ignored` (a thin
/// one with no fetch).
pub const EFFECT_TYPES: [&str; 5] = [
    "checkout.session.completed",
    "invoice.paid",
    "customer.subscription.created",
    "customer.subscription.updated",
    "customer.subscription.deleted",
];

/// Reads a Stripe event body: the snapshot event format (`"object": "event"`), or a thin event
/// (`"object": "v2.core.event"`, [`parse_thin`]), completed before its claim.
pub fn parse_event(body: &[u8]) -> Result<Parsed<StripeEvent>, Rejection> {
    let envelope: Envelope<'_> = match serde_json::from_slice(body) {
        Ok(envelope) => envelope,
        // A thin event has no `data` and a text `created`: read as one only then, so that a
        // snapshot event is parsed once.
        Err(_) if body.windows(15).any(|w| w == b"\"v2.core.event\"") => return parse_thin(body),
        Err(_) => return Err(invalid("the signed body is not a Stripe event")),
    };
    if envelope.object != "event" {
        return Err(invalid("the signed body is not a Stripe event object"));
    }
    let object = envelope.data.object.get();
    let event = match envelope.event_type.as_str() {
        "checkout.session.completed" => {
            let s: CheckoutSession = serde_json::from_str(object)
                .map_err(|_| invalid("data.object is not a checkout session"))?;
            match s.customer {
                Some(customer) => StripeEvent::CheckoutCompleted {
                    customer: customer.into_id(),
                    email: s.customer_details.and_then(|d| d.email),
                },
                // A guest checkout has no customer to provision.
                None => StripeEvent::Other,
            }
        }
        "invoice.paid" => {
            let i: Invoice = serde_json::from_str(object)
                .map_err(|_| invalid("data.object is not an invoice"))?;
            match i.customer {
                Some(customer) => StripeEvent::InvoicePaid {
                    customer: customer.into_id(),
                    amount_paid: i.amount_paid,
                    email: i.customer_email,
                },
                None => StripeEvent::Other,
            }
        }
        t @ ("customer.subscription.created"
        | "customer.subscription.updated"
        | "customer.subscription.deleted") => {
            let s: Subscription = serde_json::from_str(object)
                .map_err(|_| invalid("data.object is not a subscription"))?;
            // Stored through to_timestamp, which refuses what lies past year 294276 (22008):
            // such a signed event would fail every retry. Stripe's are Unix seconds of now.
            if !(0..=MAX_CREATED).contains(&envelope.created) {
                return Err(invalid(
                    "the event's created is not a time PostgreSQL can store",
                ));
            }
            StripeEvent::Subscription {
                id: s.id,
                customer: s.customer.map(Expandable::into_id),
                status: s.status,
                created: envelope.created,
                kind: match t {
                    "customer.subscription.created" => SubscriptionKind::Created,
                    "customer.subscription.deleted" => SubscriptionKind::Deleted,
                    _ => SubscriptionKind::Updated,
                },
            }
        }
        _ => StripeEvent::Other,
    };
    refuse_nul(&envelope.event_type, &event)?;
    Ok(Parsed::new(
        EventId::new(envelope.id)?,
        envelope.event_type,
        event,
    ))
}

/// PostgreSQL's `text` cannot hold U+0000 (JSON's `\u0000`): a stored string carrying one
/// would fail the statement on every retry, so the signed body is refused as one that can
/// never succeed.
fn refuse_nul(event_type: &str, event: &StripeEvent) -> Result<(), Rejection> {
    let stored: [Option<&str>; 4] = match event {
        StripeEvent::CheckoutCompleted { customer, email } => {
            [Some(customer), email.as_deref(), None, None]
        }
        StripeEvent::InvoicePaid {
            customer, email, ..
        } => [Some(customer), email.as_deref(), None, None],
        StripeEvent::Subscription {
            id,
            customer,
            status,
            ..
        } => [Some(id), customer.as_deref(), Some(status), None],
        StripeEvent::Thin(_) | StripeEvent::Other => [None; 4],
    };
    let mut all = stored.into_iter().flatten().chain([event_type]);
    if all.any(|s| s.contains('\0')) {
        return Err(invalid(
            "the event carries a NUL character, which cannot be stored",
        ));
    }
    Ok(())
}

/// The event's effect: a call of one of the effect functions that migrations V6 and V7 add.
pub fn effect(event_id: &str, event: &StripeEvent) -> Option<Effect> {
    Some(match event {
        // Provisions the customer, and queues its welcome email in the outbox.
        StripeEvent::CheckoutCompleted { customer, email } => Effect::call(
            "stripe_provision_v2",
            vec![
                Param::new(customer.clone(), Type::TEXT),
                Param::new(email.clone(), Type::TEXT),
                Param::new(event_id.to_owned(), Type::TEXT),
            ],
        ),
        StripeEvent::InvoicePaid {
            customer,
            amount_paid,
            email,
        } => Effect::call(
            "stripe_credit_v1",
            vec![
                Param::new(customer.clone(), Type::TEXT),
                Param::new(email.clone(), Type::TEXT),
                Param::new(*amount_paid, Type::INT8),
            ],
        ),
        StripeEvent::Subscription {
            id,
            customer,
            status,
            created,
            kind,
        } => Effect::call(
            "stripe_keep_subscription_v2",
            vec![
                Param::new(id.clone(), Type::TEXT),
                Param::new(customer.clone(), Type::TEXT),
                Param::new(status.clone(), Type::TEXT),
                Param::new(*created, Type::INT8),
                Param::new(*kind as i16, Type::INT2),
            ],
        ),
        StripeEvent::Thin(_) | StripeEvent::Other => return None,
    })
}

impl Provider for Stripe {
    type Event = StripeEvent;
    type Rust<'e> = NoRustEffect;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn without_webhooks() -> Option<Self> {
        Some(Self::without_webhooks())
    }

    fn verifier(&self) -> Option<&dyn Scheme> {
        self.verifier.as_ref().map(|v| v as &dyn Scheme)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        _unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<StripeEvent>, Rejection> {
        parse_event(signed.body())
    }

    fn plan<'e>(&'e self, event: &'e Parsed<StripeEvent>) -> Plan<NoRustEffect> {
        effect(event.event_id.as_str(), &event.event).into()
    }

    /// A Stripe event destination of type `amazon_eventbridge` puts the event itself in
    /// `detail`, as a webhook's body holds it: the same id, so an event that arrives both ways
    /// is claimed once.
    fn bridged<'d>(&self, detail: &'d str) -> Option<Result<Bridged<'d>, Rejection>> {
        Some(Ok(Bridged::body(detail)))
    }

    fn completes(&self, event: &Parsed<StripeEvent>) -> bool {
        thin::fetches(event)
    }

    /// A thin event is completed from Stripe's API (`thin`); every other event is as parsed.
    async fn complete(
        &self,
        event: &Parsed<StripeEvent>,
        api: Option<&SenderApi>,
    ) -> Result<Option<Parsed<StripeEvent>>, Incomplete> {
        match &event.event {
            StripeEvent::Thin(thin) => thin::complete(event, thin, api).await.map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {

    /// The list the thin events consult is the parser's: each listed type, for a customer, has
    /// an effect, and a type off the list has none.
    #[test]
    fn the_effect_types_are_the_ones_the_parser_gives_an_effect() {
        let object = r#"{"id":"x_1","object":"x","customer":"cus_1","amount_paid":1,
            "customer_details":{"email":"a@example.com"},"status":"active"}"#;
        for kind in EFFECT_TYPES
            .iter()
            .chain(&["charge.succeeded", "invoice.created"])
        {
            let body = format!(
                r#"{{"id":"evt_1","object":"event","type":"{kind}","created":1,"data":{{"object":{object}}}}}"#
            );
            let parsed = parse_event(body.as_bytes()).expect("parses");
            assert_eq!(
                parsed.event != StripeEvent::Other,
                EFFECT_TYPES.contains(kind),
                "{kind}"
            );
        }
    }

    use super::*;

    #[test]
    fn reads_the_effects_fields_and_ignores_unknown_ones() {
        let body = br#"{"id":"evt_1","object":"event","type":"invoice.paid","created":1,
            "livemode":false,"api_version":"2024-06-20","extra":{"x":1},
            "data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1",
            "amount_paid":1500,"customer_email":null,"lines":{"data":[]}}}}"#;
        let parsed = parse_event(body).expect("valid event");
        assert_eq!(parsed.event_id.as_str(), "evt_1");
        assert_eq!(
            parsed.event,
            StripeEvent::InvoicePaid {
                customer: "cus_1".into(),
                amount_paid: 1500,
                email: None
            }
        );
    }

    #[test]
    fn guest_checkout_and_unknown_types_are_ignored() {
        let guest = br#"{"id":"evt_2","object":"event","type":"checkout.session.completed",
            "created":1,"data":{"object":{"customer":null,"customer_details":null}}}"#;
        assert_eq!(parse_event(guest).expect("valid").event, StripeEvent::Other);
        let other = br#"{"id":"evt_3","object":"event","type":"charge.refunded","created":1,
            "data":{"object":{"anything":true}}}"#;
        assert_eq!(parse_event(other).expect("valid").event, StripeEvent::Other);
    }

    #[test]
    fn bodies_that_are_not_events_are_rejected() {
        for body in [
            &b"not json"[..],
            br#"{"hello":"world"}"#,
            br#"{"id":"x","object":"customer","type":"t","created":1,"data":{"object":{}}}"#,
            br#"{"id":"x","object":"event","type":"invoice.paid","created":1,"data":{"object":{"customer":"c"}}}"#,
        ] {
            assert_eq!(
                parse_event(body).expect_err("not an event").problem,
                Problem::InvalidPayload
            );
        }
    }
}
