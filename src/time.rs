//! The clock and how times are written. Stored times are Unix seconds (`i64`), or Unix
//! milliseconds where ordering within a second matters (the event outbox, refresh leases); the API
//! and webhooks speak RFC 3339; pages and the CLI show `YYYY-MM-DD HH:MM:SS`.
//!
//! (Named like the `time` crate it wraps: elsewhere in this crate `time::` is that crate and
//! `crate::time::` is this module.)

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Seconds since the Unix epoch. Read on every token fetch: straight from the system clock,
/// without the calendar date `OffsetDateTime::now_utc` works out as well.
pub fn now() -> i64 {
    since_epoch().as_secs() as i64
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    since_epoch().as_millis() as i64
}

/// A clock set before 1970 reads as the epoch itself.
fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Today's date, UTC.
pub fn today() -> time::Date {
    OffsetDateTime::now_utc().date()
}

/// `unix` (seconds) as RFC 3339 (`2026-12-03T11:30:15Z`); empty if out of range.
pub fn rfc3339(unix: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// `unix` (seconds) for people: `2026-12-03 11:30:15`, UTC.
pub fn readable(unix: i64) -> String {
    rfc3339(unix).replace('T', " ").replace('Z', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(readable(1_764_761_415), "2025-12-03 11:30:15");
        assert_eq!(rfc3339(i64::MAX), "");
        assert!((now_ms() / 1000 - now()).abs() <= 1);
    }
}
