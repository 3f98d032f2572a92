//! Database credentials without a static password in the environment: RDS IAM authentication
//! tokens (a SigV4-presigned `connect` URL, valid 15 minutes, made anew for every connection)
//! and the standard RDS secret in AWS Secrets Manager (read once per cold start).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use serde::Deserialize;

/// How long an IAM token is valid; RDS accepts at most 15 minutes.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// Why credentials could not be had, and the error that caused it when there is one.
/// Messages never contain a secret value.
#[derive(Debug)]
pub struct AuthError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl AuthError {
    /// A failure with no underlying error.
    pub fn new(message: String) -> Self {
        Self {
            message,
            source: None,
        }
    }

    /// A failure caused by `source` (kept, for [`std::error::Error::source`]).
    pub fn caused(message: String, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            message,
            source: Some(Box::new(source)),
        }
    }
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AuthError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The RDS IAM authentication token for `user` at `host:port` in `region`, signed with
/// `credentials` at `time`: the presigned `connect` URL without its scheme, used as the
/// password.
pub fn auth_token(
    credentials: &Credentials,
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    time: SystemTime,
) -> Result<String, AuthError> {
    let fail = |what: &str| AuthError::new(format!("could not sign the IAM auth token: {what}"));
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("rds-db")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|_| fail("signing parameters"))?
        .into();
    let url = format!(
        "https://{host}:{port}/?Action=connect&DBUser={}",
        percent_encode(user)
    );
    let signable = SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|_| fail("request"))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|_| fail("signature"))?
        .into_parts();
    let mut request = http::Request::builder()
        .uri(&url)
        .body(())
        .map_err(|_| fail("URL"))?;
    instructions.apply_to_request_http1x(&mut request);
    let signed = request.uri().to_string();
    Ok(signed
        .strip_prefix("https://")
        .unwrap_or(&signed)
        .to_owned())
}

/// Makes IAM tokens from the configured credential chain (in Lambda: the execution role's
/// credentials from the environment).
#[derive(Clone, Debug)]
pub struct IamTokens {
    credentials: SharedCredentialsProvider,
    host: String,
    port: u16,
    user: String,
    region: String,
}

impl IamTokens {
    /// A token maker for one database user.
    pub fn new(
        credentials: SharedCredentialsProvider,
        host: &str,
        port: u16,
        user: &str,
        region: &str,
    ) -> Self {
        Self {
            credentials,
            host: host.to_owned(),
            port,
            user: user.to_owned(),
            region: region.to_owned(),
        }
    }

    /// The database user the tokens are for.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// A fresh token, valid for [`TOKEN_LIFETIME`] from `now`.
    pub async fn token(&self, now: SystemTime) -> Result<String, AuthError> {
        let credentials = self.credentials.provide_credentials().await.map_err(|e| {
            AuthError::caused(format!("no AWS credentials for IAM database auth: {e}"), e)
        })?;
        auth_token(
            &credentials,
            &self.host,
            self.port,
            &self.user,
            &self.region,
            now,
        )
    }
}

/// The standard RDS secret (as Secrets Manager's RDS integration writes it).
#[derive(Deserialize, Clone, PartialEq, Eq)]
pub struct DbSecret {
    /// Database user.
    pub username: String,
    /// Its password.
    pub password: String,
    /// The instance endpoint (a proxy endpoint in `DB_HOST` takes precedence).
    pub host: Option<String>,
    /// Port, when recorded.
    pub port: Option<u16>,
    /// Database name, when recorded.
    pub dbname: Option<String>,
}

impl std::fmt::Debug for DbSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbSecret")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("dbname", &self.dbname)
            .finish()
    }
}

/// Parses the secret string. The error never quotes the secret.
pub fn parse_secret(json: &str) -> Result<DbSecret, AuthError> {
    #[derive(Deserialize)]
    struct Raw {
        username: String,
        password: String,
        host: Option<String>,
        port: Option<serde_json::Value>,
        dbname: Option<String>,
    }
    let raw: Raw = serde_json::from_str(json).map_err(|_| {
        AuthError::new(
            "the database secret is not the standard RDS JSON (username, password, ...)".into(),
        )
    })?;
    // Secrets Manager's rotation templates write the port as a number; hand-made secrets
    // often hold a string.
    let port = match raw.port {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    };
    Ok(DbSecret {
        username: raw.username,
        password: raw.password,
        host: raw.host,
        port,
        dbname: raw.dbname,
    })
}

/// The AWS configuration loader every SDK call in the process starts from: the defaults
/// (region, credential chain, `AWS_ENDPOINT_URL_*`) with the SDK's own hyper HTTPS client on
/// rustls with aws-lc-rs, the database connection's provider. The credential chain's own calls
/// use the same client.
pub fn aws_config() -> aws_config::ConfigLoader {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https)
}

/// Reads the database secret `arn` from Secrets Manager with the given AWS configuration.
pub async fn fetch_secret(
    config: &aws_config::SdkConfig,
    arn: &str,
) -> Result<DbSecret, AuthError> {
    parse_secret(&fetch_secret_string(config, arn, "the database secret").await?)
}

