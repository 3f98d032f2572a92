#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/.

Run from anywhere: python3 fuzz/make_seeds.py. The seeds are the sample events in events/,
the fixed vectors of the unit tests, and a few malformed inputs, laid out the way each target
splits its input (see the comment at the top of each fuzz_targets/*.rs). Valid signatures are
made for the targets' fixed clocks, so the fuzzer starts from inputs that reach the accept
path, not only the many ways to be refused.
"""

import base64
import hashlib
import hmac
import json
import pathlib
import shutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"

# timestamp_v1 target: its secrets and clock (fuzz_targets/timestamp_v1.rs).
TV1_SECRET = "whsec_test_secret"
TV1_NOW = 1_700_000_000
TV1_BODY = b'{\n  "id": "evt_test_webhook",\n  "object": "event"\n}'
TV1_VECTOR = "4f1cd7feda9826e746b7d482c4badebb657398df1099e1046364f6196a230150"

# standard_webhooks target (fuzz_targets/standard_webhooks.rs).
SW_VECTORS = [
    ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330,
     b'{"test": 2432232314}', "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
    ("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1_649_367_553,
     b'{"email":"test@example.com","username":"test_user"}',
     "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="),
]
SW_NOW = 1_614_265_335
RESEND_SECRET = "whsec_Y2xhaW1vbmNlLWxvY2FsLWRldmVsb3BtZW50LWtleSE="

WEBHOOK = b"\x00"  # control byte: every header in the webhook-* spelling
SVIX = b"\x07"  # every header in the svix-* spelling


def tv1_sign(secret: str, t: int, body: bytes) -> str:
    return hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()


def sw_sign(secret: str, msg_id: str, t: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{t}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def events():
    """(name, provider, parsed event, body bytes, raw event text) for each sample event."""
    for path in sorted((ROOT / "events").glob("*/*.json")):
        raw = path.read_text()
        event = json.loads(raw)
        body = event["body"].encode()
        if event.get("isBase64Encoded"):
            body = base64.b64decode(body)
        yield path.stem, path.parent.name, event, body, raw


def write(target: str, name: str, data: bytes) -> None:
    (CORPUS / target).mkdir(parents=True, exist_ok=True)
    (CORPUS / target / name).write_bytes(data)


def timestamp_v1() -> None:
    t = "timestamp_v1"
    write(t, "vector", f"t={TV1_NOW},v1={TV1_VECTOR}\n".encode() + TV1_BODY)
    other = "0" * 64
    write(t, "rotation-list",
          f"t={TV1_NOW}, v0={TV1_VECTOR}, v1={other}, v1={TV1_VECTOR}, x1=zz\n".encode() + TV1_BODY)
    write(t, "stale", f"t={TV1_NOW + 301},v1={tv1_sign(TV1_SECRET, TV1_NOW + 301, TV1_BODY)}\n"
          .encode() + TV1_BODY)
    for name, provider, event, body, _ in events():
        if provider != "stripe" or name.endswith("rest-v1"):
            continue
        write(t, f"event-{name}", f"t={TV1_NOW},v1={tv1_sign(TV1_SECRET, TV1_NOW, body)}\n"
              .encode() + body)
    malformed = {
        "no-timestamp": f"v1={TV1_VECTOR}",
        "timestamp-not-integer": f"t=abc,v1={TV1_VECTOR}",
        "two-timestamps": f"t={TV1_NOW},t={TV1_NOW},v1={TV1_VECTOR}",
        "no-v1": f"t={TV1_NOW}",
        "only-v0": f"t={TV1_NOW},v0={TV1_VECTOR}",
        "upper-hex": f"t={TV1_NOW},v1={TV1_VECTOR.upper()}",
        "separators": ",,,=,=",
    }
    for name, header in malformed.items():
        write(t, f"malformed-{name}", header.encode() + b"\n" + TV1_BODY)


def standard_webhooks() -> None:
    t = "standard_webhooks"

    def seed(control: bytes, msg_id: str, ts, sig: str, body: bytes) -> bytes:
        return control + f"{msg_id}\n{ts}\n{sig}\n".encode() + body

    secret, msg_id, ts, body, sig = SW_VECTORS[0]
    write(t, "vector-webhook", seed(WEBHOOK, msg_id, ts, sig, body))
    write(t, "vector-svix", seed(SVIX, msg_id, ts, sig, body))
    s = sig.removeprefix("v1,")
    write(t, "vector-list", seed(WEBHOOK, msg_id, ts, f"v1a,{s} v1,AAAA v2,{s} v1,{s}", body))
    write(t, "vector-mixed-spelling", seed(b"\x01", msg_id, ts, sig, body))
    write(t, "vector-no-signature", seed(b"\x20", msg_id, ts, sig, body))
    write(t, "vector-repeated-signature", seed(b"\x40", msg_id, ts, sig, body))
    write(t, "vector-wrong-id", seed(WEBHOOK, "msg_other", ts, sig, body))
    write(t, "vector-bad-timestamp", seed(SVIX, msg_id, "12x", sig, body))
    _, msg_id1, ts1, body1, sig1 = SW_VECTORS[1]
    write(t, "vector2-stale", seed(SVIX, msg_id1, ts1, sig1, body1))
    for bad in ["v1,not base64!", "v1", "", "garbage", "v1,AAAA"]:
        name = "".join(c if c.isalnum() else "-" for c in bad) or "empty"
        write(t, f"malformed-{name}", seed(SVIX, msg_id, ts, bad, body))
    for name, provider, event, body, _ in events():
        if provider != "resend":
            continue
        h = event["headers"]
        write(t, f"event-{name}-as-sent",
              seed(SVIX, h["svix-id"], h["svix-timestamp"], h["svix-signature"], body))
        write(t, f"event-{name}",
              seed(WEBHOOK, h["svix-id"], SW_NOW, sw_sign(RESEND_SECRET, h["svix-id"], SW_NOW, body),
                   body))


def apigw_event() -> None:
    t = "apigw_event"
    sample = None
    for name, provider, event, body, raw in events():
        write(t, f"{provider}-{name}", raw.encode())
        if name == "email.delivered":
            sample = event
    write(t, "not-json", b"not json")
    write(t, "empty-object", b"{}")
    write(t, "array", b"[]")
    get = json.loads(json.dumps(sample))
    get["requestContext"]["http"]["method"] = "GET"
    write(t, "method-get", json.dumps(get).encode())
    bad64 = json.loads(json.dumps(sample))
    bad64["isBase64Encoded"] = True
    bad64["body"] = "!!not base64!!"
    write(t, "base64-flag-bad-body", json.dumps(bad64).encode())
    good64 = json.loads(json.dumps(sample))
    good64["isBase64Encoded"] = True
    good64["body"] = base64.b64encode(sample["body"].encode()).decode()
    write(t, "base64-body", json.dumps(good64).encode())
    large = json.loads(json.dumps(sample))
    large["body"] = "x" * 4097  # just over the target's 4096-byte limit
    write(t, "body-too-large", json.dumps(large).encode())

    # Reduced crashes, kept as regression seeds: lambda_http 1.3.2's request conversion
    # (lambda_http::request::from_str, called by claimonce::lambda::read) panics on them.
    regressions = {
        # request.rs:553 Url::parse(..).unwrap(): EmptyHost (host from requestContext.domainName)
        "regression-v2-domain-name-empty-host":
            {"version": "2.0", "requestContext": {"domainName": "?", "http": {"method": "POST"}}},
        # request.rs:553: RelativeUrlWithoutBase (scheme from x-forwarded-proto)
        "regression-v2-forwarded-proto":
            {"version": "2.0", "rawPath": "/", "headers": {"host": "h", "x-forwarded-proto": "1"},
             "requestContext": {"http": {"method": "POST"}}},
        # request.rs:544 Url::parse("http://localhost{path}").unwrap(): InvalidPort
        "regression-v2-raw-path-port":
            {"version": "2.0", "rawPath": ":99999", "requestContext": {"http": {"method": "POST"}}},
        # request.rs:175 .expect("failed to build request"): InvalidUriChar in rawQueryString
        "regression-v2-raw-query-quote":
            {"version": "2.0", "rawPath": "/webhooks/stripe", "rawQueryString": 'a="b',
             "headers": {"host": "x.execute-api.us-east-1.amazonaws.com"},
             "requestContext": {"http": {"method": "POST"}}},
        # REST v1, request.rs:553: EmptyHost (Host header)
        "regression-v1-host-header":
            {"httpMethod": "POST", "path": "/", "headers": {"host": "?"},
             "requestContext": {"httpMethod": "POST"}},
    }
    for name, event in regressions.items():
        write(t, name, json.dumps(event, separators=(",", ":")).encode())
    # A body flagged base64 that is not, with the flag's key spelled with a JSON escape: a
    # plain-text search for "isBase64Encoded" misses it, serde does not, and lambda_http then
    # panics decoding the body (aws_lambda_events encodings/http.rs:89).
    write(t, "regression-base64-flag-escaped-key",
          b'{"version":"2.0","isBase64\\u0045ncoded":true,"body":"!!","rawPath":"/webhooks/stripe",'
          b'"requestContext":{"http":{"method":"POST"}}}')


def hub_signature() -> None:
    t = "hub_signature"
    # GitHub's published example, and the same signature with a changed body.
    sig = b"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    write(t, "github-vector", sig + b"\nHello, World!")
    write(t, "github-vector-other-body", sig + b"\nHello, World?")
    write(t, "sha1", b"sha1=0123456789abcdef0123456789abcdef01234567\n{}")


def signed_bodies() -> None:
    t = "signed_bodies"
    for name, provider, event, body, _ in events():
        if not name.endswith("rest-v1"):
            write(t, f"{provider}-{name}", body)
    # Bodies from the providers' unit tests.
    write(t, "stripe-extra-fields",
          b'{"id":"evt_1","object":"event","type":"invoice.paid","created":1,"livemode":false,'
          b'"data":{"object":{"id":"in_1","object":"invoice","customer":"cus_1",'
          b'"amount_paid":1500,"customer_email":null,"lines":{"data":[]}}}}')
    write(t, "stripe-guest-checkout",
          b'{"id":"evt_2","object":"event","type":"checkout.session.completed","created":1,'
          b'"data":{"object":{"customer":null,"customer_details":null}}}')
    write(t, "stripe-expanded-customer",
          b'{"id":"evt_4","object":"event","type":"customer.subscription.deleted","created":2,'
          b'"data":{"object":{"id":"sub_1","customer":{"id":"cus_1"},"status":"canceled"}}}')
    write(t, "stripe-not-an-event",
          b'{"id":"x","object":"customer","type":"t","created":1,"data":{"object":{}}}')
    write(t, "resend-contact",
          b'{"type":"contact.created","created_at":"2024-11-22T23:41:12.126Z",'
          b'"data":{"id":"e169aa45","email":"x@example.com"}}')
    write(t, "resend-complained-single-to",
          b'{"type":"email.complained","created_at":"2024-02-29 00:00:00+00:00",'
          b'"data":{"email_id":"e1","to":" Someone@Example.com "}}')
    write(t, "resend-data-not-object", b'{"type":"email.sent","data":[1]}')
    write(t, "not-json", b"not json")
    write(t, "invalid-utf8", b"\xff")


def main() -> None:
    shutil.rmtree(CORPUS, ignore_errors=True)
    timestamp_v1()
    standard_webhooks()
    apigw_event()
    hub_signature()
    signed_bodies()


if __name__ == "__main__":
    main()
