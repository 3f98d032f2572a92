//! The senders' own APIs (GitHub's, Stripe's), as the recover functions call them: one HTTPS
//! client verified against the public web roots with aws-lc-rs (the provider the database
//! connection and the AWS SDK use), a base URL setting, a deadline per request, and the rate
//! limit read from an answer.
//!
//! A base URL is `https://` (GitHub Enterprise Server, Stripe's API); `http://` is accepted
//! only for a loopback host, which is where the tests' stand-ins and localstripe listen: a
//! key or a JWT is never sent in the clear over a network.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::config::ConfigError;

/// The largest answer read (a page of 100 Stripe events is a few hundred KiB).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// How long one request may take, connect to last byte.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// How long to wait after a rate-limited answer that says nothing of when to come back.
pub const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// The longest wait a rate limit is taken to ask for: a day. A scheduled run comes back
/// sooner anyway, and a larger `retry-after` (up to `u64::MAX` seconds, which no clock can add)
/// is read as this.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(86_400);

/// The HTTPS client of the functions' own calls out (a sender's API, CloudFormation's
/// pre-signed response URL): HTTP/1 on rustls with aws-lc-rs and the public web roots; plain
/// `http` only where the caller allows it (a loopback test server).
pub type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A new [`HttpsClient`].
pub fn https_client() -> Result<HttpsClient, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|_| "TLS protocol versions unavailable".to_owned())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// One sender's API: its base URL and the client that reaches it.
#[derive(Clone)]
pub struct Api {
    base: String,
    client: HttpsClient,
    user_agent: HeaderValue,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Api({})", self.base)
    }
}

/// An answer read whole.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// Why a request got no answer to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The sender said to come back later (429, or GitHub's 403 with a rate-limit header).
    RateLimited {
        /// How long from now.
        retry_after: Duration,
    },
    /// An answer with another status than the call expects; the text is ours and the
    /// sender's error code or message, never a key.
    Status(u16, String),
    /// No answer: connect, TLS or I/O failed, or the body was larger than
    /// [`MAX_ANSWER_BYTES`].
    Unreachable(String),
    /// No answer within [`REQUEST_TIMEOUT`].
    TimedOut,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::RateLimited { retry_after } => {
                write!(f, "rate limited for {} s", retry_after.as_secs())
            }
            ApiError::Status(status, what) => write!(f, "HTTP {status}: {what}"),
            ApiError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ApiError::TimedOut => write!(f, "no answer within {} s", REQUEST_TIMEOUT.as_secs()),
        }
    }
}

impl std::error::Error for ApiError {}

impl Api {
    /// The API at the URL in `var`, or at `default`.
    pub fn from_env(var: &str, default: &str) -> Result<Self, ConfigError> {
        let base = crate::config::optional(var).unwrap_or_else(|| default.to_owned());
        Self::new(&base).map_err(|why| ConfigError::new(format!("{var}: {why}")))
    }

    /// The API at `base` (`https://host[:port][/prefix]`, or `http://` on a loopback host).
    pub fn new(base: &str) -> Result<Self, String> {
        let base = base.trim().trim_end_matches('/').to_owned();
        let uri: http::Uri = base
            .parse()
            .map_err(|_| "not a URL (https://host[/prefix])".to_owned())?;
        let host = uri.host().unwrap_or("");
        match uri.scheme_str() {
            Some("https") if !host.is_empty() => {}
            Some("http") if is_loopback(host) => {}
            Some("http") => {
                return Err(
                    "http:// is accepted only on a loopback host (a test's stand-in): use https://"
                        .into(),
                );
            }
            _ => return Err("not an https:// URL with a host".into()),
        }
        if uri.query().is_some() {
            return Err("a base URL has no query".into());
        }
        let client = https_client()?;
        let user_agent = HeaderValue::from_static(concat!("claimonce/", env!("CARGO_PKG_VERSION")));
        Ok(Self {
            base,
            client,
            user_agent,
        })
    }

    /// The base URL, as configured (no trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends `method` to `path` (which starts with `/` and may carry a query) with `headers`
    /// and `body`, and reads the answer whole. A rate-limited answer is
    /// [`ApiError::RateLimited`]; every other status is the caller's to judge.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ApiError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::USER_AGENT, self.user_agent.clone());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|_| ApiError::Unreachable("the request could not be built".into()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| ApiError::Unreachable(chain(&e)))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|_| {
                    ApiError::Unreachable(format!(
                        "the answer was cut off or is over {MAX_ANSWER_BYTES} bytes"
                    ))
                })?
                .to_bytes();
            Ok::<_, ApiError>(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| ApiError::TimedOut)??;
        match rate_limit(answer.status, &answer.headers, SystemTime::now()) {
            Some(retry_after) => Err(ApiError::RateLimited { retry_after }),
            None => Ok(answer),
        }
    }
}

