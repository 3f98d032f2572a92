//! Reading the signing secrets again when a signature matches none of them: a rotation may
//! have begun.

use super::*;

/// How a receiver reads its signing secrets again: the source, the provider's constructor,
/// and when it last read.
pub(super) struct Refresh<P> {
    secrets: crate::secrets::WebhookSecrets,
    build: fn(&str) -> Result<P, crate::config::ConfigError>,
    interval: std::time::Duration,
    last: tokio::sync::Mutex<Instant>,
}

impl<P> std::fmt::Debug for Refresh<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Refresh({:?})", self.secrets)
    }
}

impl<P: Provider> Receiver<P> {
    /// Reads the signing secrets from `secrets` again, with `build`, when a delivery's
    /// signature matches none of the current ones and the last read is at least `interval`
    /// old (a deployment: [`crate::secrets::refresh_interval`]); the delivery is then checked
    /// once more. For a source that cannot change (the environment) this does nothing.
    pub fn with_secret_refresh(
        mut self,
        secrets: crate::secrets::WebhookSecrets,
        build: fn(&str) -> Result<P, crate::config::ConfigError>,
        interval: std::time::Duration,
    ) -> Self {
        if secrets.can_change() {
            self.refresh = Some(Refresh {
                secrets,
                build,
                interval,
                last: tokio::sync::Mutex::new(Instant::now()),
            });
        }
        self
    }

    /// Runs `check` (a signature check, with what follows it), and once more when its answer
    /// is a signature that matched none of the secrets and reading them again rebuilt the
    /// provider: a rotation may have begun. The webhook path and the drain both check this way.
    pub(super) async fn with_fresh_secrets<T>(
        &self,
        check: impl Fn() -> Result<T, Rejection>,
    ) -> Result<T, Rejection> {
        match check() {
            Err(r)
                if r.problem == Problem::SignatureMismatch
                    && crate::future::rare(self.refresh_secrets()).await =>
            {
                check()
            }
            other => other,
        }
    }

    /// Reads the secrets again if the interval allows; true when the provider was rebuilt
    /// with what was read. Logs the outcome (never a value).
    async fn refresh_secrets(&self) -> bool {
        let Some(refresh) = &self.refresh else {
            return false;
        };
        let mut last = refresh.last.lock().await;
        if last.elapsed() < refresh.interval {
            return false;
        }
        *last = Instant::now();
        let rebuilt = match refresh.secrets.read().await {
            Ok(raw) => (refresh.build)(&raw),
            Err(e) => Err(e),
        };
        match rebuilt {
            Ok(provider) => {
                *self
                    .provider
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    std::sync::Arc::new(provider);
                self.log.write(
                    Level::Info,
                    "signing secrets read again after a signature matched none",
                    crate::log::fields! { provider: P::NAME },
                );
                true
            }
            Err(e) => {
                self.log.write(
                    Level::Warn,
                    "could not read the signing secrets again",
                    crate::log::fields! { provider: P::NAME, error: e.to_string() },
                );
                false
            }
        }
    }
}
