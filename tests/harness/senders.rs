//! Stand-ins for the senders' own APIs that the recover functions call, each following the
//! provider's published contract for exactly those calls:
//!
//! - [`GitHubApi`]: GitHub's REST description of `GET /app/hook/deliveries` (newest first,
//!   `per_page` up to 100, cursor paging in a `Link` header) and
//!   `POST /app/hook/deliveries/{delivery_id}/attempts` (202), authenticated by an App JWT it
//!   checks against the App's public key as GitHub does (RS256, `iss` the App, `exp` after now
//!   and at most ten minutes ahead, `iat` not in the future); and GitHub's rate-limit answer
//!   (403 with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`).
//! - [`StripeApi`]: Stripe's API reference of `GET /v1/events` (`delivery_success`,
//!   `created[gte|lte]`, `limit` 1 to 100, `starting_after`, newest first, `has_more`), a
//!   secret or restricted key as a bearer token, and its 429. Its events are either the test's
//!   own or read from localstripe (the real emulator, which lists events with `created` and
//!   `starting_after` but has no `delivery_success` filter, returns them oldest first and
//!   accepts only `sk_` keys): the stand-in then adds exactly what localstripe lacks. And
//!   `GET /v2/core/events` for thin events (`delivery_success`, `created_gte`/`created_lte` in
//!   RFC 3339, `limit`, newest first, the next page a `page` token in `next_page_url`; a secret
//!   key only, as Stripe's API v2 overview says, refused with a 401 otherwise), which
//!   localstripe does not serve.
//! - [`ResendApi`]: Resend's API reference of `GET /webhooks/{webhook_id}/events` (most recent
//!   first, `limit` 1 to 100 defaulting to 20, `after` an event id, no `before`; `object`
//!   `list`, `has_more`, `data` of `id`, `type`, `created_at`, `status`) and
//!   `POST /webhooks/{webhook_id}/events/{event_id}/replay`, an API key as a bearer token,
//!   and a 429 with `retry-after`. No emulator serves these calls.

use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::sign::now;

type Reply = hyper::Response<Full<Bytes>>;

fn reply(status: u16, headers: &[(&str, String)], body: Value) -> Reply {
    let mut response = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
    response.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    for (name, value) in headers {
        response.headers_mut().insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
    }
    response
}

/// The query's parameters, percent-decoded where a test needs it (brackets).
fn query(uri: &hyper::Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.replace("%5B", "[").replace("%5D", "]"), v.to_owned())
        })
        .collect()
}

/// One attempt of a GitHub App webhook delivery.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The attempt's id.
    pub id: u64,
    /// The delivery's guid (`X-GitHub-Delivery`).
    pub guid: String,
    /// When it was made (Unix seconds).
    pub delivered_at: u64,
    /// The receiver's status (0: not reached).
    pub status_code: u16,
    /// A redelivery.
    pub redelivery: bool,
    /// The API Gateway event the delivery was: what a redelivery sends again.
    pub request: Value,
}

#[derive(Debug, Default)]
struct GitHubState {
    app_id: String,
    public_key: Vec<u8>,
    attempts: Vec<Attempt>,
    page_size: usize,
    requests: Vec<String>,
    redeliveries: Vec<u64>,
    /// The request (1-based count) answered with a rate limit, and its reset from now.
    rate_limit_at: Option<(usize, u64)>,
    refused_jwts: Vec<String>,
}

/// GitHub's App webhook deliveries API.
#[derive(Debug, Clone)]
pub struct GitHubApi {
    /// `http://127.0.0.1:<port>`, `GITHUB_API_URL`.
    pub url: String,
    state: Arc<Mutex<GitHubState>>,
    /// Permits for answering redelivery requests: none means each waits for the test.
    held: Arc<Mutex<Option<Arc<Semaphore>>>>,
    /// Redelivery requests waiting for a permit.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

/// The test App's id, private key (PKCS#1 PEM, as GitHub hands it out) and public key (DER).
pub fn test_app() -> (&'static str, String, Vec<u8>) {
    let dir = claimonce_local::functions::workspace_root().join("tests/fixtures/github-app");
    let pem = std::fs::read_to_string(dir.join("private-key.pem")).expect("the test App's key");
    let public = std::fs::read(dir.join("public-key.der")).expect("its public key");
    ("424242", pem, public)
}

impl GitHubApi {
    /// Starts the stand-in for App `app_id`, whose public key is `public_key` (RSAPublicKey
    /// DER), serving at most `page_size` deliveries per page.
    pub async fn start(app_id: &str, public_key: Vec<u8>, page_size: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(GitHubState {
            app_id: app_id.to_owned(),
            public_key,
            page_size,
            ..GitHubState::default()
        }));
        let held: Arc<Mutex<Option<Arc<Semaphore>>>> = Arc::default();
        let api = Self {
            url,
            state,
            held,
            waiting: Arc::default(),
        };
        let served = api.clone();
        tokio::spawn(claimonce_local::http::serve(listener, move |request| {
            let api = served.clone();
            async move { api.answer(request).await }
        }));
        api
    }

