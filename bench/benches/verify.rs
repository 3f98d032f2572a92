//! Verification at 1, 16 and 256 KiB beside a bare HMAC-SHA256 of the same bytes (the limit
//! for verification), and parsing of real-sized event bodies.

use std::hint::black_box;

use claimonce::prelude::Verify;
use claimonce::verify::standard_webhooks::{self, StandardWebhooks};
use claimonce::verify::timestamp_v1::{self, TimestampV1};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

const STRIPE_SECRET: &str = "whsec_test_secret";
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const T: u64 = 1_700_000_000;

fn body(size: usize) -> Vec<u8> {
    // JSON-looking bytes of the given size.
    let mut b = b"{\"data\":\"".to_vec();
    b.resize(size - 2, b'x');
    b.extend_from_slice(b"\"}");
    b
}

fn verification(c: &mut Criterion) {
    for (label, size) in [("1KiB", 1024), ("16KiB", 16 * 1024), ("256KiB", 256 * 1024)] {
        let body = body(size);
        let mut group = c.benchmark_group(format!("verify/{label}"));
        group.throughput(Throughput::Bytes(size as u64));

        group.bench_function("bare_hmac_sha256", |b| {
            b.iter(|| {
                let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(STRIPE_SECRET.as_bytes())
                    .expect("key");
                mac.update(black_box(&body));
                black_box(mac.finalize().into_bytes())
            })
        });

        let mut headers = HeaderMap::new();
        let sig = timestamp_v1::sign(STRIPE_SECRET, T, &body);
        headers.insert(
            "stripe-signature",
            format!("t={T},v1={sig}").parse().expect("header"),
        );
        let stripe = TimestampV1::new("stripe-signature", &[STRIPE_SECRET], 300).expect("secret");
        group.bench_function("timestamp_v1", |b| {
            b.iter(|| {
                black_box(stripe.verify(black_box(&headers), black_box(&body), T)).expect("valid")
            })
        });

        let mut sw_headers = HeaderMap::new();
        let sw_sig = standard_webhooks::sign(SW_SECRET, "msg_1", T, &body).expect("secret");
        sw_headers.insert("webhook-id", "msg_1".parse().expect("h"));
        sw_headers.insert("webhook-timestamp", T.to_string().parse().expect("h"));
        sw_headers.insert("webhook-signature", sw_sig.parse().expect("h"));
        let sw = StandardWebhooks::new(&[SW_SECRET], 300).expect("secret");
        group.bench_function("standard_webhooks", |b| {
            b.iter(|| {
                black_box(sw.verify(black_box(&sw_headers), black_box(&body), T)).expect("valid")
            })
        });
        group.finish();
    }
}

fn parsing(c: &mut Criterion) {
    let checkout = claimonce_bench::checkout("evt_bench", "cus_bench");
    let invoice = claimonce_bench::invoice("evt_bench", "cus_bench", 2000);
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Bytes(checkout.len() as u64));
    group.bench_function("stripe_checkout_session_completed", |b| {
        b.iter(|| black_box(stripe_webhook::parse_event(black_box(&checkout))).expect("event"))
    });
    group.throughput(Throughput::Bytes(invoice.len() as u64));
    group.bench_function("stripe_invoice_paid", |b| {
        b.iter(|| black_box(stripe_webhook::parse_event(black_box(&invoice))).expect("event"))
    });
    let resend = br#"{"type":"email.bounced","created_at":"2026-11-29T19:00:00.126Z","data":{"broadcast_id":null,"created_at":"2026-11-29T18:59:58.894719+00:00","email_id":"4ef9a417-02e9-4d39-ad75-9611e0fcc33c","from":"Acme <onboarding@resend.dev>","to":["jenny.rosen@example.com"],"subject":"Welcome to Acme","bounce":{"message":"mailbox does not exist","subType":"General","type":"Permanent"}}}"#;
    let message_id = claimonce::prelude::EventId::new("msg_1").expect("an id");
    group.throughput(Throughput::Bytes(resend.len() as u64));
    group.bench_function("resend_email_bounced", |b| {
        b.iter(|| {
            black_box(resend_webhook::parse_event(
                Some(&message_id),
                black_box(resend),
            ))
            .expect("event")
        })
    });
    group.finish();
}

criterion_group!(benches, verification, parsing, handler);
criterion_main!(benches);

/// The handler's own work per delivery outside the database: admitting a request (verify,
/// parse, hash) and building its response.
fn handler(c: &mut Criterion) {
    use claimonce::db::{Database, Settings, Timeouts};
    use claimonce::log::Log;
    use claimonce::{Disposition, Limits, Receiver};
    use std::time::Duration;

    let body = claimonce_bench::checkout("evt_bench", "cus_bench");
    let sig = timestamp_v1::sign(STRIPE_SECRET, T, &body);
    let event = serde_json::json!({
        "version": "2.0", "routeKey": "POST /webhooks/stripe", "rawPath": "/webhooks/stripe",
        "rawQueryString": "", "headers": {"content-type": "application/json", "stripe-signature": format!("t={T},v1={sig}")},
        "requestContext": {"accountId": "1", "apiId": "b", "domainName": "b", "domainPrefix": "b",
            "http": {"method": "POST", "path": "/webhooks/stripe", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "Stripe/1.0"},
            "requestId": "r", "routeKey": "POST /webhooks/stripe", "stage": "$default", "time": "", "timeEpoch": 0},
        "body": String::from_utf8_lossy(&body), "isBase64Encoded": false
    })
    .to_string();
    let t = Duration::from_secs(1);
    let settings = Settings::from_url(
        "postgres://u@127.0.0.1:1/x?sslmode=disable",
        None,
        Timeouts::new(t, t),
    )
    .expect("settings");
    let stripe = stripe_webhook::Stripe::new(&[STRIPE_SECRET], u64::MAX / 4).expect("secret");
    let receiver = Receiver::new(
        stripe,
        Database::new(settings),
        Limits::default(),
        Log::discard(),
    );
    let mut group = c.benchmark_group("handler");
    let request = lambda_http::request::from_str(&event).expect("event");
    group.bench_function("admit_verify_parse_hash", |b| {
        b.iter(|| black_box(receiver.admit(black_box(&request), T)).expect("admitted"))
    });
    group.bench_function("response", |b| {
        b.iter(|| black_box(Disposition::Processed.into_response()))
    });
    // The whole path of a request refused before the database, from the raw event to the
    // response payload: reading the event and the log line (a wrong method), and those plus
    // the signature check (a tampered body).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let wrong_method = event.replacen(r#""method":"POST""#, r#""method":"GET""#, 1);
    let tampered = event.replacen("jenny.rosen", "jenny.rosex", 1);
    for (name, raw, status) in [
        ("event_refused_by_method", &wrong_method, 405),
        ("event_refused_by_signature", &tampered, 400),
    ] {
        assert_ne!(raw, &event, "{name}: the event was not changed");
        assert_eq!(
            runtime
                .block_on(claimonce::lambda::handle_event(&receiver, raw))
                .status(),
            status,
            "{name}"
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    runtime.block_on(claimonce::lambda::handle_event(&receiver, black_box(raw))),
                )
            })
        });
    }
    group.finish();
}
