//! Shopify: `X-Shopify-Hmac-Sha256` (the base64 HMAC-SHA256 of the raw body, keyed with the
//! app's client secret) over the body, the topic and ids from Shopify's unsigned headers,
//! orders kept newest-first, and an uninstalled shop marked.
//!
//! **The ledger key is the body's SHA-256**, the house rule for a sender that signs only the
//! body (GitHub's, docs/decisions/0021-githubs-ledger-key-is-the-bodys-hash.md):
//! `X-Shopify-Webhook-Id` and `X-Shopify-Event-Id` are unsigned, so keyed by either, a captured
//! body re-sent under a fresh id would be a new event. The webhook id is logged as the delivery
//! id, to find the delivery in Shopify's records.
//!
//! **The topic cannot pick the effect.** `X-Shopify-Topic` is unsigned too, so what an event
//! does is read from its signed body: every `orders/*` topic keeps the same order row, in the
//! state the body says (cancelled when `cancelled_at` is set), and a body is refused under a
//! topic its shape contradicts (an order body as `app/uninstalled`, a shop as an order, an
//! `orders/cancelled` that is not cancelled). Both effects are newest-first, so a replay after
//! the ledger row was swept changes nothing.

use claimonce::prelude::*;
use claimonce::timestamp::is_rfc3339;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::verify::lower_hex;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The header Shopify signs with (lower case, as `http` stores header names).
pub const SIGNATURE_HEADER: &str = "x-shopify-hmac-sha256";
/// The topic, `orders/create`, ... (unsigned).
pub const TOPIC_HEADER: &str = "x-shopify-topic";
/// Shopify's id of the delivery (unsigned); a retry repeats it.
pub const WEBHOOK_ID_HEADER: &str = "x-shopify-webhook-id";
/// Longest topic accepted (Shopify's are a few dozen characters).
const MAX_TOPIC: usize = 64;
/// Longest stored text value.
const MAX_TEXT: usize = 1024;

/// The Shopify receiver's provider half.
#[derive(Debug, Clone)]
pub struct Shopify {
    /// `None` for an app that delivers through EventBridge alone.
    verifier: Option<BodyHmac>,
}

impl Shopify {
    /// A provider that accepts signatures from any of `secrets` (several during a rotation).
    pub fn new(secrets: &[&str]) -> Result<Self, ConfigError> {
        let verifier = BodyHmac::new(SIGNATURE_HEADER, "", Encoding::Base64, secrets)
            .ok_or_else(|| ConfigError::new("SHOPIFY_WEBHOOK_SECRET holds no secret".into()))?;
        Ok(Self {
            verifier: Some(verifier),
        })
    }

    /// From the secrets' text, comma-separated during a rotation (`SHOPIFY_WEBHOOK_SECRET`, or the
    /// secret `SHOPIFY_WEBHOOK_SECRET_ARN` names: `claimonce::secrets`).
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw))
    }
}

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShopifyEvent {
    /// `orders/create`, `orders/updated`, `orders/cancelled`: keep the order's newest state.
    Order(Order),
    /// `app/uninstalled`: mark the shop.
    Uninstalled(Shop),
    /// Any other topic: claimed, answered `ignored`.
    Other,
}

/// An order's state as one event leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// `id`.
    pub id: i64,
    /// `open` or `cancelled` (from `cancelled_at`, not from the topic).
    pub state: &'static str,
    /// `updated_at`, RFC 3339: newer wins.
    pub updated_at: String,
    /// Breaks a same-second tie: 1 for a cancellation, 0 otherwise, so a cancellation wins.
    pub rank: i16,
    /// `email`.
    pub email: Option<String>,
    /// `financial_status` (`paid`, `refunded`, ...).
    pub financial_status: Option<String>,
    /// `total_price`, a decimal string.
    pub total_price: Option<String>,
    /// `currency`.
    pub currency: Option<String>,
}

/// The shop an `app/uninstalled` event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shop {
    /// `id`.
    pub id: i64,
    /// `myshopify_domain`.
    pub domain: String,
    /// `updated_at`, RFC 3339.
    pub updated_at: String,
}

