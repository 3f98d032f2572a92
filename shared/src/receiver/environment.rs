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
        let provider = ("Provider", P::NAME);
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
                let metrics = metrics::Embedded {
                    dimension: provider,
                    metrics: &[cold, connect],
                };
                let line = crate::log::fields! { provider: P::NAME; ..metrics };
                self.log.write(Level::Info, "cold start", line);
            }
            Err(e) => {
                let metrics = metrics::Embedded {
                    dimension: provider,
                    metrics: &[cold],
                };
                let line =
                    crate::log::fields! { provider: P::NAME, error: e.to_string(); ..metrics };
                self.log
                    .write(Level::Warn, "database not reachable at cold start", line);
            }
        }
    }

    /// Checks the login's statement bound read at cold start against the function's timeout
    /// (what the first invocation had left when it began). A `statement_timeout` of zero, or
    /// one longer than the function may run, leaves a statement the client gave up on running
    /// on the server behind RDS Proxy, which cancels nothing: an ERROR line naming the login,
    /// with the `UnboundedStatements` metric. Returns true when it logged that.
    pub(crate) fn check_statement_bound(&self, function_timeout: std::time::Duration) -> bool {
        let Some(bound) = self.statement_bound.get() else {
            return false;
        };
        let unbounded =
            bound.statement_timeout.is_zero() || bound.statement_timeout > function_timeout;
        if unbounded {
            let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            let metric = metrics::Metric {
                name: "UnboundedStatements",
                unit: "Count",
                value: 1.0,
            };
            let line = crate::log::fields! {
                provider: P::NAME,
                login: bound.login.as_str(),
                statement_timeout_ms: ms(bound.statement_timeout),
                function_timeout_ms: ms(function_timeout);
                ..metrics::Embedded { dimension: ("Provider", P::NAME), metrics: &[metric] }
            };
            self.log.write(
                Level::Error,
                "the login's statement_timeout does not end a statement within the function's \
                 timeout; set it as the login's default (the migrate function's DB_HANDLER_USERS)",
                line,
            );
        }
        unbounded
    }

    /// Logs the `reconnects` the delivery of `event_id` made, with the `Reconnects` metric: a
    /// proxy that drops idle connections, a failover, or a database that went away shows here.
    /// The count is that delivery's own, never another's in flight beside it.
    pub(super) fn report_reconnects(&self, event_id: &EventId, reconnects: u64) {
        if reconnects == 0 {
            return;
        }
        let metric = metrics::Metric {
            name: "Reconnects",
            unit: "Count",
            value: reconnects as f64,
        };
        let fields = crate::log::fields! {
            provider: P::NAME,
            event_id: event_id.as_str();
            ..metrics::Embedded { dimension: ("Provider", P::NAME), metrics: &[metric] }
        };
        self.log.write(Level::Info, "reconnected", fields);
    }
}
