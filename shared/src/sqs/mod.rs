//! Amazon SQS as the functions meet it: the records Lambda's event source mapping hands a
//! function, the partial batch response it answers with, a queue named by its URL or its ARN,
//! the bodies SQS can carry ([`body`]) and the proof that a record came off a queue
//! (`receipt`). The spill queue's drain and EventBridge's event queue both read through it.

pub mod body;
pub(crate) mod receipt;

use serde::Deserialize;

/// One record of an SQS event, as Lambda's event source mapping hands it over: the parts the
/// drain reads.
#[derive(Debug, Deserialize)]
pub(crate) struct Record {
    #[serde(rename = "messageId")]
    pub(crate) message_id: String,
    /// The handle SQS issued for this receive of the message: only SQS can tell a real one
    /// ([`receipt`]). Never logged.
    #[serde(rename = "receiptHandle", default)]
    pub(crate) receipt_handle: String,
    #[serde(default)]
    body: String,
    #[serde(rename = "messageAttributes", default)]
    attributes: std::collections::HashMap<String, Attribute>,
    #[serde(rename = "attributes", default)]
    system: System,
    /// The queue it came from, as Lambda's event source mapping says.
    #[serde(rename = "eventSourceARN", default)]
    pub(crate) event_source_arn: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct System {
    #[serde(rename = "ApproximateReceiveCount", default)]
    receive_count: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Attribute {
    #[serde(rename = "stringValue", default)]
    string_value: Option<String>,
}

impl Record {
    /// The message's body, as SQS holds it.
    pub(crate) fn body(&self) -> &str {
        &self.body
    }

    /// The string value of the message attribute `name`.
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name)?.string_value.as_deref()
    }

    /// How many times SQS has handed this message out, this time included.
    pub(crate) fn receive_count(&self) -> u64 {
        self.system
            .receive_count
            .as_deref()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
    }
}

/// An SQS client made at its first use from the process's AWS configuration
/// (`AWS_ENDPOINT_URL_SQS` redirects it, to a VPC endpoint or a test), so that a function
/// that never calls SQS pays nothing for it, cold start included.
#[derive(Debug, Default)]
pub(crate) struct LazyClient(tokio::sync::OnceCell<aws_sdk_sqs::Client>);

impl LazyClient {
    /// The client, made now if this is its first use.
    pub(crate) async fn get(&self) -> &aws_sdk_sqs::Client {
        self.0
            .get_or_init(|| async {
                aws_sdk_sqs::Client::new(&crate::auth::aws_config().load().await)
            })
            .await
    }
}

/// A queue's account and name: what its URL (`https://<host>/<account>/<name>`) and its ARN
/// (`arn:<partition>:sqs:<region>:<account>:<name>`) have in common, so that a record's
/// `eventSourceARN` can be matched to a queue configured by URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueName {
    account: String,
    name: String,
}

impl QueueName {
    /// The account and name of the queue at `url`, the last two parts of its path.
    pub(crate) fn from_url(url: &str) -> Option<Self> {
        let path = url.split_once("://")?.1.split_once('/')?.1;
        let (account, name) = path.trim_end_matches('/').rsplit_once('/')?;
        let account = account.rsplit('/').next().unwrap_or(account);
        (!account.is_empty() && !name.is_empty() && !name.contains(':')).then(|| Self {
            account: account.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The account and name of the queue `arn` names; `None` for anything but an SQS ARN.
    pub(crate) fn from_arn(arn: &str) -> Option<Self> {
        match arn.split(':').collect::<Vec<_>>().as_slice() {
            ["arn", _partition, "sqs", _region, account, name]
                if !account.is_empty() && !name.is_empty() =>
            {
                Some(Self {
                    account: (*account).to_owned(),
                    name: (*name).to_owned(),
                })
            }
            _ => None,
        }
    }

    /// The AWS account that owns the queue.
    pub(crate) fn account(&self) -> &str {
        &self.account
    }

    /// True when `arn` names this queue.
    pub(crate) fn is(&self, arn: Option<&str>) -> bool {
        arn.and_then(Self::from_arn).as_ref() == Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_s_arn_matches_its_url_and_no_other_queue_s() {
        let own = QueueName::from_url("https://sqs.us-east-1.amazonaws.com/123456789012/app-q")
            .expect("a queue URL");
        assert_eq!(own.account(), "123456789012");
        assert!(own.is(Some("arn:aws:sqs:us-east-1:123456789012:app-q")));
        for other in [
            None,
            Some("arn:aws:sqs:us-east-1:123456789012:app-other"),
            Some("arn:aws:sqs:us-east-1:210987654321:app-q"),
            Some("arn:aws:sqs:us-east-1:123456789012:app-q:x"),
            Some("arn:aws:sns:us-east-1:123456789012:app-q"),
            Some("app-q"),
            Some(""),
        ] {
            assert!(!own.is(other), "{other:?}");
        }
        // moto's URLs have the same shape.
        let local = QueueName::from_url("http://127.0.0.1:5000/123456789012/q").expect("a URL");
        assert!(local.is(Some("arn:aws:sqs:us-east-1:123456789012:q")));
        for not_a_queue in [
            "not a url",
            "https://sqs.us-east-1.amazonaws.com/",
            "https://h/q",
        ] {
            assert!(QueueName::from_url(not_a_queue).is_none(), "{not_a_queue}");
        }
    }
}