#[derive(Deserialize)]
struct OrderBody {
    id: i64,
    updated_at: String,
    cancelled_at: Option<String>,
    email: Option<String>,
    financial_status: Option<String>,
    total_price: Option<String>,
    currency: Option<String>,
    /// Present in every order and in no shop: how a topic is held to its body.
    #[allow(dead_code)]
    line_items: serde::de::IgnoredAny,
}

#[derive(Deserialize)]
struct ShopBody {
    id: i64,
    myshopify_domain: String,
    updated_at: String,
    line_items: Option<serde::de::IgnoredAny>,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// A text value the database can store: no NUL, bounded.
fn storable(value: Option<String>) -> Result<Option<String>, Rejection> {
    match value {
        Some(v) if v.contains('\0') || v.len() > MAX_TEXT => Err(invalid(
            "the event carries a text value that cannot be stored",
        )),
        other => Ok(other),
    }
}

/// A decimal amount as Shopify writes one (`"199.65"`), within `numeric`'s comfort.
fn is_amount(value: &str) -> bool {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    (1..=20).contains(&int.len())
        && frac.len() <= 10
        && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        && !(digits.contains('.') && frac.is_empty())
}

/// Reads a Shopify delivery: the topic from `X-Shopify-Topic`, the body as what it says it is.
pub fn parse_event(
    signed: &Signed<'_>,
    unsigned: &Unsigned<'_>,
) -> Result<Parsed<ShopifyEvent>, Rejection> {
    let topic = unsigned
        .header(TOPIC_HEADER)?
        .ok_or_else(|| invalid("the X-Shopify-Topic header is missing"))?;
    if topic.is_empty()
        || topic.len() > MAX_TOPIC
        || !topic
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_/".contains(&b))
    {
        return Err(invalid("the X-Shopify-Topic header is not a topic"));
    }
    let webhook_id = unsigned
        .header(WEBHOOK_ID_HEADER)?
        .map(EventId::new)
        .transpose()?;
    let body = signed.body();
    let event = match topic {
        "orders/create" | "orders/updated" | "orders/cancelled" => {
            let b: OrderBody =
                serde_json::from_slice(body).map_err(|_| invalid("the body is not an order"))?;
            let cancelled = b.cancelled_at.is_some();
            if topic == "orders/cancelled" && !cancelled {
                return Err(invalid(
                    "an orders/cancelled event whose order is not cancelled",
                ));
            }
            if !is_rfc3339(&b.updated_at) {
                return Err(invalid("the order's updated_at is not RFC 3339"));
            }
            let total_price = storable(b.total_price)?;
            if total_price.as_deref().is_some_and(|p| !is_amount(p)) {
                return Err(invalid("the order's total_price is not a decimal amount"));
            }
            ShopifyEvent::Order(Order {
                id: b.id,
                state: if cancelled { "cancelled" } else { "open" },
                updated_at: b.updated_at,
                rank: i16::from(cancelled),
                email: storable(b.email)?,
                financial_status: storable(b.financial_status)?,
                total_price,
                currency: storable(b.currency)?,
            })
        }
        "app/uninstalled" => {
            let b: ShopBody =
                serde_json::from_slice(body).map_err(|_| invalid("the body is not a shop"))?;
            if b.line_items.is_some() {
                return Err(invalid("the body is an order, not a shop"));
            }
            if !is_rfc3339(&b.updated_at) {
                return Err(invalid("the shop's updated_at is not RFC 3339"));
            }
            let domain = storable(Some(b.myshopify_domain))?.unwrap_or_default();
            ShopifyEvent::Uninstalled(Shop {
                id: b.id,
                domain,
                updated_at: b.updated_at,
            })
        }
        _ => {
            serde_json::from_slice::<serde::de::IgnoredAny>(body)
                .map_err(|_| invalid("the body is not JSON"))?;
            ShopifyEvent::Other
        }
    };
    let mut parsed = Parsed::new(EventId::new(lower_hex(signed.sha256()))?, topic, event);
    parsed.delivery_id = webhook_id;
    Ok(parsed)
}

/// The event's plan: an order is kept by [`keep_order`], Rust on the claim's transaction
/// (this crate's migration V15); an uninstall calls `shopify_mark_uninstalled_v1` (V13), one
/// statement with the claim; other topics have none.
pub fn plan(event: &Parsed<ShopifyEvent>) -> Plan<KeepOrder<'_>> {
    match &event.event {
        ShopifyEvent::Other => Plan::Nothing,
        ShopifyEvent::Order(order) => Plan::Rust(KeepOrder {
            event_id: &event.event_id,
            topic: &event.event_type,
            order,
        }),
        ShopifyEvent::Uninstalled(s) => Plan::Call(Effect::call(
            "shopify_mark_uninstalled_v1",
            vec![
                Param::new(s.id, Type::INT8),
                Param::new(s.domain.clone(), Type::TEXT),
                Param::new(s.updated_at.clone(), Type::TEXT),
            ],
        )),
    }
}