/// A header for [`Api::send`] whose value is a credential: marked sensitive, so `http` never
/// shows it in a `Debug` output.
pub fn secret_header(name: HeaderName, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| format!("the {name} credential holds a character a header cannot carry"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// A credential for a sender's API (a restricted key, an API key): its text is what the
/// caller puts in a header, and its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps `key` (surrounding whitespace, as a secret's text often ends, is dropped).
    pub fn new(key: &str) -> Self {
        Self(key.trim().to_owned())
    }

    /// The `Authorization: Bearer <key>` header, marked sensitive.
    pub fn bearer(&self) -> Result<(HeaderName, HeaderValue), String> {
        secret_header(http::header::AUTHORIZATION, &format!("Bearer {}", self.0))
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// One execution environment's memory of its sender's last rate limit: a recover function
/// makes no request before it resets.
#[derive(Debug, Default)]
pub struct Quiet(std::sync::Mutex<Option<std::time::Instant>>);

impl Quiet {
    /// Whole seconds left (at least 1) before the last rate limit resets, while it has not.
    pub fn seconds_left(&self) -> Option<u64> {
        self.0
            .lock()
            .ok()
            .and_then(|q| *q)
            .and_then(|until| until.checked_duration_since(std::time::Instant::now()))
            .filter(|left| !left.is_zero())
            .map(|left| left.as_secs().max(1))
    }

    /// Remembers a rate limit that resets in `wait` (at most [`MAX_RATE_LIMIT_WAIT`] counts).
    pub fn until(&self, wait: Duration) {
        let now = std::time::Instant::now();
        if let Ok(mut quiet) = self.0.lock() {
            *quiet = now
                .checked_add(wait.min(MAX_RATE_LIMIT_WAIT))
                .or_else(|| now.checked_add(MAX_RATE_LIMIT_WAIT));
        }
    }
}

/// How long an answer says to wait: a 429, or a 403 that GitHub marks as a rate limit (a
/// `retry-after`, or `x-ratelimit-remaining: 0`). `retry-after` (seconds) wins; else
/// `x-ratelimit-reset` (Unix seconds) from `now`; else [`DEFAULT_RATE_LIMIT_WAIT`]; never more
/// than [`MAX_RATE_LIMIT_WAIT`]. `None` when the answer is not a rate limit.
pub fn rate_limit(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let retry_after = number("retry-after");
    let exhausted = number("x-ratelimit-remaining") == Some(0);
    let limited = status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN && (retry_after.is_some() || exhausted));
    if !limited {
        return None;
    }
    let wait = if let Some(seconds) = retry_after {
        Duration::from_secs(seconds)
    } else if let Some(reset) = number("x-ratelimit-reset") {
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Duration::from_secs(reset.saturating_sub(now))
    } else {
        DEFAULT_RATE_LIMIT_WAIT
    };
    Some(wait.min(MAX_RATE_LIMIT_WAIT))
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An error and its causes, one line: what a connect or TLS failure was.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("a value"));
        }
        map
    }

    #[test]
    fn a_base_url_is_https_or_loopback_http() {
        assert!(Api::new("https://api.github.com").is_ok());
        assert_eq!(
            Api::new("https://ghe.example.com/api/v3/")
                .expect("GHES")
                .base(),
            "https://ghe.example.com/api/v3"
        );
        assert!(Api::new("http://127.0.0.1:8420").is_ok());
        assert!(Api::new("http://localhost:8420").is_ok());
        assert!(Api::new("http://[::1]:8420").is_ok());
        for bad in [
            "http://api.stripe.com",
            "ftp://x",
            "api.github.com",
            "",
            "https://x?y=1",
        ] {
            assert!(Api::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rate_limits_are_read_as_github_and_stripe_send_them() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let ok = StatusCode::OK;
        let forbidden = StatusCode::FORBIDDEN;
        let many = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(rate_limit(ok, &headers(&[("retry-after", "5")]), now), None);
        assert_eq!(
            rate_limit(forbidden, &headers(&[]), now),
            None,
            "a 403 alone"
        );
        assert_eq!(
            rate_limit(forbidden, &headers(&[("retry-after", "30")]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            rate_limit(
                forbidden,
                &headers(&[
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "1090")
                ]),
                now
            ),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            rate_limit(many, &headers(&[]), now),
            Some(DEFAULT_RATE_LIMIT_WAIT)
        );
        assert_eq!(
            rate_limit(many, &headers(&[("x-ratelimit-reset", "10")]), now),
            Some(Duration::ZERO),
            "a reset in the past"
        );
        // Any number a header can hold is a wait a clock can add.
        for huge in [&u64::MAX.to_string(), "99999999999", "4000000000"] {
            for header in ["retry-after", "x-ratelimit-reset"] {
                let wait = rate_limit(many, &headers(&[(header, huge)]), now).expect("limited");
                assert_eq!(wait, MAX_RATE_LIMIT_WAIT, "{header}: {huge}");
                assert!(std::time::Instant::now().checked_add(wait).is_some());
            }
        }
    }

    #[test]
    fn a_credential_header_is_not_shown() {
        let (_, value) =
            secret_header(http::header::AUTHORIZATION, "Bearer sk_live_x").expect("a header");
        assert!(!format!("{value:?}").contains("sk_live_x"));
        assert!(secret_header(http::header::AUTHORIZATION, "a\nb").is_err());
    }
}
