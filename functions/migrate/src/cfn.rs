//! The CloudFormation custom resources: the request CloudFormation invokes the function with,
//! the response it waits for, PUT to the request's pre-signed `ResponseURL`, and how the
//! [`Migrator`] answers each invocation. Two resources: the template's `DatabaseMigrations`,
//! which applies the migrations, and `MigrateSettings`, which is answered with the digest of
//! its properties ([`settings_digest`]) and does nothing else.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::{Migrator, Outcome, PHYSICAL_RESOURCE_ID};

/// A custom-resource request (the fields this function reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Request {
    /// `Create`, `Update` or `Delete`.
    pub request_type: String,
    /// The pre-signed S3 URL the response goes to.
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    /// Echoed in the response.
    pub stack_id: String,
    /// Echoed in the response.
    pub request_id: String,
    /// Echoed in the response.
    pub logical_resource_id: String,
    /// Set on `Update` and `Delete`: the id this resource answered before.
    #[serde(default)]
    pub physical_resource_id: Option<String>,
    /// The template's type of the resource: [`SETTINGS_RESOURCE_TYPE`], or the migrations
    /// resource (`Custom::DatabaseMigrations`, and a request that names none).
    #[serde(default)]
    pub resource_type: Option<String>,
    /// The resource's properties as the template sets them now, as CloudFormation sends them.
    #[serde(default)]
    pub resource_properties: Value,
}

impl Request {
    /// Reads a custom-resource request; `None` when `event` is not one (a plain invoke).
    pub fn from_event(event: &Value) -> Option<Self> {
        if event.get("ResponseURL").is_none() || event.get("RequestType").is_none() {
            return None;
        }
        serde_json::from_value(event.clone()).ok()
    }

    /// The migrations resource's `FunctionVersion` property: the ARN of the function version
    /// whose migrations this request is for. It changes with each version the alias is moved
    /// to (a new binary, or new settings: [`settings_digest`]), which is what makes
    /// CloudFormation send an `Update` on each such deploy.
    pub fn function_version(&self) -> Option<&str> {
        self.resource_properties
            .get("FunctionVersion")
            .and_then(Value::as_str)
    }

    /// Whether this is the settings resource's request ([`SETTINGS_RESOURCE_TYPE`]).
    pub fn is_for_settings(&self) -> bool {
        self.resource_type.as_deref() == Some(SETTINGS_RESOURCE_TYPE)
    }
}

/// The template's type of the settings resource (`MigrateSettings`): its properties are the
/// migrate function's settings as CloudFormation resolves them (its variables, the Globals'
/// among them, its log level and its network), and its answer, [`settings_digest`], is the
/// description of the function's version. A changed setting changes the description, and
/// CloudFormation replaces a version whose description changes, so Lambda publishes the new
/// configuration as a version the alias `live` and `DatabaseMigrations` then name
/// (docs/decisions/0055-the-migrate-function-s-version-names-its-settings.md).
pub const SETTINGS_RESOURCE_TYPE: &str = "Custom::MigrateSettings";

/// The physical id of the settings resource: one per stack, stable across updates.
pub const SETTINGS_PHYSICAL_RESOURCE_ID: &str = "claimonce-migrate-settings";

/// `settings sha256:<64 lower-case hex digits>`, of `properties` written as JSON with every
/// object's keys in order and no spaces: the same for the same values whatever the order
/// CloudFormation sends them in, another for any other value, and 80 characters, within the
/// 256 of a version's description. It reads no setting: nothing in it is used but to name the
/// version. scripts/live_versions.py computes it the same way.
pub fn settings_digest(properties: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let text = serde_json::to_string(&sorted(properties)).unwrap_or_default();
    let hash = Sha256::digest(text.as_bytes());
    format!("settings sha256:{}", claimonce::verify::lower_hex(&hash))
}

/// `SUCCESS` or `FAILED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// The resource operation succeeded.
    Success,
    /// It failed; `Reason` says why, and CloudFormation rolls the stack back.
    Failed,
}

/// The response body CloudFormation expects.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Response {
    /// The outcome.
    pub status: Status,
    /// Shown in the stack's events; required when failed. Data-free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The resource's id; the same on every update, or CloudFormation would replace it.
    pub physical_resource_id: String,
    /// From the request.
    pub stack_id: String,
    /// From the request.
    pub request_id: String,
    /// From the request.
    pub logical_resource_id: String,
    /// Values readable with `Fn::GetAtt`.
    pub data: Map<String, Value>,
}

