//! What a provider crate writes: a [`Provider`] (how to verify, how to read an event, what the
//! event does) and the types its parser sees and returns.
//!
//! The parser sees the request in two parts, and the types say which is which: [`Signed`] is
//! the body the signature covers (with what the scheme's signed headers said), [`Unsigned`]
//! the headers nobody signed, which a sender may still put an id or an event name in (GitHub's
//! `X-GitHub-Delivery` and `X-GitHub-Event`). Whatever a provider takes from [`Unsigned`] an
//! attacker who replays a signed body can choose, so it must never decide what an event does
//! on its own.

use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::complete::{Incomplete, SenderApi};
use crate::effect::{Plan, RustEffect};
use crate::headers::{HeaderFault, one_header};
use crate::ids::EventId;
use crate::response::{Handshake, Problem, Rejection};
use crate::verify::{Scheme, Verified, Verify};

/// What the signature covers: the raw body, its SHA-256, and what the scheme's signed headers
/// said.
#[derive(Debug, Clone)]
pub struct Signed<'a> {
    body: &'a [u8],
    sha256: [u8; 32],
    verified: Verified,
}

impl<'a> Signed<'a> {
    /// `body` with what its verification learned. Only the receiver builds one this way: for
    /// a delivery whose signature passed, and for an event whose way of arriving vouches for it
    /// (EventBridge, the sender's API read over verified TLS).
    pub(crate) fn new(body: &'a [u8], verified: Verified) -> Self {
        Self {
            body,
            sha256: Sha256::digest(body).into(),
            verified,
        }
    }

    /// `body` verified by `scheme` against `headers` at `now`, as the receiver verifies a
    /// delivery: the one way a provider crate's tests hand their parser a signed body (signed
    /// first through the scheme's [`Sign`](crate::verify::Sign)).
    pub fn verify(
        scheme: &dyn Verify,
        headers: &HeaderMap,
        body: &'a [u8],
        now: u64,
    ) -> Result<Self, Rejection> {
        Ok(Self::new(body, scheme.verify(headers, body, now)?))
    }

    /// The raw body, exactly as signed.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// SHA-256 of the raw body (stored with the claim).
    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// The message id, when the scheme signs one (Standard Webhooks' `webhook-id`).
    pub fn message_id(&self) -> Option<&EventId> {
        self.verified.message_id.as_ref()
    }
}

/// The request's headers, read-only and unsigned.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    headers: &'a HeaderMap,
    /// Where the receiver notes each header the parser read and found, so that a spilled
    /// delivery carries exactly those ([`crate::spill`]).
    read: Option<&'a std::cell::RefCell<Vec<(String, String)>>>,
}

impl<'a> Unsigned<'a> {
    /// The request's headers.
    pub fn new(headers: &'a HeaderMap) -> Self {
        Self {
            headers,
            read: None,
        }
    }

    /// The request's headers, noting in `read` each one the parser reads and finds.
    pub(crate) fn noting(
        headers: &'a HeaderMap,
        read: &'a std::cell::RefCell<Vec<(String, String)>>,
    ) -> Self {
        Self {
            headers,
            read: Some(read),
        }
    }

    /// The one value of header `name` (lower case), trimmed; `None` when absent. A header
    /// that appears more than once, is not ASCII or is longer than the schemes' limit is a
    /// 400, through the same check the signature headers pass.
    pub fn header(&self, name: &str) -> Result<Option<&'a str>, Rejection> {
        let found = self.lookup(name)?;
        if let (Some(read), Some(value)) = (self.read, found) {
            read.borrow_mut()
                .push((name.to_ascii_lowercase(), value.to_owned()));
        }
        Ok(found)
    }

    fn lookup(&self, name: &str) -> Result<Option<&'a str>, Rejection> {
        one_header(self.headers, name).map_err(|fault| {
            Rejection::new(
                Problem::InvalidPayload,
                match fault {
                    HeaderFault::Repeated => "a header the provider reads appears more than once",
                    HeaderFault::NotAscii => "a header the provider reads is not ASCII",
                    HeaderFault::TooLong => "a header the provider reads is too long",
                },
            )
        })
    }
}