    /// Adds an attempt to GitHub's record.
    pub fn add(&self, attempt: Attempt) {
        self.state.lock().expect("state").attempts.push(attempt);
    }

    /// The attempt ids redeliveries were asked for, in order.
    pub fn redeliveries(&self) -> Vec<u64> {
        self.state.lock().expect("state").redeliveries.clone()
    }

    /// Every request's method and path, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().expect("state").requests.clone()
    }

    /// Why JWTs were refused, in order.
    pub fn refused_jwts(&self) -> Vec<String> {
        self.state.lock().expect("state").refused_jwts.clone()
    }

    /// The `n`th request from now on (1-based) is answered with GitHub's rate limit, whose reset
    /// is `reset_in` seconds away.
    pub fn rate_limit_request(&self, n: usize, reset_in: u64) {
        let mut state = self.state.lock().expect("state");
        let at = state.requests.len() + n;
        state.rate_limit_at = Some((at, reset_in));
    }

    /// Redelivery requests wait until the test adds permits to the semaphore returned.
    pub fn hold_redeliveries(&self) -> Arc<Semaphore> {
        let semaphore = Arc::new(Semaphore::new(0));
        *self.held.lock().expect("held") = Some(Arc::clone(&semaphore));
        semaphore
    }

    /// Redelivery requests held now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The attempt `id`.
    pub fn attempt(&self, id: u64) -> Attempt {
        let state = self.state.lock().expect("state");
        state
            .attempts
            .iter()
            .find(|a| a.id == id)
            .cloned()
            .expect("a known attempt")
    }

    async fn answer(&self, request: hyper::Request<hyper::body::Incoming>) -> Reply {
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        let line = format!("{method} {path}");
        let auth = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let q = query(request.uri());
        let held = self.held.lock().expect("held").clone();
        if method == hyper::Method::POST
            && let Some(semaphore) = held
        {
            use std::sync::atomic::Ordering;
            self.waiting.fetch_add(1, Ordering::SeqCst);
            semaphore.acquire().await.expect("permit").forget();
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        let mut state = self.state.lock().expect("state");
        state.requests.push(line);
        if let Some((at, reset_in)) = state.rate_limit_at
            && state.requests.len() == at
        {
            state.rate_limit_at = None;
            return reply(
                403,
                &[
                    ("x-ratelimit-limit", "5000".into()),
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", (now() + reset_in).to_string()),
                ],
                json!({"message": "API rate limit exceeded",
                       "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}),
            );
        }
        if let Err(why) = check_jwt(auth.as_deref(), &state.app_id, &state.public_key) {
            state.refused_jwts.push(why.clone());
            return reply(
                401,
                &[],
                json!({"message": why, "documentation_url": "https://docs.github.com/rest"}),
            );
        }
        if method == hyper::Method::GET && path == "/app/hook/deliveries" {
            let per_page = q
                .iter()
                .find(|(k, _)| k == "per_page")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(30)
                .min(100)
                .min(state.page_size);
            let offset = q
                .iter()
                .find(|(k, _)| k == "cursor")
                .and_then(|(_, v)| v.strip_prefix("v1_"))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            // GitHub's `status` filter: `success` is a status code of 200 to 399, `failure`
            // one of 400 to 599 (an attempt with no answer, code 0, is in neither).
            let status = q
                .iter()
                .find(|(k, _)| k == "status")
                .map(|(_, v)| v.clone());
            let range = match status.as_deref() {
                None => 0..u16::MAX,
                Some("success") => 200..400,
                Some("failure") => 400..600,
                Some(_) => {
                    return reply(
                        422,
                        &[],
                        json!({"message": "Validation Failed", "errors": ["status"]}),
                    );
                }
            };
            let mut sorted: Vec<Attempt> = state
                .attempts
                .iter()
                .filter(|a| range.contains(&a.status_code))
                .cloned()
                .collect();
            sorted.sort_by_key(|a| std::cmp::Reverse((a.delivered_at, a.id)));
            let page: Vec<Value> = sorted
                .iter()
                .skip(offset)
                .take(per_page)
                .map(|a| {
                    json!({
                        "id": a.id, "guid": a.guid,
                        "delivered_at": claimonce::timestamp::rfc3339_from_unix(a.delivered_at as i64),
                        "redelivery": a.redelivery, "duration": 0.27,
                        "status": if (200..400).contains(&a.status_code) { "OK" } else { "Invalid HTTP Response: 500" },
                        "status_code": a.status_code, "event": "issues", "action": "opened",
                        "installation_id": 1, "repository_id": 1,
                    })
                })
                .collect();
            let mut headers = Vec::new();
            if offset + per_page < sorted.len() {
                headers.push((
                    "link",
                    format!(
                        "<{}/app/hook/deliveries?per_page={per_page}&cursor=v1_{}{}>; rel=\"next\"",
                        self.url,
                        offset + per_page,
                        status.map_or_else(String::new, |s| format!("&status={s}"))
                    ),
                ));
            }
            return reply(200, &headers, Value::Array(page));
        }
        if method == hyper::Method::POST
            && let Some(id) = path
                .strip_prefix("/app/hook/deliveries/")
                .and_then(|p| p.strip_suffix("/attempts"))
                .and_then(|id| id.parse::<u64>().ok())
        {
            if !state.attempts.iter().any(|a| a.id == id) {
                return reply(404, &[], json!({"message": "Not Found"}));
            }
            state.redeliveries.push(id);
            return reply(202, &[], json!({}));
        }
        reply(404, &[], json!({"message": "Not Found"}))
    }
}

/// GitHub's checks of an App JWT: RS256 over `header.claims` with the App's key, `iss` the
/// App, `exp` in the future and at most ten minutes away, `iat` not in the future.
fn check_jwt(authorization: Option<&str>, app_id: &str, public_key: &[u8]) -> Result<(), String> {
    let token = authorization
        .and_then(|a| a.strip_prefix("Bearer "))
        .ok_or("A JSON web token could not be decoded")?;
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("A JSON web token could not be decoded".into());
    };
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| "A JSON web token could not be decoded".to_owned())
    };
    let header: Value = serde_json::from_slice(&decode(header)?).map_err(|_| "bad header")?;
    if header["alg"] != "RS256" {
        return Err("The JWT's alg is not RS256".into());
    }
    let key = aws_lc_rs::signature::UnparsedPublicKey::new(
        &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
        public_key,
    );
    let signed = token.rsplit_once('.').map_or("", |(s, _)| s);
    key.verify(signed.as_bytes(), &decode(signature)?)
        .map_err(|_| "A JSON web token could not be decoded (signature)".to_owned())?;
    let claims: Value = serde_json::from_slice(&decode(claims)?).map_err(|_| "bad claims")?;
    let (iat, exp) = (
        claims["iat"].as_u64().ok_or("no iat")?,
        claims["exp"].as_u64().ok_or("no exp")?,
    );
    let now = now();
    if claims["iss"] != app_id {
        return Err("'Issuer' claim ('iss') must be the App".into());
    }
    if exp <= now {
        return Err(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time"
                .into(),
        );
    }
    if exp > now + 600 {
        return Err("'Expiration time' claim ('exp') is too far in the future".into());
    }
    if iat > now {
        return Err(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past".into(),
        );
    }
    Ok(())
}

