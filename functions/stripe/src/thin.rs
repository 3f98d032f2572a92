//! Stripe's thin events: a small, unversioned notification (`"object": "v2.core.event"`, an
//! id, a type, a `related_object`, and during a migration from snapshot events the
//! `snapshot_event` it stands for), signed and delivered as a snapshot event is, whose data the
//! receiver fetches from Stripe's API before the claim ([`claimonce::complete`]).
//!
//! - With `snapshot_event`, the snapshot event itself is fetched (`GET /v1/events/{id}`) and
//!   applied under its own id: a snapshot event and its thin twin are one claim.
//! - A `v1.` type without one is applied from the related object's current state
//!   (`GET {related_object.url}`) as the snapshot event of the type without its prefix would be,
//!   under the thin event's id. The object may already be newer than the event: a subscription
//!   kept from it is stamped with the time it was read, so it stays newest-wins against any
//!   event created before that read.
//! - An event with a `context` (a connected account's, or another account of an
//!   organization's) is completed in that context: every GET carries it as `Stripe-Context`,
//!   as Stripe's SDKs fetch a thin event's related object (Stripe's "Stripe-Context header"
//!   guide; the event's `context` is "the authentication context needed to fetch the event or
//!   related object").
//! - A fetch answered 404 with no context (the object or event is gone) is decided: the event
//!   is claimed and answered `ignored`. With a context, a 404 may be the key not reaching that
//!   account: the delivery fails (500) with a line that says so, and is never ignored. Any
//!   other answer, or none within the bound, fails the delivery, and Stripe's retry (or the
//!   queue's) tries again.
//! - A type with no effect here (`v1.charge.succeeded`, any `v2.`) is claimed and ignored with
//!   no fetch: reading it would need a key with more rights than the effects, and a refusal
//!   would fail the delivery on every retry.

use claimonce::complete::{Incomplete, SenderApi};
use claimonce::prelude::*;
use serde::Deserialize;

use crate::{StripeEvent, invalid, parse_event};

/// What the effect needs from a thin event to be completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thin {
    /// `related_object.url`: the object's path under the API (`/v1/invoices/in_...`).
    pub related_url: Option<String>,
    /// `snapshot_event`: the id of the snapshot event this one stands for.
    pub snapshot_event: Option<String>,
    /// `context`: the account the event happened in, when not the key's own (`acct_…`, or an
    /// organization's path of them), sent as `Stripe-Context` with every fetch.
    pub context: Option<String>,
}

#[derive(Deserialize)]
struct Notification {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    related_object: Option<Related>,
    #[serde(default)]
    snapshot_event: Option<String>,
    #[serde(default)]
    context: Option<String>,
}

#[derive(Deserialize)]
struct Related {
    url: String,
}

/// True for a path Stripe's API could name as an object's: `/v1/` and then letters, digits,
/// `_`, `-` and `/`, nothing that climbs or queries.
fn is_object_path(path: &str) -> bool {
    path.len() <= 256
        && path.starts_with("/v1/")
        && !path.contains("//")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-/".contains(&b))
}

/// True for an id that can stand in a path: letters, digits and `_`.
fn is_plain_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 255 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// True for a context Stripe writes: ids (letters, digits, `_`) joined by `/`.
fn is_context(context: &str) -> bool {
    context.len() <= 255 && context.split('/').all(is_plain_id)
}

/// Reads a thin event notification (`"object": "v2.core.event"`).
pub fn parse_thin(body: &[u8]) -> Result<Parsed<StripeEvent>, Rejection> {
    let n: Notification =
        serde_json::from_slice(body).map_err(|_| invalid("the signed body is not a thin event"))?;
    let related_url = n.related_object.map(|r| r.url);
    if related_url.as_deref().is_some_and(|u| !is_object_path(u)) {
        return Err(invalid(
            "the thin event's related_object.url is not an API path",
        ));
    }
    if n.snapshot_event
        .as_deref()
        .is_some_and(|id| !is_plain_id(id))
    {
        return Err(invalid(
            "the thin event's snapshot_event is not an event id",
        ));
    }
    if n.context.as_deref().is_some_and(|c| !is_context(c)) {
        return Err(invalid("the thin event's context is not an account path"));
    }
    if n.event_type.contains('\0') || n.event_type.len() > 255 {
        return Err(invalid("the thin event's type cannot be stored"));
    }
    Ok(Parsed::new(
        EventId::new(n.id)?,
        n.event_type,
        StripeEvent::Thin(Thin {
            related_url,
            snapshot_event: n.snapshot_event,
            context: n.context,
        }),
    ))
}

/// Whether completing the thin event `event` reads Stripe's API: only a `v1.` type with an
/// effect here does.
pub fn fetches(event: &Parsed<StripeEvent>) -> bool {
    matches!(event.event, StripeEvent::Thin(_))
        && event
            .event_type
            .strip_prefix("v1.")
            .is_some_and(|kind| crate::EFFECT_TYPES.contains(&kind))
}