/// A signed request, parsed: its identity in the ledger and the provider's event.
#[derive(Debug)]
pub struct Parsed<E> {
    /// The dedup key within the provider.
    pub event_id: EventId,
    /// The provider's event type, for the ledger and the logs.
    pub event_type: String,
    /// The sender's id for this delivery attempt when it differs from the ledger key (GitHub's
    /// `X-GitHub-Delivery`): logged, so an operator can find the delivery in the sender's
    /// dashboard.
    pub delivery_id: Option<EventId>,
    /// Whatever the provider's effect needs.
    pub event: E,
}

impl<E> Parsed<E> {
    /// An event keyed by `event_id`, with no separate delivery id.
    pub fn new(event_id: EventId, event_type: impl Into<String>, event: E) -> Self {
        Self {
            event_id,
            event_type: event_type.into(),
            delivery_id: None,
            event,
        }
    }
}

/// A provider's name, which claimonce gives every [`Provider`] from its registry entry. Its one
/// implementation is claimonce's, for every provider, so a provider crate cannot set it:
///
/// ```compile_fail,E0119
/// # use claimonce::prelude::ProviderName;
/// # struct Example;
/// # impl claimonce::prelude::Provider for Example {
/// #     type Event = ();
/// #     type Rust<'e> = claimonce::prelude::NoRustEffect;
/// #     const MANIFEST: &'static str = "[package.metadata.claimonce]\nprovider = \"example\"\n";
/// #     fn verifier(&self) -> Option<&dyn claimonce::prelude::Scheme> { None }
/// #     fn parse(
/// #         &self,
/// #         _: &claimonce::prelude::Signed<'_>,
/// #         _: &claimonce::prelude::Unsigned<'_>,
/// #     ) -> Result<claimonce::prelude::Parsed<()>, claimonce::prelude::Rejection> {
/// #         unimplemented!()
/// #     }
/// #     fn plan<'e>(&'e self, _: &'e claimonce::prelude::Parsed<()>) -> claimonce::prelude::Plan<Self::Rust<'e>> {
/// #         claimonce::prelude::Plan::Nothing
/// #     }
/// # }
/// impl ProviderName for Example {
///     const NAME: &'static str = "another";
/// }
/// ```
pub trait ProviderName {
    /// The ledger namespace (`processed_events.provider`), the route segment and the role's
    /// suffix: the registry entry's `provider`, read from [`Provider::MANIFEST`] by the
    /// compiler (a manifest without one does not build).
    const NAME: &'static str;
}

impl<P: Provider + ?Sized> ProviderName for P {
    const NAME: &'static str = claimonce_registry::provider_name(P::MANIFEST);
}