/// Why the response could not be delivered.
#[derive(Debug)]
pub struct PutFailed(pub String);

impl std::fmt::Display for PutFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not deliver the custom-resource response: {}",
            self.0
        )
    }
}

impl std::error::Error for PutFailed {}

/// The bucket CloudFormation's pre-signed response URLs name: AWS owns one per region,
/// `cloudformation-custom-resource-response-<region without dashes>` (the CloudFormation user
/// guide, "AWS owned buckets" a VPC endpoint policy must allow).
const RESPONSE_BUCKET_PREFIX: &str = "cloudformation-custom-resource-response-";

/// The regions whose response bucket is answered, as the bucket names them (no dashes): every
/// region of the commercial partition, AWS GovCloud (US) and China, whose S3 hosts are
/// `amazonaws.com` and `amazonaws.com.cn` (docs/decisions/0051, with its sources). A bucket
/// of any other name, `-<anything>` included, is not CloudFormation's: a region AWS opens later
/// is added here, a deploy there failing until it is.
const RESPONSE_BUCKET_REGIONS: &[&str] = &[
    "afsouth1",
    "apeast1",
    "apeast2",
    "apnortheast1",
    "apnortheast2",
    "apnortheast3",
    "apsouth1",
    "apsouth2",
    "apsoutheast1",
    "apsoutheast2",
    "apsoutheast3",
    "apsoutheast4",
    "apsoutheast5",
    "apsoutheast6",
    "apsoutheast7",
    "cacentral1",
    "cawest1",
    "eucentral1",
    "eucentral2",
    "eunorth1",
    "eusouth1",
    "eusouth2",
    "euwest1",
    "euwest2",
    "euwest3",
    "ilcentral1",
    "mecentral1",
    "mesouth1",
    "mxcentral1",
    "saeast1",
    "useast1",
    "useast2",
    "uswest1",
    "uswest2",
    // AWS GovCloud (US).
    "usgoveast1",
    "usgovwest1",
    // China.
    "cnnorth1",
    "cnnorthwest1",
];

/// Whether a custom-resource answer may go to `url`: a URL into CloudFormation's own response
/// bucket, nothing else. Accepted exactly: `https`, no port, an S3 host of AWS
/// (`s3.amazonaws.com`, `s3.<region>.amazonaws.com`, `s3-<region>.amazonaws.com`, or the
/// `.amazonaws.com.cn` partition's), and the bucket, named in the host (`<bucket>.<s3 host>`) or
/// as the path's first segment (`<s3 host>/<bucket>/…`), `cloudformation-custom-resource-response-`
/// followed by a region of `RESPONSE_BUCKET_REGIONS`. A bucket of anyone else's, which a forged request
/// would name to read the answer, is refused, as is every other host. With `loopback` (tests),
/// `http` or `https` to 127.0.0.1, `[::1]` or `localhost` too.
pub fn response_url_allowed(url: &str, loopback: bool) -> Result<(), &'static str> {
    let uri: http::Uri = url.parse().map_err(|_| "the ResponseURL is not a URL")?;
    let host = uri.host().ok_or("the ResponseURL has no host")?;
    let scheme = uri.scheme_str().unwrap_or("");
    if loopback && matches!(host, "127.0.0.1" | "[::1]" | "localhost") {
        return if matches!(scheme, "http" | "https") {
            Ok(())
        } else {
            Err("the ResponseURL is not http or https")
        };
    }
    if scheme != "https" {
        return Err("the ResponseURL is not https");
    }
    let host = host.to_ascii_lowercase();
    let aws = host
        .strip_suffix(".amazonaws.com")
        .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
        .ok_or("the ResponseURL's host is not an AWS host")?;
    let mut labels = aws.split('.');
    let first = labels.next().unwrap_or("");
    let is_s3 = |label: &str| label == "s3" || label.starts_with("s3-");
    let (bucket, endpoint) = if is_s3(first) {
        // Path style: the bucket is the path's first segment.
        let bucket = uri
            .path()
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        (
            bucket,
            std::iter::once(first).chain(labels).collect::<Vec<_>>(),
        )
    } else {
        (first, labels.collect::<Vec<_>>())
    };
    let endpoint_is_s3 = match endpoint.as_slice() {
        [s3] => is_s3(s3),
        [s3, region] => {
            *s3 == "s3"
                && region
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
        }
        _ => false,
    };
    if !endpoint_is_s3 || uri.port().is_some() {
        return Err("the ResponseURL's host is not S3");
    }
    let region = bucket
        .strip_prefix(RESPONSE_BUCKET_PREFIX)
        .ok_or("the ResponseURL's bucket is not CloudFormation's response bucket")?;
    if !RESPONSE_BUCKET_REGIONS.contains(&region) {
        return Err(
            "the ResponseURL's bucket is not CloudFormation's response bucket of a region this \
             function knows",
        );
    }
    Ok(())
}

