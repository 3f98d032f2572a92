//! A stand-in for the AWS Secrets Manager endpoint on loopback, so that the real SDK call
//! (signing, the JSON 1.1 protocol, parsing) runs in the tests. Only `GetSecretValue` exists.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The running endpoint.
#[derive(Debug)]
pub struct SecretsManager {
    /// `http://127.0.0.1:<port>`, for `AWS_ENDPOINT_URL_SECRETS_MANAGER`.
    pub url: String,
    calls: Arc<AtomicU64>,
}

impl SecretsManager {
    /// Serves `secret_string` for `arn` (and a ResourceNotFoundException for anything else).
    pub async fn start(arn: &str, secret_string: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let calls = Arc::new(AtomicU64::new(0));
        let (arn, secret) = (arn.to_owned(), secret_string.to_owned());
        let counted = Arc::clone(&calls);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (arn, secret, counted) = (arn.clone(), secret.clone(), Arc::clone(&counted));
                tokio::spawn(async move {
                    let service = service_fn(move |request: hyper::Request<Incoming>| {
                        let (arn, secret, counted) =
                            (arn.clone(), secret.clone(), Arc::clone(&counted));
                        async move {
                            let target = request
                                .headers()
                                .get("x-amz-target")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_owned();
                            let signed = request.headers().contains_key("authorization");
                            let body = request
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            counted.fetch_add(1, Ordering::SeqCst);
                            let (status, reply) = if target == "secretsmanager.GetSecretValue"
                                && signed
                                && asked["SecretId"] == Value::String(arn.clone())
                            {
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
                                    json!({"__type": "ResourceNotFoundException", "message": "Secrets Manager can't find the specified secret."}),
                                )
                            };
                            let mut response =
                                hyper::Response::new(Full::new(Bytes::from(reply.to_string())));
                            *response.status_mut() =
                                hyper::StatusCode::from_u16(status).expect("status");
                            response.headers_mut().insert(
                                "content-type",
                                hyper::header::HeaderValue::from_static(
                                    "application/x-amz-json-1.1",
                                ),
                            );
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, calls }
    }

    /// Requests received so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}