/// An order event's effect: [`keep_order`] on the claim's transaction.
#[derive(Debug, Clone, Copy)]
pub struct KeepOrder<'e> {
    /// The ledger key.
    pub event_id: &'e EventId,
    /// The topic, for the timeline.
    pub topic: &'e str,
    /// The order.
    pub order: &'e Order,
}

impl RustEffect for KeepOrder<'_> {
    async fn apply<'a>(&'a self, tx: &'a Tx<'a>) -> Result<(), EffectError> {
        keep_order(tx, self.event_id, self.topic, self.order).await
    }
}

/// Keeps the order's newest state, as `shopify_keep_order_v1` did (newer `updated_at` wins; at
/// the same instant a cancellation wins; a cancelled order stays cancelled), and adds the event
/// to the order's timeline: two statements on the claim's transaction, which the database
/// accepts only under a claim that transaction won (V15's row-level security).
pub async fn keep_order(
    tx: &Tx<'_>,
    event_id: &EventId,
    topic: &str,
    order: &Order,
) -> Result<(), EffectError> {
    keep_order_state(tx, order).await?;
    add_to_timeline(tx, event_id, topic, order).await
}

/// The order's newest state: one upsert, newest-first (the statement of
/// `shopify_keep_order_v1`). It writes from its own parameters, never `EXCLUDED`, so the
/// login needs SELECT only on the stored state, time and rank it compares (V18).
pub async fn keep_order_state(tx: &Tx<'_>, order: &Order) -> Result<(), EffectError> {
    tx.execute(
        "INSERT INTO shopify_orders AS o (order_id, state, email, financial_status, \
         total_price, currency, source_updated_at, source_rank) \
         VALUES ($1, $2, $3, $4, $5::numeric, $6, $7::timestamptz, $8) \
         ON CONFLICT (order_id) DO UPDATE SET \
             state = CASE WHEN o.state = 'cancelled' THEN 'cancelled' ELSE $2 END, \
             email = $3, \
             financial_status = $4, \
             total_price = $5::numeric, \
             currency = $6, \
             source_updated_at = $7::timestamptz, \
             source_rank = $8, \
             updated_at = now() \
         WHERE ($7::timestamptz, $8) > (o.source_updated_at, o.source_rank)",
        &[
            Param::new(order.id, Type::INT8),
            Param::new(order.state, Type::TEXT),
            Param::new(&order.email, Type::TEXT),
            Param::new(&order.financial_status, Type::TEXT),
            Param::new(&order.total_price, Type::TEXT),
            Param::new(&order.currency, Type::TEXT),
            Param::new(&order.updated_at, Type::TEXT),
            Param::new(order.rank, Type::INT2),
        ],
    )
    .await?;
    Ok(())
}

/// One row of the order's timeline for this event, once: a replay after the sweep (claimed
/// again, as Shopify signs no timestamp) adds nothing (V18), nor does the same order version
/// arriving by another path (V19).
pub async fn add_to_timeline(
    tx: &Tx<'_>,
    event_id: &EventId,
    topic: &str,
    order: &Order,
) -> Result<(), EffectError> {
    tx.execute(
        "INSERT INTO shopify_order_events (order_id, event_id, topic, state, order_updated_at) \
         VALUES ($1, $2, $3, $4, $5::timestamptz) ON CONFLICT DO NOTHING",
        &[
            Param::new(order.id, Type::INT8),
            Param::new(event_id.as_str(), Type::TEXT),
            Param::new(topic, Type::TEXT),
            Param::new(order.state, Type::TEXT),
            Param::new(&order.updated_at, Type::TEXT),
        ],
    )
    .await?;
    Ok(())
}

/// Most headers a bridged event's `metadata` may hold (Shopify's carry about ten).
const MAX_METADATA: usize = 64;