/// How long one PUT may take.
pub const PUT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many PUTs are tried (0.5 s, then 1 s apart).
pub const PUT_ATTEMPTS: u32 = 3;

/// PUTs `response` to `url`, retrying a few times: CloudFormation waits for this PUT (up to
/// the resource's ServiceTimeout), so a lost one stalls the deployment.
///
/// No `Content-Type` header is sent: the URL is pre-signed for a PUT without one.
pub async fn put(url: &str, response: &Response) -> Result<(), PutFailed> {
    let body = serde_json::to_vec(response).map_err(|_| PutFailed("encoding".into()))?;
    // https for CloudFormation's S3 URL; plain http only reaches here for a loopback test
    // server (response_url_allowed).
    let client = claimonce::sender_api::https_client().map_err(PutFailed)?;
    let mut last = String::new();
    for attempt in 0..PUT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
        }
        let request = http::Request::put(url)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Full::new(Bytes::from(body.clone())))
            .map_err(|_| PutFailed("the ResponseURL is not a valid URL".into()))?;
        match tokio::time::timeout(PUT_TIMEOUT, client.request(request)).await {
            Ok(Ok(answer)) if answer.status().is_success() => {
                // Drain the body so the exchange completes cleanly.
                let _ = answer.into_body().collect().await;
                return Ok(());
            }
            Ok(Ok(answer)) => last = format!("status {}", answer.status().as_u16()),
            Ok(Err(e)) => last = format!("request failed: {e}"),
            Err(_) => last = "timed out".into(),
        }
    }
    Err(PutFailed(last))
}

/// How the migrate function answers an invocation: a custom-resource request by doing what it
/// asks and PUT-ing the response, a plain invoke with what was applied.
impl Migrator {
    /// True when `request` names another version of this function than the one running.
    /// That is CloudFormation rolling the resource back to the previous deploy's properties
    /// (the old version) while the alias still runs the new code: migrations are
    /// forward-only, so there is nothing to do, and applying the new code's migrations again
    /// (perhaps the one that just failed) would leave the stack unable to roll back.
    fn is_for_another_version(&self, request: &Request) -> bool {
        match (&self.version, request.function_version()) {
            (Some(running), Some(requested)) => {
                requested.rsplit(':').next() != Some(running.as_str())
            }
            _ => false,
        }
    }

    /// `ResponseURL` (the return value is then only for the log); a plain invoke returns
    /// `{"applied": [...], "latest": n}`, or an error when the migrations failed. The only
    /// error for a custom resource is a response that could not be delivered, so that Lambda
    /// retries the invocation (applying is idempotent).
    pub async fn handle(&self, event: &Value) -> Result<Value, String> {
        self.handle_until(event, None).await
    }

    /// As [`Migrator::handle`], with the database work ending by `deadline` (see
    /// [`Migrator::apply_until`]).
    pub async fn handle_until(
        &self,
        event: &Value,
        deadline: Option<Instant>,
    ) -> Result<Value, String> {
        let Some(request) = Request::from_event(event) else {
            let result = self.apply_until(deadline).await;
            self.write("Invoke", &result);
            return result.map(|o| json!({"applied": o.applied, "latest": o.latest}));
        };
        // A request whose answer would go anywhere but CloudFormation's own S3 URL did not come
        // from CloudFormation: nothing is done for it and nothing is sent.
        let loopback = self.options.as_ref().is_ok_and(|o| o.loopback_response_url);
        if let Err(why) = response_url_allowed(&request.response_url, loopback) {
            self.log.write(
                claimonce::log::Level::Error,
                "custom-resource request refused",
                claimonce::log::fields! { request_type: request.request_type.as_str(), error: why },
            );
            return Err(format!("custom-resource request refused: {why}"));
        }
        let response = self.respond_until(&request, deadline).await;
        put(&request.response_url, &response)
            .await
            .map_err(|e| e.to_string())?;
        serde_json::to_value(&response).map_err(|_| "encoding the response".to_owned())
    }

    /// The response to a custom-resource request, after doing what it asks.
    pub async fn respond(&self, request: &Request) -> Response {
        self.respond_until(request, None).await
    }

