//! What the fuzz targets share: every registered provider's receiver, built as its function
//! builds it (with the constructor its `main.rs` hands to `claimonce::run_from_env`, listed in
//! `registered.rs`, which `scripts/template` renders from the registry), with its local secret
//! and a database that nothing can reach; its scheme's signer; and its samples' unsigned
//! headers (`events/<provider>/*.json`), so a signed fuzz body reaches the parser the way a
//! real delivery does. A new provider is fuzzed with no edit here.
//!
//! Only a validly signed request gets as far as the database, and the fuzzer cannot forge a
//! signature; if an input ever did get there, it would meet a refused connection on port 1 and
//! answer 500, which `apigw_event` accepts.

use std::sync::LazyLock;
use std::time::Duration;

use claimonce::db::{Database, Settings, Timeouts};
use claimonce::jobs::claim_statement;
use claimonce::lambda::Payload;
use claimonce::log::{Captured, Log};
use claimonce::prelude::{ConfigError, Plan, Problem, Provider, Sign};
use claimonce::{Admission, Admitted, Limits, Receiver};
use lambda_http::http::{HeaderMap, HeaderName, HeaderValue, Method};
use lambda_http::{Body, Request};

mod registered;

/// Bodies above this are refused with 413; small, so that libFuzzer's inputs reach that path.
pub const MAX_BODY_BYTES: usize = 4096;

/// A closed port on loopback: a connection attempt is refused at once.
const UNREACHABLE_DATABASE: &str = "postgres://u@127.0.0.1:1/x?sslmode=disable";

/// The message id a scheme that signs one signs.
const MESSAGE_ID: &str = "msg_fuzzSignedBody0000000001";

/// One registered provider, as the targets drive it.
pub trait Fuzzed: Send + Sync {
    /// The provider's name.
    fn provider(&self) -> &'static str;
    /// Its local secret (which must never reach a log line).
    fn secret(&self) -> &'static str;
    /// `body`, signed now as the sender would sign it, under each sample's unsigned headers,
    /// through the receiver's checks: the signature always passes, so the only refusal left
    /// is `InvalidPayload` (400); an accepted event has a usable ledger key, and its delivery
    /// statement composes and calls its effect under the claim.
    fn check_signed_body(&self, body: &[u8], now: u64);
    /// The raw Lambda event text through `claimonce::lambda::handle_event`.
    fn handle_event<'a>(
        &'a self,
        event: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Payload> + 'a>>;
}

struct Registered<P: Provider> {
    provider: &'static str,
    secret: &'static str,
    receiver: Receiver<P>,
    /// A second copy, for the effect of what the receiver admitted.
    effects: P,
    signer: Box<dyn Sign + Send + Sync>,
    /// Each sample's headers, without the ones the scheme signs with.
    samples: Vec<HeaderMap>,
}

fn request(headers: &HeaderMap, signed: &[(String, String)], body: &[u8]) -> Request {
    let mut request = lambda_http::http::Request::builder()
        .method(Method::POST)
        .uri("https://example.execute-api.us-east-1.amazonaws.com/webhooks/fuzz")
        .body(Body::Binary(body.to_vec()))
        .expect("request");
    *request.headers_mut() = headers.clone();
    for (name, value) in signed {
        request.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
            HeaderValue::from_str(value).expect("a header value"),
        );
    }
    request
}

impl<P: Provider> Fuzzed for Registered<P> {
    fn provider(&self) -> &'static str {
        self.provider
    }

    fn secret(&self) -> &'static str {
        self.secret
    }

    fn check_signed_body(&self, body: &[u8], now: u64) {
        let signed = self.signer.sign(body, now, MESSAGE_ID);
        for headers in &self.samples {
            match self.receiver.admit(&request(headers, &signed, body), now) {
                Err(rejection) => {
                    assert_eq!(
                        rejection.problem,
                        Problem::InvalidPayload,
                        "{}: {rejection:?}",
                        self.provider
                    );
                    assert_eq!(rejection.problem.status(), 400);
                }
                // No provider here answers a handshake.
                Ok(Admission::Handshake(_)) => {}
                Ok(Admission::Delivery(Admitted { parsed, .. })) => {
                    let id = parsed.event_id.as_str();
                    assert!(!id.is_empty() && id.len() <= 255 && !id.contains('\0'));
                    if let Plan::Call(effect) = self.effects.plan(&parsed) {
                        let sql = claim_statement(Some(&effect));
                        let function = effect.function();
                        assert!(sql.contains(&format!("CASE WHEN c.won THEN {function}(")));
                    }
                }
            }
        }
    }

    fn handle_event<'a>(
        &'a self,
        event: &'a str,
    ) -> std::pin::Pin<Box<dyn Future<Output = Payload> + 'a>> {
        Box::pin(claimonce::lambda::handle_event(&self.receiver, event))
    }
}

