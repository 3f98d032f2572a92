//! The whole of a provider function's `main`: the receiver built from the environment, then
//! served.

use super::runtime::{Concurrency, serve};
use crate::config::ConfigError;
use crate::db::Database;
use crate::log::Log;
use crate::provider::Provider;
use crate::receiver::{Limits, Receiver};

/// The whole of a provider function's `main`: read the signing secrets from the variable the
/// provider's registry entry names (`secret_var` in [`Provider::MANIFEST`], or the Secrets
/// Manager secret `<secret_var>_ARN` names: [`crate::secrets`]), build the provider from them
/// with `build` and the receiver from the environment, connect, and serve. A configuration
/// error is logged as one line (naming the variable, never its value) and ends the process
/// before it takes any request, as a Runtime API that fails before the first invocation does;
/// both exit with a failure status.
pub async fn run_from_env<P: Provider>(
    build: fn(&str) -> Result<P, ConfigError>,
) -> std::process::ExitCode {
    let log = Log::process();
    let built = async {
        let entry = crate::registry::Entry::from_manifest(P::MANIFEST)?;
        let bridge = crate::bridge::Bridge::from_env(P::NAME)?;
        let spill = crate::spill::Spill::from_env()?;
        let api = crate::complete::SenderApi::from_env(&entry).await?;
        let limits = Limits::from_env()?;
        let settings = crate::db::Settings::from_env().await?;
        let concurrency = Concurrency::from_env()?;
        let database = Database::new(settings).with_connections(concurrency.connections);
        // No signing secret: a function that takes its sender's events through EventBridge
        // alone, if the provider has such a form; otherwise the secret is required.
        let bridged_only =
            bridge.is_some() && !crate::secrets::WebhookSecrets::configured(entry.secret_var);
        let receiver = match P::without_webhooks().filter(|_| bridged_only) {
            Some(provider) => Receiver::new(provider, database, limits, log.clone()),
            None => {
                let secrets = crate::secrets::WebhookSecrets::from_env(entry.secret_var).await?;
                let interval = crate::secrets::refresh_interval()?;
                let provider = build(&secrets.read().await?)?;
                Receiver::new(provider, database, limits, log.clone())
                    .with_secret_refresh(secrets, build, interval)
            }
        };
        Ok::<_, ConfigError>((
            receiver.with_sender_api(api),
            crate::receiver::Queues::new(spill, bridge),
        ))
    }
    .await;
    let Ok((receiver, queues)) = log.config(built) else {
        return std::process::ExitCode::FAILURE;
    };
    match serve(receiver, queues).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // The HTTP client's error: no request data in it.
            log.write(
                crate::log::Level::Error,
                "the Lambda Runtime API failed before any invocation",
                crate::log::fields! { cause: error.to_string() },
            );
            std::process::ExitCode::FAILURE
        }
    }
}
