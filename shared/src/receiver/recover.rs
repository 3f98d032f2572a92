//! Events read from their sender's own API (the recover functions), settled through the same
//! claim as a webhook, and the ledger look-up they make first.

use super::*;

/// What [`Receiver::recover`] did with one event.
#[derive(Debug)]
pub struct Recovered {
    /// The event's id, when it parsed.
    pub event_id: Option<EventId>,
    /// Processed, ignored, duplicate, rejected (it does not parse) or error.
    pub disposition: Disposition,
    /// Why it was not applied, data-free.
    pub error: Option<String>,
    /// When the database was unavailable (the cause's name, as a spill names it): the caller
    /// stops, and the next run tries again.
    pub unavailable: Option<&'static str>,
}

impl<P: Provider> Receiver<P> {
    /// The provider's parser on an event read from its sender's API, with no signature to
    /// check and no headers. The body's SHA-256 with it.
    fn parse_unverified(&self, body: &[u8]) -> Result<(Parsed<P::Event>, [u8; 32]), Rejection> {
        let verified = crate::verify::Verified::default();
        let sha: [u8; 32] = Sha256::digest(body).into();
        let headers = http::HeaderMap::new();
        let parsed = self.provider().parse(
            &Signed::new(body, &sha, &verified),
            &Unsigned::new(&headers),
        )?;
        Ok((parsed, sha))
    }

    /// Applies an event read from its sender's own API (a recover function's: Stripe's
    /// `GET /v1/events`) through the same claim and effect as its webhook. `body` is the
    /// event's JSON as the API returned it, parsed by the provider's parser with no headers;
    /// no signature covers it (the API was reached over verified TLS with the account's key:
    /// ARCHITECTURE.md "Recovery from the senders' records"), and the claim stores no payload
    /// fingerprint, because the API's JSON is not the bytes the webhook carried. An event that
    /// did arrive is a duplicate; one that did not is applied once. One log line per event
    /// (`recovered`); the run's counts are the caller's report.
    pub async fn recover(&self, body: &[u8]) -> Recovered {
        let started = Instant::now();
        let recovered = match self.parse_unverified(body) {
            Err(r) => Recovered {
                event_id: None,
                disposition: Disposition::Rejected(r.clone()),
                error: Some(format!("the event does not parse: {}", r.detail)),
                unavailable: None,
            },
            Ok((parsed, _)) => {
                let (disposition, error, unavailable) = match self.settle(&parsed, None).await {
                    Ok(d) => (d, None, None),
                    Err(e) => (Disposition::Error, Some(e.summary()), e.unavailable()),
                };
                Recovered {
                    event_id: Some(parsed.event_id),
                    disposition,
                    error,
                    unavailable,
                }
            }
        };
        let mut fields = Map::new();
        fields.insert("provider".into(), self.name.into());
        if let Some(id) = &recovered.event_id {
            fields.insert("event_id".into(), id.as_str().into());
        }
        fields.insert("disposition".into(), recovered.disposition.name().into());
        if let Some(error) = &recovered.error {
            fields.insert("error".into(), error.as_str().into());
        }
        fields.insert(
            "latency_ms".into(),
            (started.elapsed().as_secs_f64() * 1000.0).into(),
        );
        let level = if recovered.error.is_some() {
            Level::Error
        } else {
            Level::Info
        };
        self.log.write(level, "recovered", fields);
        recovered
    }
}

impl<P: Provider> Receiver<P> {
    /// The ids among `event_ids` already in this provider's ledger: applied by a webhook, a
    /// drain or an earlier run. A recover function asks before it applies what it listed, so
    /// its cap counts only events still to apply. An error is the database's, data-free.
    pub async fn claimed(
        &self,
        event_ids: &[&str],
    ) -> Result<std::collections::HashSet<String>, crate::db::DeliveryError> {
        self.database
            .run(&crate::pipeline::Claimed {
                provider: self.name,
                event_ids,
            })
            .await
    }
}