    /// As [`Migrator::respond`], with the database work ending by `deadline`.
    pub async fn respond_until(&self, request: &Request, deadline: Option<Instant>) -> Response {
        if request.is_for_settings() {
            return self.respond_to_settings(request);
        }
        let physical = request
            .physical_resource_id
            .clone()
            .unwrap_or_else(|| PHYSICAL_RESOURCE_ID.to_owned());
        let result = match request.request_type.as_str() {
            // The schema and its data outlive the stack: removing the resource (or rolling
            // back a failed create) must not touch the database.
            "Delete" => Ok(None),
            // Answered with the same data keys as an apply: the template reads
            // DatabaseMigrations.Latest, and a missing key would fail the rollback.
            "Create" | "Update" if self.is_for_another_version(request) => {
                self.log.write(
                    claimonce::log::Level::Info,
                    "migrations skipped: the request is for another function version (a rollback)",
                    claimonce::log::fields! { request_type: request.request_type.as_str() },
                );
                Ok(Some(Outcome {
                    applied: Vec::new(),
                    latest: self.latest(),
                }))
            }
            "Create" | "Update" => self.apply_until(deadline).await.map(Some),
            other => Err(format!("unknown RequestType {other:?}")),
        };
        let mut data = Map::new();
        let (status, reason) = match &result {
            Ok(Some(outcome)) => {
                let applied: Vec<String> =
                    outcome.applied.iter().map(ToString::to_string).collect();
                // Custom-resource data values are strings (Fn::GetAtt returns strings).
                data.insert("Applied".into(), applied.join(",").into());
                data.insert("Latest".into(), outcome.latest.to_string().into());
                (Status::Success, None)
            }
            Ok(None) => (Status::Success, None),
            Err(e) => {
                let stream = claimonce::config::optional("AWS_LAMBDA_LOG_STREAM_NAME")
                    .map_or(String::new(), |s| format!(" (log stream {s})"));
                (Status::Failed, Some(format!("{e}{stream}")))
            }
        };
        let logged = result.clone().map(|o| {
            o.unwrap_or_else(|| Outcome {
                applied: Vec::new(),
                latest: self.latest(),
            })
        });
        self.write(&request.request_type, &logged);
        Response {
            status,
            reason,
            physical_resource_id: physical,
            stack_id: request.stack_id.clone(),
            request_id: request.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            data,
        }
    }
}

