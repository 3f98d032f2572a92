//! A loopback HTTP server that records every request and answers each with what the test
//! says: the stand-in for CloudFormation's pre-signed response URL and for the SQS endpoint,
//! so the real clients (our PUT, the AWS SDK's signed JSON calls) run unchanged in the tests.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `PUT`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl Recorded {
    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// An answer: status, content type, body.
pub type Answer = (u16, &'static str, String);

type Respond = Arc<dyn Fn(&Recorded) -> Answer + Send + Sync>;

/// The running server.
#[derive(Debug)]
pub struct Recorder {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    /// Starts a server that answers every request with `respond(request)`.
    pub async fn start(respond: impl Fn(&Recorded) -> Answer + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let respond: Respond = Arc::new(respond);
        let kept = Arc::clone(&requests);
        tokio::spawn(claimonce_local::http::serve(listener, move |request| {
            let (kept, respond) = (Arc::clone(&kept), Arc::clone(&respond));
            async move {
                let method = request.method().to_string();
                let uri = request.uri().to_string();
                let headers = request
                    .headers()
                    .iter()
                    .map(|(n, v)| {
                        (
                            n.as_str().to_owned(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect();
                let body = claimonce_local::http::body(request).await;
                let recorded = Recorded {
                    method,
                    uri,
                    headers,
                    body,
                };
                let (status, content_type, body) = respond(&recorded);
                kept.lock().expect("requests").push(recorded);
                let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
                *response.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static(content_type),
                );
                response
            }
        }));
        Self { url, requests }
    }

    /// A server that answers `200` with an empty body, as S3 answers a pre-signed PUT.
    pub async fn ok() -> Self {
        Self::start(|_| (200, "text/plain", String::new())).await
    }

    /// An SQS endpoint (JSON 1.0 protocol): `SendMessage` succeeds, except for messages whose
    /// `idempotency-key` is in `refuse`, which get an `InvalidParameterValue` error.
    pub async fn sqs(refuse: &[&str]) -> Self {
        let refuse: Vec<String> = refuse.iter().map(|s| (*s).to_owned()).collect();
        Self::start(move |request| {
            let asked = request.json();
            let target = request.header("x-amz-target").unwrap_or("");
            let key = asked["MessageAttributes"]["idempotency-key"]["StringValue"]
                .as_str()
                .unwrap_or("");
            if target != "AmazonSQS.SendMessage" || refuse.iter().any(|r| r == key) {
                return (
                    400,
                    "application/x-amz-json-1.0",
                    json!({
                        "__type": "com.amazonaws.sqs#InvalidParameterValue",
                        "message": "refused by the test"
                    })
                    .to_string(),
                );
            }
            (
                200,
                "application/x-amz-json-1.0",
                json!({
                    "MessageId": format!("msg-{key}"),
                    "MD5OfMessageBody": "00000000000000000000000000000000"
                })
                .to_string(),
            )
        })
        .await
    }

    /// An AWS Secrets Manager endpoint (JSON 1.1 protocol) that knows one secret: a signed
    /// `GetSecretValue` for `arn` gets `secret_string`, anything else a
    /// `ResourceNotFoundException`. The real SDK call (signing, protocol, parsing) runs
    /// against it.
    pub async fn secrets_manager(arn: &str, secret_string: &str) -> Self {
        Self::rotating_secret(arn, Arc::new(Mutex::new(secret_string.to_owned()))).await
    }

    /// A Secrets Manager stand-in whose secret is whatever `current` holds when asked: a test
    /// rotates it by replacing the string.
    pub async fn rotating_secret(arn: &str, current: Arc<Mutex<String>>) -> Self {
        let arn = arn.to_owned();
        Self::start(move |request| {
            let secret = current.lock().expect("secret").clone();
            let known = request.header("x-amz-target") == Some("secretsmanager.GetSecretValue")
                && request.header("authorization").is_some()
                && request.json()["SecretId"] == Value::String(arn.clone());
            let (status, reply) = if known {
                (
                    200,
                    json!({
                        "ARN": arn, "Name": "claimonce/db", "SecretString": secret,
                        "VersionId": "00000000-0000-0000-0000-000000000001",
                        "VersionStages": ["AWSCURRENT"], "CreatedDate": 1795953600
                    }),
                )
            } else {
                (
                    400,
                    json!({"__type": "ResourceNotFoundException",
                           "message": "Secrets Manager can't find the specified secret."}),
                )
            };
            (status, "application/x-amz-json-1.1", reply.to_string())
        })
        .await
    }

    /// The AWS configuration a function would have, with every call sent here: region
    /// `us-east-1`, static test credentials, this server as the endpoint of every service.
    pub async fn aws_config(&self) -> aws_config::SdkConfig {
        aws_config_at(&self.url).await
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests").clone()
    }
}

/// An SDK configuration for an endpoint on loopback (the stub, or moto).
pub use claimonce_local::moto::aws_config_at;
