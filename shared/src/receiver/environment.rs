//! The execution environment's own lines: its cold start and connection, the login's
//! statement bound against the function's timeout, and the reconnects a delivery made.

use super::*;

impl<P: Provider> Receiver<P> {
    /// Connects now, at cold start, and logs the cold start with its metrics (`ColdStart`, and
    /// `DatabaseConnectMs` when the connection was made). A failure is logged; the first
    /// delivery retries.
    pub async fn warm_up(&self) {
        let started = Instant::now();
        let connected = self.database.warm_up().await;
        let connect_ms = started.elapsed().as_secs_f64() * 1000.0;
        let mut fields = Map::new();
        fields.insert("provider".into(), P::NAME.into());
        let cold = metrics::Metric {
            name: "ColdStart",
            unit: "Count",
            value: 1.0,
        };
        match connected {
            Ok(bound) => {
                if let Some(bound) = bound {
                    let _ = self.statement_bound.set(bound);
                }
                let connect = metrics::Metric {
                    name: "DatabaseConnectMs",
                    unit: "Milliseconds",
                    value: connect_ms,
                };
                metrics::embed(&mut fields, &[("Provider", P::NAME)], &[cold, connect]);
                self.log.write(Level::Info, "cold start", fields);
            }
            Err(e) => {
                fields.insert("error".into(), e.to_string().into());
                metrics::embed(&mut fields, &[("Provider", P::NAME)], &[cold]);
                self.log
                    .write(Level::Warn, "database not reachable at cold start", fields);
            }
        }
    }

    /// Checks the login's statement bound read at cold start against the function's timeout
    /// (what the first invocation had left when it began). A `statement_timeout` of zero, or
    /// one longer than the function may run, leaves a statement the client gave up on running
    /// on the server behind RDS Proxy, which cancels nothing: an ERROR line naming the login,
    /// with the `UnboundedStatements` metric. Returns true when it logged that.
    pub fn check_statement_bound(&self, function_timeout: std::time::Duration) -> bool {
        let Some(bound) = self.statement_bound.get() else {
            return false;
        };
        let unbounded =
            bound.statement_timeout.is_zero() || bound.statement_timeout > function_timeout;
        if unbounded {
            let mut fields = Map::new();
            fields.insert("provider".into(), P::NAME.into());
            fields.insert("login".into(), bound.login.as_str().into());
            fields.insert(
                "statement_timeout_ms".into(),
                u64::try_from(bound.statement_timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .into(),
            );
            fields.insert(
                "function_timeout_ms".into(),
                u64::try_from(function_timeout.as_millis())
                    .unwrap_or(u64::MAX)
                    .into(),
            );
            let metric = metrics::Metric {
                name: "UnboundedStatements",
                unit: "Count",
                value: 1.0,
            };
            metrics::embed(&mut fields, &[("Provider", P::NAME)], &[metric]);
            self.log.write(
                Level::Error,
                "the login's statement_timeout does not end a statement within the function's \
                 timeout; set it as the login's default (the migrate function's DB_HANDLER_USERS)",
                fields,
            );
        }
        unbounded
    }

    /// Logs the reconnects the last delivery made, with the `Reconnects` metric: a proxy that
    /// drops idle connections, a failover, or a database that went away shows here.
    pub(super) fn report_reconnects(&self, event_id: &EventId) {
        let reconnects = self.database.take_reconnects();
        if reconnects == 0 {
            return;
        }
        let mut fields = Map::new();
        fields.insert("provider".into(), P::NAME.into());
        fields.insert("event_id".into(), event_id.as_str().into());
        let metric = metrics::Metric {
            name: "Reconnects",
            unit: "Count",
            value: reconnects as f64,
        };
        metrics::embed(&mut fields, &[("Provider", P::NAME)], &[metric]);
        self.log.write(Level::Info, "reconnected", fields);
    }
}