impl Migrator {
    /// The settings resource's answer: `Create` and `Update` succeed with `Data.Digest`, the
    /// [`settings_digest`] of the request's properties; `Delete` succeeds. Nothing else is
    /// done or read, so a configuration this function cannot use is still named (and its
    /// version then answers `DatabaseMigrations` with the error).
    fn respond_to_settings(&self, request: &Request) -> Response {
        let mut data = Map::new();
        let (status, reason) = match request.request_type.as_str() {
            "Create" | "Update" => {
                let digest = settings_digest(&request.resource_properties);
                data.insert("Digest".into(), digest.into());
                (Status::Success, None)
            }
            "Delete" => (Status::Success, None),
            other => (
                Status::Failed,
                Some(format!("unknown RequestType {other:?}")),
            ),
        };
        let mut line = data.clone();
        line.insert("request_type".into(), request.request_type.clone().into());
        let level = match status {
            Status::Success => claimonce::log::Level::Info,
            Status::Failed => claimonce::log::Level::Error,
        };
        self.log.write(level, "settings", line);
        Response {
            status,
            reason,
            physical_resource_id: request
                .physical_resource_id
                .clone()
                .unwrap_or_else(|| SETTINGS_PHYSICAL_RESOURCE_ID.to_owned()),
            stack_id: request.stack_id.clone(),
            request_id: request.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{response_url_allowed, settings_digest};
    use serde_json::json;

    /// The digest is of the values, not of the order CloudFormation sends the keys in; any
    /// value changed, added or taken away changes it; and it is what scripts/live_versions.py
    /// computes (`settings_digest` there, for this same input), so the check models the
    /// description the deploy gets.
    #[test]
    fn the_settings_digest_names_the_values_whatever_their_order() {
        let properties = json!({
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction",
            "Environment": {"Variables": {"CLAIMONCE_PROVIDERS": "stripe,", "DB_NAME": "claimonce"}},
            "VpcConfig": {"SubnetIds": ["subnet-0a", "subnet-0b"], "SecurityGroupIds": ["sg-0a"]}
        });
        let digest = settings_digest(&properties);
        assert_eq!(
            digest,
            "settings sha256:5cb1dba136889ff957699daacd3358a783a357fc3f18bd015d24ca84011cfb56"
        );
        let reordered = json!({
            "VpcConfig": {"SecurityGroupIds": ["sg-0a"], "SubnetIds": ["subnet-0a", "subnet-0b"]},
            "Environment": {"Variables": {"DB_NAME": "claimonce", "CLAIMONCE_PROVIDERS": "stripe,"}},
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:claimonce-MigrateFunction"
        });
        assert_eq!(settings_digest(&reordered), digest);
        let mut other = properties.clone();
        other["Environment"]["Variables"]["CLAIMONCE_PROVIDERS"] = json!("github,stripe,");
        assert_ne!(settings_digest(&other), digest);
        let mut fewer = properties.clone();
        fewer["Environment"]["Variables"]
            .as_object_mut()
            .map(|v| v.remove("DB_NAME"));
        assert_ne!(settings_digest(&fewer), digest);
        let mut order = properties;
        order["VpcConfig"]["SubnetIds"] = json!(["subnet-0b", "subnet-0a"]);
        assert_ne!(settings_digest(&order), digest, "a list's order is a value");
        assert_eq!(digest.len(), 80);
    }

    #[test]
    fn only_cloudformation_s_s3_urls_are_answered() {
        for url in [
            "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws/abc?X-Amz-Signature=1",
            "https://cloudformation-custom-resource-response-euwest1.s3.eu-west-1.amazonaws.com/x",
            "https://cloudformation-custom-resource-response-uswest2.s3-us-west-2.amazonaws.com/x",
            "https://cloudformation-custom-resource-response-cnnorth1.s3.cn-north-1.amazonaws.com.cn/x",
            "https://s3.amazonaws.com/cloudformation-custom-resource-response-useast1/arn%3Aaws/x",
            "https://s3-eu-west-1.amazonaws.com/cloudformation-custom-resource-response-euwest1/x",
        ] {
            assert_eq!(response_url_allowed(url, false), Ok(()), "{url}");
        }
        for (url, why) in [
            (
                "http://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x",
                "not https",
            ),
            ("https://attacker.example/x", "not an AWS host"),
            (
                "https://s3.amazonaws.com.attacker.example/x",
                "not an AWS host",
            ),
            ("https://lambda.us-east-1.amazonaws.com/x", "not S3"),
            (
                "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com:8443/x",
                "not S3",
            ),
            // Anyone's bucket on S3: the answer would be theirs to read.
            (
                "https://attacker-bucket.s3.amazonaws.com/x",
                "response bucket",
            ),
            (
                "https://s3.amazonaws.com/attacker-bucket/x",
                "response bucket",
            ),
            (
                "https://cloudformation-custom-resource-response-.s3.amazonaws.com/x",
                "response bucket",
            ),
            (
                "https://cloudformation-custom-resource-response-useast1-mine.s3.amazonaws.com/x",
                "response bucket",
            ),
            (
                "https://x.cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x",
                "not S3",
            ),
            ("http://127.0.0.1:9000/cfn-response", "not https"),
            ("https://localhost/x", "not an AWS host"),
            ("not a url", "not a URL"),
        ] {
            let refused = response_url_allowed(url, false).expect_err(url);
            assert!(refused.contains(why), "{url}: {refused}");
        }
        assert_eq!(
            response_url_allowed("http://127.0.0.1:9000/cfn-response", true),
            Ok(())
        );
        assert!(response_url_allowed("ftp://127.0.0.1/x", true).is_err());
        assert!(response_url_allowed("http://10.0.0.1/x", true).is_err());
    }

    /// The bucket's region is one AWS has, in every partition whose S3 host is accepted: a
    /// region of each answered, a made-up one (or a real one spelt with its dashes) refused.
    #[test]
    fn the_response_bucket_names_a_real_region() {
        let url = |region: &str| {
            format!("https://cloudformation-custom-resource-response-{region}.s3.amazonaws.com/x")
        };
        for region in [
            "useast1",
            "apsoutheast5",
            "mxcentral1",
            "usgovwest1",
            "cnnorthwest1",
        ] {
            assert_eq!(
                response_url_allowed(&url(region), false),
                Ok(()),
                "{region}"
            );
        }
        for region in ["uswest9", "marsnorth1", "attacker1", "us-east-1", "useast"] {
            let refused = response_url_allowed(&url(region), false).expect_err(region);
            assert!(refused.contains("response bucket"), "{region}: {refused}");
        }
    }
}
