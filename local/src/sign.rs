//! Re-signs API Gateway sample events (`events/`) with the local development secrets, because
//! a signature older than the tolerance (300 s) is refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use crate::functions::{self, Binaries, Function, Scheme};

/// The route of an HTTP API (`rawPath`) or REST API (`path`) event.
pub fn event_path(event: &Value) -> Option<&str> {
    event
        .get("rawPath")
        .or_else(|| event.get("path"))
        .and_then(Value::as_str)
}

/// The body bytes the function will verify (decoded when `isBase64Encoded`).
pub fn event_body(event: &Value) -> Result<Vec<u8>, String> {
    let body = event.get("body").and_then(Value::as_str).unwrap_or("");
    if event.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        STANDARD
            .decode(body)
            .map_err(|_| "the event's body is not valid base64".to_owned())
    } else {
        Ok(body.as_bytes().to_vec())
    }
}

fn header<'a>(event: &'a Value, name: &str) -> Option<&'a str> {
    event
        .get("headers")?
        .as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
}

/// Sets a header, keeping the spelling already used in the file, in `headers` and (REST
/// events) `multiValueHeaders`.
fn set_header(event: &mut Value, name: &str, value: &str) {
    for (field, wrap) in [("headers", false), ("multiValueHeaders", true)] {
        let Some(map) = event.get_mut(field).and_then(Value::as_object_mut) else {
            if field == "headers" {
                let mut map = Map::new();
                map.insert(name.to_owned(), Value::String(value.to_owned()));
                if let Some(obj) = event.as_object_mut() {
                    obj.insert("headers".into(), Value::Object(map));
                }
            }
            continue;
        };
        let key = map
            .keys()
            .find(|k| k.eq_ignore_ascii_case(name))
            .cloned()
            .unwrap_or_else(|| name.to_owned());
        let value = Value::String(value.to_owned());
        map.insert(
            key,
            if wrap {
                Value::Array(vec![value])
            } else {
                value
            },
        );
    }
}

/// Signs `event` for its route's function with that function's local secret, at `now`, through
/// the scheme's own signer. Returns the function it was signed for.
pub fn resign(event: &mut Value, now: u64) -> Result<&'static Function, String> {
    let path = event_path(event).ok_or("the event has no rawPath or path")?;
    let function = functions::by_path(path)?.ok_or_else(|| format!("no function serves {path}"))?;
    let body = event_body(event)?;
    // A message id for a scheme that signs one (Standard Webhooks): the event's own, in the
    // spelling it uses (`webhook-*` or Resend's `svix-*`), or a fresh one.
    let (svix, id) = match (header(event, "webhook-id"), header(event, "svix-id")) {
        (Some(id), _) => (false, id.to_owned()),
        (None, Some(id)) => (true, id.to_owned()),
        (None, None) => (true, format!("msg_local_{now}")),
    };
    let headers = match function.scheme {
        Scheme::Own { signer } => sign_with_binary(signer, function.dev_secret, &body, now, &id)?,
        scheme => scheme.signer(function.dev_secret)?.sign(&body, now, &id),
    };
    for (name, value) in headers {
        let name = match name.strip_prefix("webhook-") {
            Some(rest) if svix => format!("svix-{rest}"),
            _ => name,
        };
        set_header(event, &name, &value);
    }
    Ok(function)
}

/// Changes a signed `event`'s body after signing (a space added at its end, inside the base64
/// of an encoded one), as a body altered on its way would be: its signature no longer matches.
pub fn tamper(event: &mut Value) -> Result<(), String> {
    let mut body = event_body(event)?;
    body.push(b' ');
    let text = if event.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        STANDARD.encode(&body)
    } else {
        String::from_utf8(body).map_err(|_| "the event's body is not text".to_owned())?
    };
    if let Some(object) = event.as_object_mut() {
        object.insert("body".into(), Value::String(text));
    }
    Ok(())
}

/// Signs through a provider crate's own signer binary, built beside its receiver
/// (`claimonce::verify::signer_command` holds both sides of the exchange).
fn sign_with_binary(
    signer: &str,
    secret: &str,
    body: &[u8],
    now: u64,
    id: &str,
) -> Result<Vec<(String, String)>, String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    // The binaries the local run was given (CLAIMONCE_LOCAL_BINARIES), else where it builds them.
    let program = claimonce::config::optional("CLAIMONCE_LOCAL_BINARIES")
        .map_or_else(|| functions::binaries_dir(Binaries::Providers), Into::into)
        .join(signer);
    if !program.is_file() {
        return Err(format!(
            "{} is not built: `claimonce-local run` builds it, or `cargo build --bins` in the project",
            program.display()
        ));
    }
    let mut child = Command::new(&program)
        .args([now.to_string(), id.to_owned()])
        .env(claimonce::verify::signer_command::SECRET_VAR, secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(body))
        .unwrap_or(Ok(()));
    let output = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !output.status.success() || written.is_err() {
        return Err(format!(
            "{signer} did not sign: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    claimonce::verify::signer_command::read_headers(&String::from_utf8_lossy(&output.stdout))
        .map_err(|e| format!("{signer}: {e}"))
}