/// Reads the `SecretString` of `arn` from Secrets Manager; `what` names it in an error (which
/// never holds the value).
pub async fn fetch_secret_string(
    config: &aws_config::SdkConfig,
    arn: &str,
    what: &str,
) -> Result<String, AuthError> {
    let client = aws_sdk_secretsmanager::Client::new(config);
    let output = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            let message = format!(
                "could not read {what}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
            );
            AuthError::caused(message, e)
        })?;
    output
        .secret_string()
        .map(str::to_owned)
        .ok_or_else(|| AuthError::new(format!("{what} has no SecretString")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A credential chain that has nothing, as a function without a role would.
    #[derive(Debug)]
    struct NoCredentials;

    impl ProvideCredentials for NoCredentials {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            aws_credential_types::provider::future::ProvideCredentials::ready(Err(
                aws_credential_types::provider::error::CredentialsError::not_loaded(
                    "no role in this test",
                ),
            ))
        }
    }

    #[tokio::test]
    async fn a_failure_keeps_its_cause() {
        let tokens = IamTokens::new(
            SharedCredentialsProvider::new(NoCredentials),
            "db.example",
            5432,
            "stripe_fn",
            "eu-west-1",
        );
        let error = tokens.token(noon()).await.expect_err("no credentials");
        let cause = std::error::Error::source(&error).expect("the cause is kept");
        assert!(
            cause
                .downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
                .is_some(),
            "{cause:?}"
        );
        assert!(std::error::Error::source(&AuthError::new("plain".into())).is_none());
    }

    /// 2026-11-29T12:00:00Z.
    fn noon() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_953_600)
    }

    /// A token as (address, sorted query parameters): the server verifies the signature
    /// over the canonical (sorted) query, so the order the parameters are written in is free.
    fn canonical(token: &str) -> (String, Vec<String>) {
        let (address, query) = token.split_once('?').expect("query");
        let mut params: Vec<String> = query.split('&').map(str::to_owned).collect();
        params.sort();
        (address.to_owned(), params)
    }

    // Expected tokens computed with botocore's generate_db_auth_token, the clock frozen at
    // 2026-11-29T12:00:00Z.
    #[test]
    fn tokens_match_the_aws_sdk_for_the_same_credentials_and_clock() {
        let with_session = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("session-token-example".into()),
            None,
            "test",
        );
        let token = auth_token(
            &with_session,
            "claimonce-proxy.proxy-abcdefghijkl.us-east-1.rds.amazonaws.com",
            5432,
            "claimonce_stripe",
            "us-east-1",
            noon(),
        )
        .expect("token");
        assert_eq!(
            canonical(&token),
            canonical(
                "claimonce-proxy.proxy-abcdefghijkl.us-east-1.rds.amazonaws.com:5432/?Action=connect\
             &DBUser=claimonce_stripe&X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIDEXAMPLE%2F20261129%2Fus-east-1%2Frds-db%2Faws4_request\
             &X-Amz-Date=20261129T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
             &X-Amz-Security-Token=session-token-example\
             &X-Amz-Signature=1d5a24532a7a106d92750823d37ddafe1fed3a0c76f7e634614fe8644ab58be4"
            )
        );
        let plain = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let token = auth_token(
            &plain,
            "db.example.internal",
            6432,
            "user with space",
            "eu-west-1",
            noon(),
        )
        .expect("token");
        assert_eq!(
            canonical(&token),
            canonical(
                "db.example.internal:6432/?Action=connect&DBUser=user%20with%20space\
             &X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIDEXAMPLE%2F20261129%2Feu-west-1%2Frds-db%2Faws4_request\
             &X-Amz-Date=20261129T120000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=74113cfcc077e59aacba44243880bcb5c9f0d9af555eeadf1185c0a41554438a"
            )
        );
    }

    #[test]
    fn the_standard_rds_secret_parses_and_never_shows_its_password() {
        let secret = parse_secret(
            r#"{"username":"claimonce_stripe","password":"s3cr3t!","engine":"postgres",
                "host":"db.abc.us-east-1.rds.amazonaws.com","port":5432,"dbname":"claimonce",
                "dbInstanceIdentifier":"claimonce-db"}"#,
        )
        .expect("secret");
        assert_eq!(secret.username, "claimonce_stripe");
        assert_eq!(secret.password, "s3cr3t!");
        assert_eq!(secret.port, Some(5432));
        assert_eq!(secret.dbname.as_deref(), Some("claimonce"));
        assert!(!format!("{secret:?}").contains("s3cr3t!"));
        let string_port =
            parse_secret(r#"{"username":"u","password":"p","port":"6432"}"#).expect("ok");
        assert_eq!(string_port.port, Some(6432));
        let bad = parse_secret(r#"{"user":"u","password":"hunter2"}"#).expect_err("no username");
        assert!(!bad.to_string().contains("hunter2"));
    }
}