/// The thin event `event` completed from Stripe's API (module documentation).
pub async fn complete(
    event: &Parsed<StripeEvent>,
    thin: &Thin,
    api: Option<&SenderApi>,
) -> Result<Parsed<StripeEvent>, Incomplete> {
    let gone = || {
        Parsed::new(
            event.event_id.clone(),
            event.event_type.clone(),
            StripeEvent::Other,
        )
    };
    if !fetches(event) {
        return Ok(gone());
    }
    let context: Vec<(&str, &str)> = thin
        .context
        .as_deref()
        .map(|c| ("stripe-context", c))
        .into_iter()
        .collect();
    // A 404 in another account's context may be the key not reaching it, not the object gone:
    // never decided as gone.
    let not_found = |what: &str| match &thin.context {
        None => Ok(gone()),
        Some(context) => Err(Incomplete(format!(
            "{what}: HTTP 404 in context {context}: the object is gone or the API key cannot \
             reach that account (a Connect platform's secret or restricted key reaches its \
             connected accounts); not ignored"
        ))),
    };
    if let Some(snapshot) = &thin.snapshot_event {
        let fetched = api_of(api)?
            .get(&format!("/v1/events/{snapshot}"), &context)
            .await?;
        return match fetched.status {
            200 => parse_event(&fetched.body).map_err(|r| {
                Incomplete(format!("the snapshot event does not parse: {}", r.detail))
            }),
            404 => not_found("GET /v1/events/<snapshot_event>"),
            status => Err(Incomplete(format!(
                "GET /v1/events/<snapshot_event>: HTTP {status}"
            ))),
        };
    }
    let (Some(kind), Some(url)) = (event.event_type.strip_prefix("v1."), &thin.related_url) else {
        return Ok(gone());
    };
    let fetched = api_of(api)?.get(url, &context).await?;
    match fetched.status {
        200 => {
            let object: &serde_json::value::RawValue = serde_json::from_slice(&fetched.body)
                .map_err(|_| Incomplete("the related object is not JSON".into()))?;
            // The snapshot event this type would have been, holding the object as read now.
            let snapshot = serde_json::json!({
                "id": event.event_id.as_str(),
                "object": "event",
                "type": kind,
                "created": claimonce::timestamp::unix_now(),
                "data": {"object": object},
            });
            let mut parsed = parse_event(snapshot.to_string().as_bytes()).map_err(|r| {
                Incomplete(format!("the related object does not parse: {}", r.detail))
            })?;
            parsed.event_type.clone_from(&event.event_type);
            Ok(parsed)
        }
        404 => not_found("GET related_object.url"),
        status => Err(Incomplete(format!("GET related_object.url: HTTP {status}"))),
    }
}

fn api_of(api: Option<&SenderApi>) -> Result<&SenderApi, Incomplete> {
    api.ok_or_else(|| {
        Incomplete(
            "a thin event needs Stripe's API: set STRIPE_API_KEY (or STRIPE_API_KEY_ARN)".into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thin_event_is_read_and_what_it_names_is_checked() {
        let body = br#"{"id":"evt_test_65R9","object":"v2.core.event","type":"v1.invoice.paid",
            "livemode":false,"created":"2026-12-02T10:00:00.000Z","context":null,
            "related_object":{"id":"in_1","type":"invoice","url":"/v1/invoices/in_1"},
            "snapshot_event":"evt_1QSnap"}"#;
        let parsed = parse_thin(body).expect("a thin event");
        assert_eq!(parsed.event_id.as_str(), "evt_test_65R9");
        assert_eq!(parsed.event_type, "v1.invoice.paid");
        assert_eq!(
            parsed.event,
            StripeEvent::Thin(Thin {
                related_url: Some("/v1/invoices/in_1".into()),
                snapshot_event: Some("evt_1QSnap".into()),
                context: None,
            })
        );
        let connected = String::from_utf8_lossy(body).replace(
            r#""context":null"#,
            r#""context":"org_1Abc/acct_1Connected""#,
        );
        let StripeEvent::Thin(thin) = parse_thin(connected.as_bytes())
            .expect("a thin event")
            .event
        else {
            panic!("not thin")
        };
        assert_eq!(thin.context.as_deref(), Some("org_1Abc/acct_1Connected"));
        for (from, to) in [
            ("/v1/invoices/in_1", "https://evil.example/v1/x"),
            ("/v1/invoices/in_1", "/v1/../v2/core/x"),
            ("/v1/invoices/in_1", "/v1/invoices/in_1?expand=x"),
            ("evt_1QSnap", "evt/../x"),
            (r#""context":null"#, r#""context":"acct_1\r\nx-evil: 1""#),
            (r#""context":null"#, r#""context":"acct_1//acct_2""#),
        ] {
            let bad = String::from_utf8_lossy(body).replace(from, to);
            assert!(parse_thin(bad.as_bytes()).is_err(), "{to}");
        }
    }
}