#[derive(Debug, Default)]
struct StripeState {
    key: String,
    /// The test's own events and whether each one's delivery succeeded, in creation order.
    events: Vec<(Value, bool)>,
    /// Events read from localstripe whose delivery succeeded (the rest did not).
    delivered: Vec<String>,
    page_size: usize,
    requests: usize,
    rate_limit_at: Option<usize>,
    /// The request answered with no events and `has_more` true.
    hollow_at: Option<usize>,
    /// Objects served at their path (`/v1/invoices/in_1`) in their account's context (`None`:
    /// the key's own account), as `GET` of one returns it.
    objects: std::collections::HashMap<(Option<String>, String), Value>,
    /// The status the next object or event `GET`s are answered with instead, one each.
    failing: Vec<u16>,
    /// Held object and event `GET`s wait for a permit of this.
    held: Option<Arc<Semaphore>>,
    /// The paths of the object and event `GET`s received, in order.
    fetched: Vec<String>,
}

/// Stripe's API as the recover function and the thin events read it: `GET /v1/events` (the
/// list), `GET /v1/events/{id}`, and `GET` of the objects a test puts.
#[derive(Debug, Clone)]
pub struct StripeApi {
    /// `http://127.0.0.1:<port>`, `STRIPE_API_BASE`.
    pub url: String,
    state: Arc<Mutex<StripeState>>,
    /// localstripe's URL and key, when the events are localstripe's.
    upstream: Option<(String, String)>,
}

