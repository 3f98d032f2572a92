//! The local run's log, for reading in a terminal: one short line per delivery (time,
//! provider, event id, disposition, status, latency, and the problem or error when there is
//! one) instead of the JSON line a function writes for CloudWatch; any other line of a function
//! as its level, message and the fields that say what happened (a `drained` or `bridged` line
//! names its event and disposition). Lines that are not a function's JSON pass through as they
//! are.

use serde_json::Value;

/// The line to print for one line a function wrote.
pub fn readable(line: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(line) else {
        return line.to_owned();
    };
    let text = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or("");
    // "2026-11-30T20:31:02.123Z" -> "20:31:02.123"
    let time = text("timestamp").get(11..23).unwrap_or("");
    let level = text("level");
    let message = text("message");
    if message != "delivery" {
        let detail = [
            "provider",
            "event_id",
            "disposition",
            "problem",
            "detail",
            "error",
        ]
        .iter()
        .filter_map(|k| {
            fields
                .get(*k)
                .and_then(Value::as_str)
                .map(|v| format!("{k}={v}"))
        })
        .collect::<Vec<_>>()
        .join(" ");
        return format!("{time} {level:<5} {message} {detail}")
            .trim_end()
            .to_owned();
    }
    let status = fields.get("status").and_then(Value::as_u64).unwrap_or(0);
    let latency = fields
        .get("latency_ms")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let event_id = match text("event_id") {
        "" => "-",
        id => id,
    };
    let mut out = format!(
        "{time} {:<7} {event_id:<32} {:<10} {status} {latency:>7.1} ms",
        text("provider"),
        text("disposition"),
    );
    for key in ["problem", "error"] {
        if let Some(value) = fields.get(key).and_then(Value::as_str) {
            out.push_str(&format!("  {key}: {value}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_line_reads_as_one_short_line() {
        let line = r#"{"timestamp":"2026-11-30T20:31:02.123Z","level":"INFO","message":"delivery","service":"claimonce","provider":"stripe","event_id":"evt_1","event_type":"invoice.paid","disposition":"processed","status":200,"latency_ms":4.25,"_aws":{}}"#;
        assert_eq!(
            readable(line),
            "20:31:02.123 stripe  evt_1                            processed  200     4.2 ms"
        );
        let rejected = r#"{"timestamp":"2026-11-30T20:31:03.000Z","level":"INFO","message":"delivery","provider":"resend","disposition":"rejected","status":400,"problem":"signature-mismatch","latency_ms":0.5}"#;
        assert!(readable(rejected).ends_with("  problem: signature-mismatch"));
        let other = r#"{"timestamp":"2026-11-30T20:31:01.000Z","level":"WARN","message":"database not reachable at cold start","provider":"stripe","error":"connect timed out"}"#;
        assert_eq!(
            readable(other),
            "20:31:01.000 WARN  database not reachable at cold start provider=stripe error=connect timed out"
        );
        // A drained line names its event and what became of it, at the level that says
        // whether waiting fixes it.
        let drained = r#"{"timestamp":"2026-11-30T20:31:04.000Z","level":"WARN","message":"drained","provider":"stripe","sqs_message_id":"m-1","event_id":"evt_2","event_type":"invoice.paid","disposition":"error","receive_count":2,"error":"connect failed","latency_ms":1.5}"#;
        assert_eq!(
            readable(drained),
            "20:31:04.000 WARN  drained provider=stripe event_id=evt_2 disposition=error error=connect failed"
        );
        assert_eq!(readable("not json"), "not json");
    }
}
