//! What an SQS message body may hold, in one place: the characters SendMessage takes (`#x9 |
//! #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF`, the SQS API reference).
//! A body with any other character, or bytes that are not UTF-8, would be refused
//! (`InvalidMessageContents`) or altered, and a consumer checking a signature over it would
//! fail. Such a body travels base64, with the message attribute [`ENCODING_ATTRIBUTE`] set to
//! `base64`; every reader decodes it with [`decode`] before anything else. The spill queues and
//! the outbox relay both write through [`encode`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The message attribute that names a body's encoding (`base64`); absent, the body is the text.
pub const ENCODING_ATTRIBUTE: &str = "claimonce-body-encoding";

/// True when SQS takes `body` as it is: UTF-8 of the characters SendMessage allows.
pub fn is_text(body: &[u8]) -> bool {
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}'
    };
    std::str::from_utf8(body).is_ok_and(|text| text.chars().all(allowed))
}

/// The message body for `body`, and whether it is base64: the text itself when SQS takes every
/// character of it, base64 otherwise.
pub fn encode(body: &[u8]) -> (String, bool) {
    match std::str::from_utf8(body) {
        Ok(text) if is_text(body) => (text.to_owned(), false),
        _ => (STANDARD.encode(body), true),
    }
}

/// How many bytes [`encode`] makes of `body`.
pub fn encoded_len(body: &[u8]) -> usize {
    if is_text(body) {
        body.len()
    } else {
        body.len().div_ceil(3) * 4
    }
}

/// The bytes a message body stands for, given its [`ENCODING_ATTRIBUTE`] value.
pub fn decode(body: &str, encoding: Option<&str>) -> Result<Vec<u8>, &'static str> {
    match encoding {
        None => Ok(body.as_bytes().to_vec()),
        Some("base64") => STANDARD
            .decode(body.as_bytes())
            .map_err(|_| "the body is not base64"),
        Some(_) => Err("an unknown body encoding"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_sqs_refuses_is_sent_as_base64_and_other_text_as_is() {
        assert_eq!(
            encode(b"{\"k\":\"v\"}\n"),
            ("{\"k\":\"v\"}\n".into(), false)
        );
        for refused in [
            &b"\x00"[..],
            "\u{FFFE}".as_bytes(),
            "\u{FFFF}".as_bytes(),
            b"\xff",
        ] {
            let (text, base64) = encode(refused);
            assert!(base64, "{refused:?}");
            assert_eq!(decode(&text, Some("base64")).as_deref(), Ok(refused));
        }
        assert!(!encode("caf\u{e9} \u{1F600}\u{D7FF}\u{E000}".as_bytes()).1);
        for body in [&b"{}"[..], "\u{FFFF}\u{FFFE}x".as_bytes(), b"\x00\x01"] {
            assert_eq!(encoded_len(body), encode(body).0.len(), "{body:?}");
        }
        assert_eq!(decode("x", Some("gzip")), Err("an unknown body encoding"));
        assert_eq!(
            decode("not base64!", Some("base64")),
            Err("the body is not base64")
        );
    }
}