impl StripeApi {
    /// Starts the stand-in accepting `key`, serving at most `page_size` events per page,
    /// with the test's own events, or localstripe's (`upstream`: its URL and an `sk_` key).
    pub async fn start(key: &str, page_size: usize, upstream: Option<(String, String)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(StripeState {
            key: key.to_owned(),
            page_size,
            ..StripeState::default()
        }));
        let api = Self {
            url,
            state,
            upstream,
        };
        let served = api.clone();
        tokio::spawn(claimonce_local::http::serve(listener, move |request| {
            let api = served.clone();
            async move { api.answer(request).await }
        }));
        api
    }

    /// Adds one of the test's events, its webhook delivered or not.
    pub fn add(&self, event: &[u8], delivered: bool) {
        let event: Value = serde_json::from_slice(event).expect("an event");
        self.state
            .lock()
            .expect("state")
            .events
            .push((event, delivered));
    }

    /// Marks a localstripe event's delivery as successful.
    pub fn delivered(&self, id: &str) {
        self.state
            .lock()
            .expect("state")
            .delivered
            .push(id.to_owned());
    }

    /// The `n`th request from now on (1-based) is answered 429.
    pub fn rate_limit_request(&self, n: usize) {
        let mut state = self.state.lock().expect("state");
        state.rate_limit_at = Some(state.requests + n);
    }

    /// The `n`th request from now on (1-based) is answered with an empty page that says
    /// `has_more`: what a listing must not loop on.
    pub fn hollow_page_request(&self, n: usize) {
        let mut state = self.state.lock().expect("state");
        state.hollow_at = Some(state.requests + n);
    }

    /// Requests so far.
    pub fn requests(&self) -> usize {
        self.state.lock().expect("state").requests
    }

    /// Serves `object` at `path` (`GET /v1/invoices/in_1`), as Stripe returns a retrieved one,
    /// to the key's own account.
    pub fn put_object(&self, path: &str, object: Value) {
        self.put_object_in(None, path, object);
    }

    /// Serves `object` at `path` in `context` (a connected account, `acct_…`): as Stripe does,
    /// only to a request that names that account in its `Stripe-Context` header, 404 to any
    /// other (the key's own account, or another context).
    pub fn put_object_in(&self, context: Option<&str>, path: &str, object: Value) {
        let mut state = self.state.lock().expect("state");
        state
            .objects
            .insert((context.map(str::to_owned), path.to_owned()), object);
    }

    /// The next object or event `GET` is answered `status` (Stripe's error body).
    pub fn fail_next(&self, status: u16) {
        self.state.lock().expect("state").failing.push(status);
    }

    /// From now on, each object or event `GET` waits for a permit of the returned semaphore
    /// before it is answered.
    pub fn hold_retrievals(&self) -> Arc<Semaphore> {
        let semaphore = Arc::new(Semaphore::new(0));
        self.state.lock().expect("state").held = Some(Arc::clone(&semaphore));
        semaphore
    }

    /// The paths of the object and event `GET`s received so far.
    pub fn fetched(&self) -> Vec<String> {
        self.state.lock().expect("state").fetched.clone()
    }

    /// `GET /v1/events/{id}` and `GET` of an object put here: the object, or Stripe's
    /// `resource_missing` 404 (its error shape in the API description); after a held wait, or
    /// a failure the test asked for.
    async fn retrieve(&self, path: &str, context: Option<&str>) -> Reply {
        let (held, failing) = {
            let mut state = self.state.lock().expect("state");
            state.fetched.push(path.to_owned());
            let failing = (!state.failing.is_empty()).then(|| state.failing.remove(0));
            (state.held.clone(), failing)
        };
        if let Some(held) = held {
            held.acquire().await.expect("a permit").forget();
        }
        if let Some(status) = failing {
            return reply(
                status,
                &[],
                json!({"error": {"type": "api_error", "message": "An unknown error occurred"}}),
            );
        }
        let found = match path.strip_prefix("/v1/events/") {
            Some(id) => self
                .events()
                .await
                .into_iter()
                .map(|(e, _)| e)
                // An event is its account's: a connected account's (its `account`) only in
                // that context, the key's own account's only without one.
                .find(|e| e["id"] == id && e["account"].as_str() == context),
            None => self
                .state
                .lock()
                .expect("state")
                .objects
                .get(&(context.map(str::to_owned), path.to_owned()))
                .cloned(),
        };
        match found {
            Some(object) => reply(200, &[], object),
            None => reply(
                404,
                &[],
                json!({"error": {"type": "invalid_request_error", "code": "resource_missing",
                    "message": format!("No such object: '{path}'")}}),
            ),
        }
    }

    /// Every event, oldest first, with whether its delivery succeeded.
    async fn events(&self) -> Vec<(Value, bool)> {
        let Some((url, key)) = &self.upstream else {
            return self.state.lock().expect("state").events.clone();
        };
        // localstripe lists oldest first and has no delivery_success: read everything.
        let listed = localstripe_events(url, key).await;
        let delivered = self.state.lock().expect("state").delivered.clone();
        listed
            .iter()
            .map(|e| {
                let id = e["id"].as_str().unwrap_or("").to_owned();
                (e.clone(), delivered.contains(&id))
            })
            .collect()
    }

    async fn answer(&self, request: hyper::Request<hyper::body::Incoming>) -> Reply {
        let error = |status: u16, kind: &str, message: &str| {
            reply(
                status,
                &[],
                json!({"error": {"type": kind, "message": message}}),
            )
        };
        let (key, limited, hollow, page_size) = {
            let mut state = self.state.lock().expect("state");
            state.requests += 1;
            let limited = state.rate_limit_at == Some(state.requests);
            if limited {
                state.rate_limit_at = None;
            }
            let hollow = state.hollow_at == Some(state.requests);
            (state.key.clone(), limited, hollow, state.page_size)
        };
        let bearer = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|a| a.strip_prefix("Bearer "))
            .map(str::to_owned);
        if bearer.as_deref() != Some(key.as_str()) {
            return error(401, "invalid_request_error", "Invalid API Key provided");
        }
        if limited {
            return error(
                429,
                "invalid_request_error",
                "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
            );
        }
        if request.method() != hyper::Method::GET {
            return error(404, "invalid_request_error", "Unrecognized request URL");
        }
        // The account a request acts in: the key's own, or the one its Stripe-Context names.
        // An event is its account's (a snapshot's `account`, a thin one's `context`): listed
        // and served only in that account's context, as an object is.
        let context = request
            .headers()
            .get("stripe-context")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if request.uri().path() == "/v2/core/events" {
            // Stripe's `/v2` namespace takes secret keys only.
            if !key.starts_with("sk_") {
                return error(
                    401,
                    "invalid_request_error",
                    "The /v2 API is only accessible using a secret key",
                );
            }
            return self
                .thin_events(request.uri(), context.as_deref(), hollow)
                .await;
        }
        if request.uri().path() != "/v1/events" {
            return self
                .retrieve(request.uri().path(), context.as_deref())
                .await;
        }
        let q = query(request.uri());
        let param = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let number = |name: &str| param(name).and_then(|v| v.parse::<u64>().ok());
        let limit = number("limit").unwrap_or(10);
        if !(1..=100).contains(&limit) {
            return error(
                400,
                "invalid_request_error",
                "Invalid limit: must be between 1 and 100",
            );
        }
        let Ok(success) = delivery_success(&q) else {
            return error(400, "invalid_request_error", "Invalid boolean");
        };
        let (gte, lte) = (number("created[gte]"), number("created[lte]"));
        let mut events: Vec<Value> = self
            .events()
            .await
            .into_iter()
            .filter(|(e, delivered)| {
                let created = e["created"].as_u64().unwrap_or(0);
                // Thin events are v2's list's, not this one's.
                e["object"] != "v2.core.event"
                    && e["account"].as_str() == context.as_deref()
                    && success.is_none_or(|s| s == *delivered)
                    && gte.is_none_or(|g| created >= g)
                    && lte.is_none_or(|l| created <= l)
            })
            .map(|(e, _)| e)
            .collect();
        // Newest first; creation order breaks a tie in the same second.
        events.reverse();
        events.sort_by_key(|e| std::cmp::Reverse(e["created"].as_u64().unwrap_or(0)));
        let start = match param("starting_after") {
            None => 0,
            Some(id) => match events.iter().position(|e| e["id"] == id.as_str()) {
                Some(i) => i + 1,
                None => {
                    return error(
                        400,
                        "invalid_request_error",
                        &format!("No such event: '{id}'"),
                    );
                }
            },
        };
        if hollow {
            return reply(
                200,
                &[],
                json!({"object": "list", "url": "/v1/events", "has_more": true, "data": []}),
            );
        }
        let take = usize::try_from(limit).unwrap_or(100).min(page_size);
        let page: Vec<Value> = events.iter().skip(start).take(take).cloned().collect();
        let has_more = start + page.len() < events.len();
        reply(
            200,
            &[],
            json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": page}),
        )
    }

    /// `GET /v2/core/events` as Stripe's API description has it: the thin events, newest first,
    /// filtered by `delivery_success` and `created_gte`/`created_lte` (RFC 3339), `limit`
    /// events a page (at most the stand-in's page size), the next page an opaque `page` token
    /// in `next_page_url` (null on the last page), only those of the account `context` names
    /// (`None`: the key's own). `hollow`: an empty page with a next one.
    async fn thin_events(&self, uri: &hyper::Uri, context: Option<&str>, hollow: bool) -> Reply {
        let q = query(uri);
        let param = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let bad = |message: &str| {
            reply(
                400,
                &[],
                json!({"error": {"type": "invalid_request_error", "message": message}}),
            )
        };
        let time = |name: &str| match param(name) {
            None => Ok(None),
            Some(v) => claimonce::timestamp::unix_from_rfc3339(&v)
                .map(Some)
                .ok_or(format!("Invalid timestamp: {name}")),
        };
        let (gte, lte) = match (time("created_gte"), time("created_lte")) {
            (Ok(gte), Ok(lte)) => (gte, lte),
            (Err(e), _) | (_, Err(e)) => return bad(&e),
        };
        let Ok(success) = delivery_success(&q) else {
            return bad("Invalid boolean");
        };
        let limit = match param("limit").map(|v| v.parse::<usize>()) {
            None => 10,
            Some(Ok(n)) if n >= 1 => n,
            Some(_) => return bad("Invalid limit"),
        };
        // (created, event) of each thin event the filters keep.
        let mut events: Vec<(i64, Value)> = self
            .state
            .lock()
            .expect("state")
            .events
            .iter()
            .filter(|(e, delivered)| {
                e["object"] == "v2.core.event"
                    && e["context"].as_str() == context
                    && success.is_none_or(|s| s == *delivered)
            })
            .filter_map(|(e, _)| {
                let created = e["created"]
                    .as_str()
                    .and_then(claimonce::timestamp::unix_from_rfc3339)?;
                Some((created, e.clone()))
            })
            .filter(|(c, _)| gte.is_none_or(|g| *c >= g) && lte.is_none_or(|l| *c <= l))
            .collect();
        // Newest first; creation order breaks a tie in the same second.
        events.reverse();
        events.sort_by_key(|(created, _)| std::cmp::Reverse(*created));
        let start = match param("page") {
            None => 0,
            Some(token) => match token.strip_prefix("pg_").and_then(|n| n.parse().ok()) {
                Some(n) => n,
                None => return bad("Invalid page token"),
            },
        };
        if hollow {
            let next = format!("/v2/core/events?page=pg_{start}");
            return reply(200, &[], json!({"data": [], "next_page_url": next}));
        }
        let page_size = self.state.lock().expect("state").page_size;
        let page: Vec<Value> = events
            .iter()
            .skip(start)
            .take(limit.min(page_size))
            .map(|(_, e)| e.clone())
            .collect();
        let end = start + page.len();
        // The token stands for the query and the place in it; the filters ride along here.
        let next = (end < events.len()).then(|| {
            let kept: Vec<String> = q
                .iter()
                .filter(|(k, _)| k != "page")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("/v2/core/events?{}&page=pg_{end}", kept.join("&"))
        });
        reply(
            200,
            &[],
            json!({"data": page, "next_page_url": next, "previous_page_url": null}),
        )
    }
}