/// What a provider contributes: how to verify, how to read the event, what the event does.
/// Its name ([`ProviderName::NAME`]) comes with it.
pub trait Provider: ProviderName + Send + Sync + 'static {
    /// The provider's event, as its effect needs it.
    type Event: Send + Sync;

    /// The provider crate's manifest, `include_str!("../Cargo.toml")` in its `lib.rs`: its
    /// registry entry (`[package.metadata.claimonce]`) is where the provider's name and secret
    /// variable are written, once ([`claimonce_registry`]).
    const MANIFEST: &'static str;

    /// The provider with no signing secret, for a function that takes its sender's events
    /// through EventBridge alone ([`Provider::bridged`]): it refuses every webhook (400
    /// `signature-mismatch`: nothing can be verified) and drains no spill queue. `None`, the
    /// default, for a provider that always needs its secret; the function then stops at start
    /// naming the secret's variable.
    fn without_webhooks() -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// The configured signature scheme, which verifies and signs; `None` for a provider that
    /// takes no webhooks (one built to read events from its sender's own API, a recover
    /// function's), whose receiver then refuses every delivery (400 `signature-mismatch`) and
    /// drains nothing.
    fn verifier(&self) -> Option<&dyn Scheme>;

    /// Reads a verified request: the signed body, and the headers nobody signed.
    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<Self::Event>, Rejection>;

    /// What a Rust effect of this provider holds ([`Plan::Rust`]): typically references into
    /// the event. A provider without one says [`NoRustEffect`](crate::effect::NoRustEffect).
    type Rust<'e>: RustEffect + 'e
    where
        Self: 'e;

    /// The event's plan, in one step: nothing (claimed and answered `ignored`), a call of one
    /// of the provider's effect functions in the claim's statement, or Rust on the claim's
    /// transaction. Whatever it is runs only if this delivery wins the claim, and commits or
    /// rolls back with it.
    fn plan<'e>(&'e self, event: &'e Parsed<Self::Event>) -> Plan<Self::Rust<'e>>;

    /// Answers a verified delivery that is no event but its sender checking the endpoint
    /// (a URL-verification request whose challenge must come back in the body) with a small JSON
    /// object of the provider's own ([`Handshake::json`]), before any parsing: no claim, nothing
    /// written, logged as `handshake`. `None`, the default, for a delivery that is an event,
    /// which [`Provider::parse`] then reads.
    fn handshake(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Option<Result<Handshake, Rejection>> {
        let _ = (signed, unsigned);
        None
    }

    /// Unwraps an event its sender delivered through Amazon EventBridge (the envelope's
    /// `detail`, as the sender wrote it) into the body and headers its webhook would have
    /// carried, which [`Provider::parse`] then reads as it reads a webhook.
    /// `None`, the default, for a provider whose sender has no EventBridge integration: its
    /// function takes no EventBridge event.
    fn bridged<'d>(&self, detail: &'d str) -> Option<Result<Bridged<'d>, Rejection>> {
        let _ = detail;
        None
    }

    /// Whether [`Provider::complete`] reads the sender's API for `event` (a drain then takes it
    /// only while the sender's bound still fits before its invocation's deadline). `false`, the
    /// default, for a provider that completes nothing.
    fn completes(&self, event: &Parsed<Self::Event>) -> bool {
        let _ = event;
        false
    }

    /// Completes an event that carries only a reference to its data (a Stripe thin event)
    /// from the sender's own API (`api`: `None` when the function has none configured), after
    /// it was verified and parsed and before its claim: outside any transaction, each GET
    /// bounded ([`crate::complete`]). The event it returns is the one claimed and applied, under
    /// the id it carries (which may be another than the parsed one: the snapshot event a thin
    /// event stands for); `None` keeps the event as parsed, which the default does. An error
    /// fails this delivery, to be tried again.
    fn complete<'a>(
        &'a self,
        event: &'a Parsed<Self::Event>,
        api: Option<&'a SenderApi>,
    ) -> impl Future<Output = Result<Option<Parsed<Self::Event>>, Incomplete>> + Send + 'a {
        let _ = (event, api);
        std::future::ready(Ok(None))
    }
}

/// A sender's event unwrapped from EventBridge's `detail` by its provider
/// ([`Provider::bridged`](crate::prelude::Provider::bridged)): the body and the headers its webhook
/// would have carried, for the provider's own parser.
#[derive(Debug)]
pub struct Bridged<'d> {
    /// The event's JSON, as its webhook's body would hold it.
    pub body: &'d str,
    /// What the webhook's headers would have said (Shopify's topic), read by the parser as
    /// it reads them from a webhook.
    pub headers: http::HeaderMap,
}

impl<'d> Bridged<'d> {
    /// A `detail` that is the event itself, with no headers (Stripe's).
    pub fn body(detail: &'d str) -> Self {
        Self {
            body: detail,
            headers: http::HeaderMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsigned_header_passes_the_schemes_checks() {
        let mut headers = HeaderMap::new();
        headers.insert("x-one", " value ".parse().expect("value"));
        headers.append("x-two", "a".parse().expect("value"));
        headers.append("x-two", "b".parse().expect("value"));
        headers.insert(
            "x-long",
            "y".repeat(5000).parse().expect("a long value is a value"),
        );
        let unsigned = Unsigned::new(&headers);
        assert_eq!(unsigned.header("x-one"), Ok(Some("value")));
        assert_eq!(unsigned.header("x-absent"), Ok(None));
        for name in ["x-two", "x-long"] {
            assert_eq!(
                unsigned.header(name).expect_err("refused").problem,
                Problem::InvalidPayload
            );
        }
    }
}
