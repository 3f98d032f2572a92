//! The one check every header a scheme or a provider reads passes: present at most once,
//! visible ASCII, and no longer than the schemes' limit. A leaf: the verification schemes
//! and the providers' unsigned headers both use it.

use http::HeaderMap;

/// Longest header value any scheme reads. Real signature headers carry a timestamp and two or
/// three signatures; a longer one is malformed, and refusing it bounds the work an attacker
/// can ask for.
pub const MAX_HEADER_LEN: usize = 4096;

/// Why a header could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderFault {
    /// The header appears more than once.
    Repeated,
    /// Its value is not visible ASCII.
    NotAscii,
    /// Its value is longer than [`MAX_HEADER_LEN`].
    TooLong,
}

/// The one value of header `name`, trimmed: `Ok(None)` when absent, a [`HeaderFault`] when it
/// appears more than once, is not ASCII or is longer than [`MAX_HEADER_LEN`]. Every scheme and
/// every unsigned header a provider reads goes through this one check.
pub fn one_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, HeaderFault> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(HeaderFault::Repeated);
    }
    if value.len() > MAX_HEADER_LEN {
        return Err(HeaderFault::TooLong);
    }
    value
        .to_str()
        .map(|v| Some(v.trim()))
        .map_err(|_| HeaderFault::NotAscii)
}
