//! The floor of the Lambda loop: a bare `lambda_runtime` function that reads the raw event and
//! answers a fixed 400, with nothing of claimonce in it. `lambda-loop` measures it beside the
//! receiver, so what a delivery costs is read against what the runtime's own loop costs.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::value::RawValue;

/// A fixed answer, as API Gateway takes it: what a rejected delivery looks like on the wire.
const ANSWER: &str = r#"{"statusCode":400,"headers":{"content-type":"application/problem+json"},"body":"{\"type\":\"about:blank\",\"status\":400}"}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let answer: Box<RawValue> = RawValue::from_string(ANSWER.to_owned())?;
    lambda_runtime::run(service_fn(|_: LambdaEvent<Box<RawValue>>| {
        let answer = answer.clone();
        async move { Ok::<_, Error>(answer) }
    }))
    .await
}
