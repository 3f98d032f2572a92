//! What `sam local` asks of the function binaries beyond what Lambda does: its emulator stops
//! after a single invocation, and the function must take that as the end of its environment,
//! not report a failure. (The SAM CLI runs themselves are `scripts/sam-local check`.)

use std::process::Stdio;
use std::time::Duration;

use claimonce_local::runtime_api::RuntimeApi;
use claimonce_local::sign::resign;
use claimonce_tests::TestDb;
use claimonce_tests::lambda::{binaries, function, sample_event};
use claimonce_tests::sign::now;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one HTTP/1.1 request (head and `content-length` body) from `stream`.
async fn read_request(stream: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the function closed the connection");
        data.extend_from_slice(chunk.get(..n).unwrap_or_default());
        let text = String::from_utf8_lossy(&data).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= length {
                return head.to_owned();
            }
        }
    }
}

#[tokio::test]
async fn a_runtime_api_that_goes_away_after_an_invocation_ends_the_function_quietly() {
    let db = TestDb::new().await;
    let stripe = function("stripe");
    // A Runtime API that serves one invocation and then, like SAM CLI's emulator when the
    // container is stopped, closes the connection on which the function asks for the next.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let mut event = sample_event("stripe/invoice.paid.json");
    resign(&mut event, now()).expect("sign");
    let event = event.to_string();
    let emulator = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let next = read_request(&mut stream).await;
        assert!(
            next.starts_with("GET /2018-06-01/runtime/invocation/next"),
            "{next}"
        );
        let deadline = claimonce_tests::sign::now() * 1000 + 30_000;
        stream
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     lambda-runtime-aws-request-id: req-1\r\nlambda-runtime-deadline-ms: {deadline}\r\n\
                     lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:123456789012:function:stripe\r\n\
                     content-length: {}\r\n\r\n{event}",
                    event.len()
                )
                .as_bytes(),
            )
            .await
            .expect("send the invocation");
        let response = read_request(&mut stream).await;
        assert!(
            response.starts_with("POST /2018-06-01/runtime/invocation/req-1/response"),
            "{response}"
        );
        stream
            .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            .await
            .expect("accept the response");
        // The next poll arrives on this connection (or a new one); it is never answered.
        let next = read_request(&mut stream).await;
        assert!(
            next.starts_with("GET /2018-06-01/runtime/invocation/next"),
            "{next}"
        );
        drop(stream);
        drop(listener);
    });

    let api = RuntimeApi::start(stripe.binary).await.expect("runtime api");
    let url = db.function_url_as("stripe");
    let mut command = api.command(
        &binaries().await.join(stripe.binary),
        &[
            ("DATABASE_URL", url.as_str()),
            (stripe.secret_var, stripe.dev_secret),
            ("AWS_LAMBDA_RUNTIME_API", address.as_str()),
        ],
    );
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command.spawn().expect("spawn stripe-webhook");
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the function exits once its Runtime API is gone")
        .expect("wait");
    emulator
        .await
        .expect("the emulator saw one invocation and the next poll");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        !stderr.contains("Error") && !stdout.contains("\"level\":\"ERROR\""),
        "an error line: {stdout}\n{stderr}"
    );
    assert!(stdout.contains("\"disposition\":\"processed\""), "{stdout}");
    assert!(
        stdout.contains("the Lambda Runtime API went away; exiting")
            && stdout.contains("\"invocations\":1"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_runtime_api_that_fails_before_any_invocation_is_still_an_error() {
    // Nothing listens on this address: the runtime cannot fetch its first invocation.
    let api = RuntimeApi::start("stripe-webhook")
        .await
        .expect("runtime api");
    let port = claimonce_local::postgres::free_loopback_port().expect("port");
    let stripe = function("stripe");
    let db = TestDb::new().await;
    let mut command = api.command(
        &binaries().await.join(stripe.binary),
        &[
            ("DATABASE_URL", db.function_url()),
            (stripe.secret_var, stripe.dev_secret),
            ("AWS_LAMBDA_RUNTIME_API", &format!("127.0.0.1:{port}")),
        ],
    );
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        command.spawn().expect("spawn").wait_with_output(),
    )
    .await
    .expect("the function exits")
    .expect("wait");
    assert!(!output.status.success(), "{:?}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout
            .lines()
            .any(|line| line.contains("\"level\":\"ERROR\"")
                && line.contains("the Lambda Runtime API failed before any invocation")),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