/// A list's `delivery_success` filter: none, or whether the events' deliveries succeeded; `Err`
/// for a value that is no boolean.
fn delivery_success(q: &[(String, String)]) -> Result<Option<bool>, ()> {
    match q
        .iter()
        .find(|(k, _)| k == "delivery_success")
        .map(|(_, v)| v.as_str())
    {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(_) => Err(()),
    }
}

static LOCALSTRIPE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// localstripe's URL, started on first use (stopped with the test process, as moto is).
pub async fn localstripe() -> &'static str {
    LOCALSTRIPE
        .get_or_init(|| async {
            claimonce_local::moto::localstripe()
                .await
                .expect("localstripe")
        })
        .await
}

fn localstripe_api(
    url: &str,
    key: &str,
) -> (
    claimonce::sender_api::Api,
    Vec<(http::HeaderName, http::HeaderValue)>,
) {
    let api = claimonce::sender_api::Api::new(url).expect("localstripe's URL");
    let auth =
        claimonce::sender_api::secret_header(http::header::AUTHORIZATION, &format!("Bearer {key}"))
            .expect("header");
    (api, vec![auth])
}

/// Creates a customer in localstripe (which records its `customer.created` event); its id.
pub async fn localstripe_customer(url: &str, key: &str, email: &str) -> String {
    let (api, mut headers) = localstripe_api(url, key);
    headers.push((
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-www-form-urlencoded"),
    ));
    let body = format!("email={}", email.replace('@', "%40"));
    let answer = api
        .send(
            http::Method::POST,
            "/v1/customers",
            &headers,
            Some(body.into_bytes()),
        )
        .await
        .expect("localstripe answers");
    assert!(answer.status.is_success(), "localstripe: {}", answer.status);
    let customer: Value = serde_json::from_slice(&answer.body).expect("a customer");
    customer["id"].as_str().expect("an id").to_owned()
}

