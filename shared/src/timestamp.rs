//! Timestamps as PostgreSQL will read them: a signed event carrying one it refuses would fail
//! every retry with a 500, so providers check them before the database sees them.

/// The wall clock in whole Unix seconds (0 before 1970): what a signature's tolerance and a
/// recover function's window are measured against.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The longest timestamp accepted, in bytes: room for 38 fraction digits and an offset.
/// PostgreSQL refuses a date-time field longer than 128 bytes (`MAXDATELEN`: "invalid input
/// syntax", 22007), which a fraction of 130 digits is.
pub const MAX_RFC3339_LEN: usize = 64;

/// True for `YYYY-MM-DDTHH:MM:SS…` with a real calendar date and time and a zone offset of at
/// most 15:59 (PostgreSQL refuses a larger one: "time zone displacement out of range"), at
/// most [`MAX_RFC3339_LEN`] bytes, so PostgreSQL's cast to `timestamptz` cannot fail on it (a
/// failing cast would fail every retry).
pub fn is_rfc3339(s: &str) -> bool {
    if s.len() > MAX_RFC3339_LEN {
        return false;
    }
    let b = s.as_bytes();
    let num = |from: usize, to: usize| -> Option<u32> {
        s.get(from..to)
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))?
            .parse()
            .ok()
    };
    let sep = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(se)) = (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    ) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    let zone_ok = {
        // After the seconds: optional fraction, then Z or ±HH:MM.
        let rest = s.get(19..).unwrap_or("");
        let rest = match rest.strip_prefix('.') {
            Some(frac) => frac.trim_start_matches(|c: char| c.is_ascii_digit()),
            None => rest,
        };
        rest == "Z"
            || rest == "z"
            || (rest.len() == 6
                && (rest.starts_with('+') || rest.starts_with('-'))
                && rest
                    .get(1..3)
                    .and_then(|h| h.parse::<u32>().ok())
                    .is_some_and(|h| h < 16)
                && rest.get(3..4) == Some(":")
                && rest
                    .get(4..6)
                    .and_then(|m| m.parse::<u32>().ok())
                    .is_some_and(|m| m < 60))
    };
    y >= 1
        && sep(4, b"-")
        && sep(7, b"-")
        && sep(10, b"Tt ")
        && sep(13, b":")
        && sep(16, b":")
        && (1..=days).contains(&d)
        && h < 24
        && mi < 60
        && se < 60
        && zone_ok
}

/// `seconds` since the Unix epoch as a UTC calendar date and time: (year, month, day, and the
/// second of the day). Days become a civil date in the proleptic Gregorian calendar's
/// 400-year eras, after H. Hinnant's `civil_from_days`; negative times work too.
pub(crate) fn civil(seconds: i64) -> (i64, i64, i64, i64) {
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, of_day)
}

/// RFC 3339 (UTC, `Z`) for `seconds` since the Unix epoch, for a sender that sends integers;
/// `None` outside years 1 to 9999.
pub fn rfc3339_from_unix(seconds: i64) -> Option<String> {
    let mut text = String::with_capacity(20);
    push_date_time(&mut text, seconds).then(|| {
        text.push('Z');
        text
    })
}

/// Appends `seconds` since the Unix epoch as RFC 3339's UTC date and time of day,
/// `YYYY-MM-DDTHH:MM:SS`, with no zone; false, with nothing appended, outside years 1 to 9999.
/// Written digit by digit: every log line has one, and `format!`'s padded fields cost six times
/// as much.
pub(crate) fn push_date_time(text: &mut String, seconds: i64) -> bool {
    let (year, month, day, of_day) = civil(seconds);
    if !(1..=9999).contains(&year) {
        return false;
    }
    let mut put = |n: i64, width: u32, after: char| {
        push_digits(text, n, width);
        text.push(after);
    };
    put(year, 4, '-');
    put(month, 2, '-');
    put(day, 2, 'T');
    put(of_day / 3600, 2, ':');
    put(of_day % 3600 / 60, 2, ':');
    push_digits(text, of_day % 60, 2);
    true
}

