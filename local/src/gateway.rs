//! An API Gateway (HTTP API, payload format 2.0) front for local runs: it turns each HTTP
//! request into the event API Gateway would send, invokes the route's function through its
//! Runtime API, and turns the function's response payload back into HTTP.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;

use crate::http::Reply;
use crate::runtime_api::{Outcome, RuntimeApi};

/// Routes: `/webhooks/<provider>` → that function's Runtime API, and `/eventbridge/<provider>`
/// (a function that takes EventBridge events) → its event queue, drained into it.
pub type Routes = HashMap<String, Route>;

/// Where a route's request goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// To the function, as API Gateway's event.
    Function(Arc<RuntimeApi>),
    /// An EventBridge event, onto the function's event queue and from there to the function.
    EventQueue(Arc<RuntimeApi>, crate::bridge::EventQueues),
}

/// The header of an EventBridge route's answer that carries the disposition the function's
/// `bridged` line named (the body is the function's batch response, which names none).
pub const DISPOSITION: &str = "claimonce-disposition";

/// How long a request waits for its function (the template's function timeout).
const FUNCTION_TIMEOUT: Duration = Duration::from_secs(15);

/// A number no earlier request of this process had.
fn next_id() -> u64 {
    static REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Builds the HTTP API v2 event for a request. Header names are lower-cased and repeated
/// values joined with commas, as API Gateway does; a body that is not UTF-8 is base64.
pub fn event(method: &str, path: &str, query: &str, headers: &HeaderMap, body: &[u8]) -> Value {
    let mut joined: Map<String, Value> = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match joined.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&value);
            }
            _ => {
                joined.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let (body, encoded) = match std::str::from_utf8(body) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (STANDARD.encode(body), true),
    };
    let route = format!("{method} {path}");
    // One id per request, as API Gateway gives: the delivery line's `request_id`.
    let request_id = format!("local{:010}=", next_id());
    let epoch_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    json!({
        "version": "2.0",
        "routeKey": route,
        "rawPath": path,
        "rawQueryString": query,
        "headers": joined,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "domainPrefix": "localhost",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or("")
            },
            "requestId": request_id,
            "routeKey": route,
            "stage": "$default",
            "time": "",
            "timeEpoch": epoch_ms
        },
        "body": body,
        "isBase64Encoded": encoded
    })
}

fn plain(status: StatusCode, body: &str) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
}

/// Turns a function's API Gateway response payload into an HTTP response.
pub fn response(payload: &[u8]) -> Reply {
    let Ok(value) = serde_json::from_slice::<Value>(payload) else {
        return plain(
            StatusCode::BAD_GATEWAY,
            "the function's response is not JSON",
        );
    };
    let status = value
        .get("statusCode")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let text = value.get("body").and_then(Value::as_str).unwrap_or("");
    let body = if value.get("isBase64Encoded").and_then(Value::as_bool) == Some(true) {
        STANDARD.decode(text).unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    let mut builder = Response::builder().status(status);
    // Payload 2.0 responses carry `headers`; 1.0 ones may carry `multiValueHeaders`.
    if let Some(headers) = value.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            if let Some(v) = value.as_str() {
                builder = builder.header(name, v);
            }
        }
    }
    if let Some(headers) = value.get("multiValueHeaders").and_then(Value::as_object) {
        for (name, values) in headers {
            for v in values
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                builder = builder.header(name, v);
            }
        }
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| plain(StatusCode::BAD_GATEWAY, "invalid response headers"))
}

async fn handle(routes: Arc<Routes>, request: Request<Incoming>) -> Reply {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let Some(function) = routes.get(&path) else {
        return plain(StatusCode::NOT_FOUND, "{\"message\":\"Not Found\"}");
    };
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return plain(StatusCode::BAD_REQUEST, "could not read the body");
    };
    let function = match function {
        Route::Function(api) => api,
        // An EventBridge event goes on the function's event queue, as a rule puts it there, and
        // to the function as Lambda's event source mapping hands it over; the answer is the
        // batch response.
        Route::EventQueue(api, queues) => {
            let Ok(bridged) = serde_json::from_slice::<Value>(&body) else {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "the body is not an EventBridge event",
                );
            };
            return match queues.deliver(api, &bridged).await {
                Ok((answer, disposition)) => {
                    let mut answered = Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/json");
                    if let Some(disposition) = disposition {
                        answered = answered.header(DISPOSITION, disposition);
                    }
                    answered
                        .body(Full::new(Bytes::from(answer.to_string())))
                        .unwrap_or_else(|_| plain(StatusCode::BAD_GATEWAY, "invalid response"))
                }
                Err(why) => plain(StatusCode::BAD_GATEWAY, &why),
            };
        }
    };
    let event = event(
        parts.method.as_str(),
        &path,
        parts.uri.query().unwrap_or(""),
        &parts.headers,
        &body,
    );
    match function.invoke(event.to_string(), FUNCTION_TIMEOUT).await {
        Ok(Outcome::Response(payload)) => response(&payload),
        // API Gateway answers a function error with 502 and a generic message.
        Ok(Outcome::Error(_)) => plain(
            StatusCode::BAD_GATEWAY,
            "{\"message\":\"Internal Server Error\"}",
        ),
        Err(_) => plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "{\"message\":\"Service Unavailable\"}",
        ),
    }
}

/// Serves `routes` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, routes: Routes) {
    let routes = Arc::new(routes);
    crate::http::serve(listener, move |r| handle(Arc::clone(&routes), r)).await;
}

/// Sends an API Gateway event's request (method POST, its route, headers and body) over HTTP
/// to `authority` (`host:port`), as a webhook sender would; returns the response.
pub async fn send(authority: &str, event: &Value) -> Result<Response<Bytes>, String> {
    let route = crate::sign::event_path(event).unwrap_or("/").to_owned();
    let body = crate::sign::event_body(event)?;
    let mut request = Request::builder()
        .method("POST")
        .uri(&route)
        .header("host", authority);
    if let Some(headers) = event.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            let skip = ["host", "content-length"]
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h));
            if let (false, Some(v)) = (skip, value.as_str()) {
                request = request.header(name, v);
            }
        }
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("{authority}: {e} (is `claimonce-local run` running?)"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_has_its_own_request_id_and_time() {
        let headers = HeaderMap::new();
        let first = event("POST", "/webhooks/x", "", &headers, b"{}");
        let second = event("POST", "/webhooks/x", "", &headers, b"{}");
        let id = |e: &Value| e["requestContext"]["requestId"].as_str().map(str::to_owned);
        assert!(id(&first).is_some());
        assert_ne!(id(&first), id(&second));
        assert!(first["requestContext"]["timeEpoch"].as_u64() > Some(1_700_000_000_000));
    }
}
