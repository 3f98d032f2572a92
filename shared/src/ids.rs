//! The ids a ledger row and a log line hold: a leaf, used by the verification schemes (a signed
//! message id), the providers (the ledger key) and the receiver alike.

use std::fmt;

use crate::response::{Problem, Rejection};

/// Longest event id accepted as a ledger key, in bytes.
pub const MAX_EVENT_ID_LEN: usize = 255;

/// An id a ledger row or a log line can hold: 1 to [`MAX_EVENT_ID_LEN`] bytes, no NUL
/// (PostgreSQL's `text` cannot store one). Every event id, message id and delivery id is one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId(String);

impl EventId {
    /// Checks `id`; a refusal is a 400 (`invalid-payload`): a signed event whose id cannot be
    /// stored can never succeed, so it must not be answered 500 and retried forever.
    pub fn new(id: impl Into<String>) -> Result<Self, Rejection> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_EVENT_ID_LEN || id.contains('\0') {
            return Err(Rejection::new(
                Problem::InvalidPayload,
                "the event id is empty, longer than 255 bytes or holds a NUL",
            ));
        }
        Ok(Self(id))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_is_one_to_255_bytes_without_nul() {
        assert!(EventId::new("evt_1").is_ok());
        assert!(EventId::new("x".repeat(255)).is_ok());
        for bad in [String::new(), "x".repeat(256), "evt\0".to_owned()] {
            assert_eq!(
                EventId::new(bad).expect_err("refused").problem,
                Problem::InvalidPayload
            );
        }
    }
}