/// Builds the registered receivers (`registered.rs` calls [`Builder::add`] once per
/// provider).
pub struct Builder {
    log: Log,
    built: Vec<Box<dyn Fuzzed>>,
}

impl Builder {
    /// Adds a provider's receiver, built by `build` (its function's constructor) from the
    /// local secret its registry entry gives.
    pub fn add<P: Provider>(&mut self, build: fn(&str) -> Result<P, ConfigError>) {
        let function = claimonce_local::functions::by_provider(P::NAME)
            .expect("the provider registry")
            .expect("a registered provider");
        let secret = function.dev_secret;
        let signer = function.scheme.signer(secret).expect("a signer");
        // The names the scheme signs with, to take out of the samples' headers.
        let signing: Vec<String> = signer
            .sign(b"", 0, MESSAGE_ID)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let mut samples = Vec::new();
        for path in function.samples() {
            let event: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("a sample"))
                    .expect("JSON");
            let mut headers = HeaderMap::new();
            for (name, value) in event["headers"].as_object().into_iter().flatten() {
                let name = name.to_ascii_lowercase();
                let spelled = name.replacen("svix-", "webhook-", 1);
                if signing.contains(&name) || signing.contains(&spelled) {
                    continue;
                }
                if let (Ok(name), Some(Ok(value))) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    value.as_str().map(HeaderValue::from_str),
                ) {
                    headers.insert(name, value);
                }
            }
            samples.push(headers);
        }
        assert!(
            !samples.is_empty(),
            "{0}: no sample in events/{0}/",
            P::NAME
        );
        let limits = Limits {
            max_body_bytes: MAX_BODY_BYTES,
        };
        self.built.push(Box::new(Registered {
            provider: function.provider,
            secret,
            receiver: Receiver::new(
                build(secret).expect("the local secret"),
                database(),
                limits,
                self.log.clone(),
            ),
            effects: build(secret).expect("the local secret"),
            signer,
            samples,
        }));
    }
}

/// Every registered receiver, and the log lines they wrote for the current input.
pub struct Receivers {
    /// One per registered provider, in provider order.
    pub all: Vec<Box<dyn Fuzzed>>,
    log: Captured,
}

impl std::fmt::Debug for Receivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.all.iter().map(|r| r.provider()).collect();
        f.debug_struct("Receivers")
            .field("all", &names)
            .finish_non_exhaustive()
    }
}

impl Receivers {
    /// Takes (and clears) what was logged since the last call, so memory stays flat over
    /// millions of runs.
    pub fn take_log(&self) -> Vec<String> {
        let mut lines = match self.log.lock() {
            Ok(lines) => lines,
            Err(poisoned) => poisoned.into_inner(),
        };
        std::mem::take(&mut *lines)
    }
}

fn database() -> Database {
    let ms = Duration::from_millis;
    let timeouts = Timeouts::new(ms(50), ms(100));
    let settings =
        Settings::from_url(UNREACHABLE_DATABASE, None, timeouts).expect("a plain-TCP URL is valid");
    Database::new(settings)
}

/// The receivers, built once per process.
pub static RECEIVERS: LazyLock<Receivers> = LazyLock::new(|| {
    let (log, captured) = Log::capture();
    let mut builder = Builder {
        log,
        built: Vec::new(),
    };
    registered::add_all(&mut builder);
    let registry = claimonce_local::functions::all().expect("the provider registry");
    assert_eq!(
        builder.built.len(),
        registry.len(),
        "every registered provider is fuzzed (scripts/template renders fuzz/src/registered.rs)"
    );
    Receivers {
        all: builder.built,
        log: captured,
    }
});

/// The current time in unix seconds, as the receivers read it.
pub use claimonce::timestamp::unix_now;