/// Shopify's EventBridge `detail`: the webhook's body in `payload`, its headers in `metadata`
/// (`X-Shopify-Topic`, `X-Shopify-Webhook-Id`, ...).
#[derive(Deserialize)]
struct BridgedDetail<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
    #[serde(default)]
    metadata: std::collections::BTreeMap<String, serde_json::Value>,
}

/// Unwraps a Shopify webhook delivered through Amazon EventBridge: `payload` is the body, and
/// `metadata`'s string values the headers, read by [`parse_event`] as a webhook's are. The
/// ledger key is then the hash of EventBridge's JSON of the payload, not of the bytes an HTTP
/// delivery of the same event carries: an event subscribed both ways is two claims, and the
/// second changes nothing (newest-first effects, one timeline row per order version: V19;
/// ARCHITECTURE.md, "EventBridge").
pub fn unwrap_bridged(detail: &str) -> Result<Bridged<'_>, Rejection> {
    let detail: BridgedDetail<'_> = serde_json::from_str(detail).map_err(|_| {
        invalid("the EventBridge detail is not a Shopify webhook (payload, metadata)")
    })?;
    if detail.metadata.len() > MAX_METADATA {
        return Err(invalid(
            "the EventBridge detail carries too many metadata entries",
        ));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &detail.metadata {
        let Some(value) = value.as_str() else {
            continue;
        };
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| invalid("a metadata name is not a header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| invalid("a metadata value is not a header value"))?;
        headers.append(name, value);
    }
    Ok(Bridged {
        body: detail.payload.get(),
        headers,
    })
}

impl Provider for Shopify {
    type Event = ShopifyEvent;
    type Rust<'e> = KeepOrder<'e>;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    // An app whose webhooks go to EventBridge alone has no signing secret to give.
    fn without_webhooks() -> Option<Self> {
        Some(Self { verifier: None })
    }

    fn verifier(&self) -> Option<&dyn Scheme> {
        self.verifier.as_ref().map(|v| v as &dyn Scheme)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<ShopifyEvent>, Rejection> {
        parse_event(signed, unsigned)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<ShopifyEvent>) -> Plan<KeepOrder<'e>> {
        plan(event)
    }

    fn bridged<'d>(&self, detail: &'d str) -> Option<Result<Bridged<'d>, Rejection>> {
        Some(unwrap_bridged(detail))
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(topic: &str, body: &[u8]) -> Result<Parsed<ShopifyEvent>, Rejection> {
        let mut headers = HeaderMap::new();
        headers.insert(TOPIC_HEADER, topic.parse().expect("topic"));
        headers.insert(
            WEBHOOK_ID_HEADER,
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".parse().expect("id"),
        );
        parse_event(&signed(body, &mut headers), &Unsigned::new(&headers))
    }

    /// `body` signed through the provider's own scheme, then verified as the receiver does.
    fn signed<'b>(body: &'b [u8], headers: &mut HeaderMap) -> Signed<'b> {
        let provider = Shopify::from_secret("test-secret").expect("a secret");
        let scheme = provider.verifier().expect("a scheme");
        scheme.sign_into(headers, body, 0, "");
        Signed::verify(scheme, headers, body, 0).expect("signed")
    }

    const ORDER: &str = r#"{"id":820982911946154508,"email":"jon@example.com",
        "updated_at":"2026-11-30T10:00:00-05:00","cancelled_at":null,
        "financial_status":"paid","total_price":"199.65","currency":"USD",
        "line_items":[{"id":1,"quantity":1}]}"#;

    #[test]
    fn an_order_is_read_with_its_state_from_the_body() {
        let parsed = parse("orders/updated", ORDER.as_bytes()).expect("valid");
        let mut signature = HeaderMap::new();
        let sha256 = *signed(ORDER.as_bytes(), &mut signature).sha256();
        assert_eq!(
            parsed.event_id.as_str(),
            claimonce::verify::lower_hex(&sha256),
            "the body's hash"
        );
        assert_eq!(parsed.event_type, "orders/updated");
        assert_eq!(
            parsed.delivery_id.as_ref().map(EventId::as_str),
            Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
        );
        assert_eq!(
            parsed.event,
            ShopifyEvent::Order(Order {
                id: 820_982_911_946_154_508,
                state: "open",
                updated_at: "2026-11-30T10:00:00-05:00".into(),
                rank: 0,
                email: Some("jon@example.com".into()),
                financial_status: Some("paid".into()),
                total_price: Some("199.65".into()),
                currency: Some("USD".into()),
            })
        );
        let cancelled = ORDER.replace(
            r#""cancelled_at":null"#,
            r#""cancelled_at":"2026-11-30T10:00:00-05:00""#,
        );
        // Cancelled by its body, under whichever orders/* topic it came.
        for topic in ["orders/cancelled", "orders/updated"] {
            let ShopifyEvent::Order(o) = parse(topic, cancelled.as_bytes()).expect("valid").event
            else {
                panic!("an order");
            };
            assert_eq!((o.state, o.rank), ("cancelled", 1), "{topic}");
        }
        assert_eq!(
            parse("products/update", br#"{"id":1}"#)
                .expect("valid")
                .event,
            ShopifyEvent::Other
        );
    }

    #[test]
    fn a_topic_cannot_move_a_body_to_another_effect_and_bad_values_are_400() {
        let shop = br#"{"id":548380009,"myshopify_domain":"jsmith.myshopify.com",
            "domain":"shop.example.com","updated_at":"2026-11-30T10:00:00-05:00"}"#;
        assert!(matches!(
            parse("app/uninstalled", shop).expect("valid").event,
            ShopifyEvent::Uninstalled(_)
        ));
        let cases: [(&str, &[u8]); 8] = [
            ("app/uninstalled", ORDER.as_bytes()),
            ("orders/create", shop),
            ("orders/cancelled", ORDER.as_bytes()),
            (
                "orders/updated",
                ORDER.replace("199.65", "1e3").into_bytes().leak(),
            ),
            (
                "orders/updated",
                ORDER
                    .replace("-05:00\",\"cancelled", "+16:00\",\"cancelled")
                    .into_bytes()
                    .leak(),
            ),
            (
                "orders/updated",
                ORDER.replace("jon@", "jon\\u0000@").into_bytes().leak(),
            ),
            ("orders/updated", b"not json"),
            ("Orders/Create", ORDER.as_bytes()),
        ];
        for (topic, body) in cases {
            assert_eq!(
                parse(topic, body).expect_err("refused").problem,
                Problem::InvalidPayload,
                "{topic}: {}",
                String::from_utf8_lossy(body)
            );
        }
        for amount in ["0", "199.65", "-5.5", "12345678901234567890.0123456789"] {
            assert!(is_amount(amount), "{amount}");
        }
        for amount in ["", "1.", ".5", "1e3", "1,5", "123456789012345678901"] {
            assert!(!is_amount(amount), "{amount}");
        }
    }

    #[test]
    fn a_bridged_event_reads_as_its_webhook_would() {
        let detail = format!(
            r#"{{"payload":{ORDER},"metadata":{{"Content-Type":"application/json",
            "X-Shopify-Topic":"orders/updated","X-Shopify-Webhook-Id":"w-1",
            "X-Shopify-Triggered-At":"2026-12-02T10:00:00Z","X-Shopify-Extra":7}}}}"#
        );
        let bridged = unwrap_bridged(&detail).expect("a Shopify detail");
        assert_eq!(bridged.body, ORDER);
        let mut signature = HeaderMap::new();
        let parsed = parse_event(
            &signed(bridged.body.as_bytes(), &mut signature),
            &Unsigned::new(&bridged.headers),
        )
        .expect("an order");
        assert_eq!(parsed.event_type, "orders/updated");
        assert_eq!(
            parsed.delivery_id.as_ref().map(EventId::as_str),
            Some("w-1")
        );
        let crowded: String = (0..=MAX_METADATA)
            .map(|i| format!(r#""x-h{i}":"v""#))
            .collect::<Vec<_>>()
            .join(",");
        for refused in [
            r#"{"metadata":{"X-Shopify-Topic":"orders/updated"}}"#.to_owned(),
            format!(r#"{{"payload":{ORDER},"metadata":{{"bad name":"v"}}}}"#),
            format!(r#"{{"payload":{ORDER},"metadata":{{{crowded}}}}}"#),
            "[]".to_owned(),
        ] {
            assert_eq!(
                unwrap_bridged(&refused).expect_err("refused").problem,
                Problem::InvalidPayload,
                "{refused}"
            );
        }
    }
}
