//! What an invocation is answered with: an API Gateway response payload in the event's
//! format, or a partial batch response to an SQS event.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderValue};
use lambda_http::{Body, Response};
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use super::event::Format;
use crate::response::Disposition;

/// The API Gateway response payload for one request, in the event's format.
#[derive(Debug)]
pub struct Payload {
    format: Format,
    response: Response<Body>,
}

impl Payload {
    /// The HTTP status of the response.
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    /// The response it carries.
    pub fn response(&self) -> &Response<Body> {
        &self.response
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Serialises `{"statusCode", "headers", ["multiValueHeaders",] "body",
        // "isBase64Encoded"}` straight from the response: no intermediate JSON value.
        struct Single<'a>(&'a HeaderMap);
        struct Multi<'a>(&'a HeaderMap);
        fn text(value: &HeaderValue) -> Cow<'_, str> {
            String::from_utf8_lossy(value.as_bytes())
        }
        impl Serialize for Single<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(
                    self.0
                        .iter()
                        .map(|(name, value)| (name.as_str(), text(value))),
                )
            }
        }
        impl Serialize for Multi<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_map(self.0.keys().map(|name| {
                    (
                        name.as_str(),
                        self.0.get_all(name).iter().map(text).collect::<Vec<_>>(),
                    )
                }))
            }
        }
        let headers = self.response.headers();
        let (body, base64) = match self.response.body() {
            Body::Text(text) => (Cow::Borrowed(text.as_str()), false),
            Body::Binary(bytes) => (Cow::Owned(STANDARD.encode(bytes)), true),
            _ => (Cow::Borrowed(""), false),
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("statusCode", &self.status())?;
        map.serialize_entry("headers", &Single(headers))?;
        if self.format == Format::V1 {
            map.serialize_entry("multiValueHeaders", &Multi(headers))?;
        }
        map.serialize_entry("body", &body)?;
        map.serialize_entry("isBase64Encoded", &base64)?;
        map.end()
    }
}

impl Payload {
    /// A delivery's disposition as the response payload of an event in `format`.
    pub(super) fn of(format: Format, disposition: Disposition) -> Self {
        Self {
            format,
            response: disposition.into_response().map(Body::Text),
        }
    }
}

/// The answer to an SQS event: the messages that were not applied, to be received again
/// (Lambda's partial batch response, `ReportBatchItemFailures`).
#[derive(Debug, Default, Serialize)]
pub struct BatchResponse {
    #[serde(rename = "batchItemFailures")]
    failures: Vec<ItemFailure>,
}

#[derive(Debug, Serialize)]
struct ItemFailure {
    #[serde(rename = "itemIdentifier")]
    item_identifier: String,
}

impl BatchResponse {
    fn fail(&mut self, message_id: &str) {
        self.failures.push(ItemFailure {
            item_identifier: message_id.to_owned(),
        });
    }

    /// The answer naming `again`, the message ids to receive again.
    pub(crate) fn receive_again<'a>(again: impl IntoIterator<Item = &'a str>) -> Self {
        let mut response = Self::default();
        for id in again {
            response.fail(id);
        }
        response
    }

    /// Every record of a batch that cannot be read failed: each id that can be named, or,
    /// with none, the whole batch, through the one answer Lambda documents as a complete
    /// failure of a partial batch response, an empty item identifier. Anything else that is
    /// not a partial batch response (an API Gateway answer, say) Lambda takes as a complete
    /// success, deleting what was never applied.
    pub(crate) fn all_failed(ids: &[String]) -> Self {
        let mut response = Self::default();
        if ids.is_empty() {
            response.fail("");
        }
        for id in ids {
            response.fail(id);
        }
        response
    }

    /// The message ids reported as failed.
    pub fn failed(&self) -> impl Iterator<Item = &str> {
        self.failures.iter().map(|f| f.item_identifier.as_str())
    }
}

/// The answer to one invocation.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Answer {
    /// An API Gateway response payload.
    Http(Payload),
    /// A partial batch response to an SQS event.
    Batch(BatchResponse),
}
