//! A receiver's signing secrets, and where they come from: `<VAR>` in the environment (the
//! local run, the tests), or, in a deployment, the Secrets Manager secret whose ARN is in
//! `<VAR>_ARN`, read at cold start by the function itself, so the secret is never in the
//! function's configuration (`lambda:GetFunctionConfiguration` shows only the ARN).
//!
//! A rotation needs no deploy: put `old,new` in the secret; an execution environment that meets
//! a signature none of its secrets match reads the secret again (at most once a minute, so
//! unsigned requests cannot make it call Secrets Manager more often than that) and checks the
//! delivery once more with what it read.

use std::time::Duration;

use crate::config::{self, ConfigError};

/// The shortest time between two reads of the secret after cold start, unless
/// `WEBHOOK_SECRET_REFRESH_SECONDS` says otherwise ([`refresh_interval`]).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// `WEBHOOK_SECRET_REFRESH_SECONDS`, default [`REFRESH_INTERVAL`].
pub fn refresh_interval() -> Result<Duration, ConfigError> {
    let seconds = config::number("WEBHOOK_SECRET_REFRESH_SECONDS", REFRESH_INTERVAL.as_secs())?;
    Ok(Duration::from_secs(seconds))
}

/// Where the signing secrets come from.
#[derive(Clone)]
pub struct WebhookSecrets {
    var: &'static str,
    source: Source,
}

#[derive(Clone)]
enum Source {
    Environment,
    SecretsManager {
        arn: String,
        aws: Box<aws_config::SdkConfig>,
    },
}

impl std::fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The ARN names the secret, it is not the secret; still, show only which source.
        let source = match self.source {
            Source::Environment => "environment",
            Source::SecretsManager { .. } => "secrets-manager",
        };
        write!(f, "WebhookSecrets({}, {source})", self.var)
    }
}

impl WebhookSecrets {
    /// `<var>_ARN` when it is set (with the function's AWS configuration; its region and
    /// `AWS_ENDPOINT_URL_SECRETS_MANAGER` apply), else `<var>` itself.
    pub async fn from_env(var: &'static str) -> Result<Self, ConfigError> {
        let source = match config::optional(&format!("{var}_ARN")) {
            Some(arn) => Source::SecretsManager {
                arn,
                aws: Box::new(crate::auth::aws_config().load().await),
            },
            None => Source::Environment,
        };
        Ok(Self { var, source })
    }

    /// The secrets from `arn` with the given AWS configuration.
    pub fn secrets_manager(var: &'static str, arn: &str, aws: aws_config::SdkConfig) -> Self {
        Self {
            var,
            source: Source::SecretsManager {
                arn: arn.to_owned(),
                aws: Box::new(aws),
            },
        }
    }

    /// Whether `var` or `<var>_ARN` is set at all: a function whose provider delivers through
    /// EventBridge alone may have neither ([`crate::prelude::Provider::without_webhooks`]).
    pub fn configured(var: &str) -> bool {
        config::optional(var).is_some() || config::optional(&format!("{var}_ARN")).is_some()
    }

    /// True when reading again can give something new (Secrets Manager, not the environment).
    pub fn can_change(&self) -> bool {
        matches!(self.source, Source::SecretsManager { .. })
    }

    /// The secrets' text, as the provider's constructor takes it (comma-separated during a
    /// rotation). An error names the variable and what failed, never a value.
    pub async fn read(&self) -> Result<String, ConfigError> {
        match &self.source {
            Source::Environment => config::required(self.var),
            Source::SecretsManager { arn, aws } => {
                let what = format!("the secret {}_ARN names", self.var);
                crate::auth::fetch_secret_string(aws, arn, &what)
                    .await
                    .map_err(|e| ConfigError::new(e.to_string()))
            }
        }
    }
}