/// Every event localstripe holds, as it renders them.
pub async fn localstripe_events(url: &str, key: &str) -> Vec<Value> {
    let (api, headers) = localstripe_api(url, key);
    let answer = api
        .send(http::Method::GET, "/v1/events?limit=1000", &headers, None)
        .await
        .expect("localstripe answers");
    assert!(answer.status.is_success(), "localstripe: {}", answer.status);
    let listed: Value = serde_json::from_slice(&answer.body).expect("a list");
    listed["data"].as_array().expect("data").clone()
}

/// One event of a Resend webhook as its API lists it, with the delivery (an API Gateway event
/// of `events/resend/`) a replay sends again.
#[derive(Debug, Clone)]
pub struct ResendEvent {
    /// The event id: the message id (`svix-id`) its deliveries carry.
    pub id: String,
    /// The event type.
    pub kind: String,
    /// When it was created (Unix seconds).
    pub created_at: u64,
    /// `success`, `pending`, `attempting` or `failed`.
    pub status: String,
    /// The delivery.
    pub request: Value,
}

#[derive(Debug, Default)]
struct ResendState {
    key: String,
    webhook_id: String,
    page_size: usize,
    events: Vec<ResendEvent>,
    requests: usize,
    replays: Vec<String>,
    rate_limit_at: Option<usize>,
}