/// Appends the last `width` decimal digits of `n` (not negative), zeros in front.
pub(crate) fn push_digits(text: &mut String, n: i64, width: u32) {
    for place in (0..width).rev() {
        let digit = n / 10_i64.pow(place) % 10;
        text.push(char::from(b'0' + u8::try_from(digit).unwrap_or(0)));
    }
}

/// Seconds since the Unix epoch of an RFC 3339 date-time that [`is_rfc3339`] accepts (the
/// fraction dropped, the offset applied); `None` for anything else. How the recover functions
/// read a sender's `delivered_at`.
pub fn unix_from_rfc3339(s: &str) -> Option<i64> {
    if !is_rfc3339(s) {
        return None;
    }
    let num = |from: usize, to: usize| s.get(from..to)?.parse::<i64>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let of_day = num(11, 13)? * 3600 + num(14, 16)? * 60 + num(17, 19)?;
    // Days from the civil date, the inverse of `civil` (H. Hinnant's `days_from_civil`).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let zone = s.get(s.len().checked_sub(6)?..)?;
    let offset = if zone.starts_with('+') || zone.starts_with('-') {
        let minutes = num(s.len() - 5, s.len() - 3)? * 60 + num(s.len() - 2, s.len())?;
        if zone.starts_with('-') {
            -minutes * 60
        } else {
            minutes * 60
        }
    } else {
        0
    };
    Some(days * 86_400 + of_day - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_postgres_would_refuse_are_not_passed_on() {
        for ok in [
            "2024-11-22T23:41:12.126Z",
            "2024-02-29T00:00:00+00:00",
            "2024-11-22 23:41:11.894719+00:00",
            "2024-11-22T23:41:11-15:59",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-11-22T24:00:00Z",
            "2024-11-22",
            "yesterday",
            "2024-11-22T23:41:12+0100",
            "2024-11-22T23:41:12+16:00",
            "2024-11-22T23:41:12.5-23:59",
            "",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
        // The fraction PostgreSQL reads is bounded by the length of the whole field: 130
        // digits are refused there (22007), so here too; 38 digits with an offset fit.
        let digits = |n: usize| "1".repeat(n);
        assert!(is_rfc3339(&format!(
            "2026-11-29T10:00:00.{}+05:30",
            digits(38)
        )));
        assert!(!is_rfc3339(&format!(
            "2026-11-29T10:00:00.{}+05:30",
            digits(39)
        )));
        assert!(!is_rfc3339(&format!(
            "2026-11-29T10:00:00.{}Z",
            digits(130)
        )));
    }

    #[test]
    fn unix_seconds_become_the_calendar_date() {
        assert_eq!(
            rfc3339_from_unix(0).as_deref(),
            Some("1970-01-01T00:00:00Z")
        );
        assert_eq!(
            rfc3339_from_unix(951_782_400).as_deref(),
            Some("2000-02-29T00:00:00Z")
        );
        assert_eq!(
            rfc3339_from_unix(1_700_000_000).as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
        assert_eq!(
            rfc3339_from_unix(-1).as_deref(),
            Some("1969-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339_from_unix(i64::MAX), None);
        for s in [
            0,
            951_782_400,
            1_700_000_000,
            253_402_300_799,
            -62_135_596_800,
        ] {
            let text = rfc3339_from_unix(s).expect("in range");
            assert!(is_rfc3339(&text));
            assert_eq!(unix_from_rfc3339(&text), Some(s), "{text}");
        }
        assert_eq!(
            unix_from_rfc3339("2023-11-14T23:13:20.999+01:00"),
            Some(1_700_000_000)
        );
        assert_eq!(
            unix_from_rfc3339("2023-11-14T20:13:20-02:00"),
            Some(1_700_000_000)
        );
        assert_eq!(unix_from_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(unix_from_rfc3339("yesterday"), None);
    }
}