/// Resend's webhook events API.
#[derive(Debug, Clone)]
pub struct ResendApi {
    /// `http://127.0.0.1:<port>`, `RESEND_API_BASE`.
    pub url: String,
    state: Arc<Mutex<ResendState>>,
}

impl ResendApi {
    /// Starts the stand-in accepting `key` for the webhook `webhook_id`, serving at most
    /// `page_size` events per page.
    pub async fn start(key: &str, webhook_id: &str, page_size: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(ResendState {
            key: key.to_owned(),
            webhook_id: webhook_id.to_owned(),
            page_size,
            ..ResendState::default()
        }));
        let api = Self { url, state };
        let served = api.clone();
        tokio::spawn(claimonce_local::http::serve(listener, move |request| {
            let api = served.clone();
            async move { api.answer(&request) }
        }));
        api
    }

    /// Adds an event.
    pub fn add(&self, event: ResendEvent) {
        self.state.lock().expect("state").events.push(event);
    }

    /// The event `id`.
    pub fn event(&self, id: &str) -> ResendEvent {
        let state = self.state.lock().expect("state");
        state
            .events
            .iter()
            .find(|e| e.id == id)
            .cloned()
            .expect("a known event")
    }

    /// Sets the event's status, as a delivery's outcome does.
    pub fn set_status(&self, id: &str, status: &str) {
        let mut state = self.state.lock().expect("state");
        if let Some(event) = state.events.iter_mut().find(|e| e.id == id) {
            status.clone_into(&mut event.status);
        }
    }

    /// The event ids a replay was asked for, in order.
    pub fn replays(&self) -> Vec<String> {
        self.state.lock().expect("state").replays.clone()
    }

    /// Requests so far.
    pub fn requests(&self) -> usize {
        self.state.lock().expect("state").requests
    }

    /// The `n`th request from now on (1-based) is answered 429.
    pub fn rate_limit_request(&self, n: usize) {
        let mut state = self.state.lock().expect("state");
        state.rate_limit_at = Some(state.requests + n);
    }

    fn answer(&self, request: &hyper::Request<hyper::body::Incoming>) -> Reply {
        let error = |status: u16, name: &str, message: &str| {
            reply(
                status,
                &[],
                json!({"statusCode": status, "name": name, "message": message}),
            )
        };
        let mut state = self.state.lock().expect("state");
        state.requests += 1;
        if state.rate_limit_at == Some(state.requests) {
            state.rate_limit_at = None;
            return reply(
                429,
                &[("retry-after", "1".into())],
                json!({"statusCode": 429, "name": "rate_limit_exceeded",
                       "message": "Too many requests."}),
            );
        }
        let bearer = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|a| a.strip_prefix("Bearer "));
        if bearer != Some(state.key.as_str()) {
            return error(401, "validation_error", "API key is invalid");
        }
        let path = request.uri().path().to_owned();
        let Some(rest) = path
            .strip_prefix("/webhooks/")
            .and_then(|p| p.strip_prefix(state.webhook_id.as_str()))
        else {
            return error(404, "not_found", "Webhook not found");
        };
        let mut events = state.events.clone();
        // Most recent first; creation order breaks a tie in the same second.
        events.reverse();
        events.sort_by_key(|e| std::cmp::Reverse(e.created_at));
        if request.method() == hyper::Method::GET && rest == "/events" {
            let q = query(request.uri());
            let param = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            if param("before").is_some() {
                return error(
                    422,
                    "validation_error",
                    "The `before` parameter is not supported",
                );
            }
            let limit = match param("limit").map(|l| l.parse::<usize>()) {
                None => 20,
                Some(Ok(n)) if (1..=100).contains(&n) => n,
                Some(_) => {
                    return error(422, "validation_error", "`limit` must be between 1 and 100");
                }
            };
            let start = match param("after") {
                None => 0,
                Some(id) => match events.iter().position(|e| e.id == id) {
                    Some(i) => i + 1,
                    None => return error(404, "not_found", "Event not found"),
                },
            };
            let take = limit.min(state.page_size);
            let page: Vec<Value> = events
                .iter()
                .skip(start)
                .take(take)
                .map(|e| {
                    let at = claimonce::timestamp::rfc3339_from_unix(
                        i64::try_from(e.created_at).expect("a time"),
                    )
                    .expect("a time");
                    // Resend's own spelling: `2026-12-01 10:00:00.000000+00`.
                    let at = format!(
                        "{} {}.000000+00",
                        at.get(..10).unwrap_or_default(),
                        at.get(11..19).unwrap_or_default()
                    );
                    json!({"id": e.id, "type": e.kind, "created_at": at, "status": e.status})
                })
                .collect();
            let has_more = start + page.len() < events.len();
            return reply(
                200,
                &[],
                json!({"object": "list", "has_more": has_more, "data": page}),
            );
        }
        if request.method() == hyper::Method::POST
            && let Some(id) = rest
                .strip_prefix("/events/")
                .and_then(|r| r.strip_suffix("/replay"))
        {
            if !events.iter().any(|e| e.id == id) {
                return error(404, "not_found", "Event not found");
            }
            state.replays.push(id.to_owned());
            // A replay Resend delivered moves the event out of `failed`, as its next listing
            // shows.
            if let Some(event) = state.events.iter_mut().find(|e| e.id == id) {
                event.status = "success".to_owned();
            }
            return reply(200, &[], json!({"object": "event", "id": id}));
        }
        error(404, "not_found", "Not found")
    }
}
