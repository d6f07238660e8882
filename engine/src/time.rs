//! Service time: a millisecond newtype, and RFC 3339 text for it.
//!
//! The engine never reads a clock. Every input carries its `now`, and timers are
//! deadlines in the same unit, so a run is a pure function of its inputs.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch, on the service clock (wall, sped-up or virtual).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub struct Millis(pub i64);

impl Millis {
    /// Milliseconds in a second: durations are written in these units, not as bare numbers.
    pub const SECOND: i64 = 1_000;
    /// Milliseconds in a minute.
    pub const MINUTE: i64 = 60 * Self::SECOND;
    /// Milliseconds in an hour.
    pub const HOUR: i64 = 60 * Self::MINUTE;
    /// Milliseconds in a day.
    pub const DAY: i64 = 24 * Self::HOUR;

    /// 2026-01-01T00:00:00Z: where a virtual clock starts unless told otherwise.
    pub const VIRTUAL_EPOCH: Millis = Millis(1_767_225_600_000);

    /// The time `ms` later (earlier when negative).
    pub fn plus_ms(self, ms: i64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// The UTC day it falls on, as days since 1970-01-01 (the ledger's history unit).
    pub fn day_number(self) -> i64 {
        self.0.div_euclid(Self::DAY)
    }

    /// Whole seconds from `self` until `later`, rounded up (what a Retry-After header wants).
    pub fn seconds_until_ceil(self, later: Millis) -> u64 {
        let ms = (later.0 - self.0).max(0) as u64;
        ms.div_ceil(1_000)
    }

    /// RFC 3339 in UTC with milliseconds, e.g. `2026-01-01T00:00:00.000Z`.
    pub fn to_rfc3339(self) -> String {
        self.to_string()
    }

    /// Parses an RFC 3339 time (`2026-01-01T00:00:00Z`, `2026-01-01T02:00:00.5+02:00`),
    /// with the `jiff` crate: a date that does not exist (`2026-02-31`) or an hour past 23
    /// is refused rather than rolled over. Digits below the millisecond are dropped.
    pub fn parse_rfc3339(text: &str) -> Option<Millis> {
        let timestamp: jiff::Timestamp = text.trim().parse().ok()?;
        Some(Millis(timestamp.as_millisecond()))
    }
}

/// A time's UTC calendar fields: `[year, month, day, hour, minute, second, millisecond]`.
fn utc_fields(time: Millis) -> [i64; 7] {
    let total_seconds = time.0.div_euclid(1_000);
    let second_of_day = total_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(total_seconds.div_euclid(86_400));
    [year, month, day, second_of_day / 3_600, (second_of_day / 60) % 60, second_of_day % 60, time.0.rem_euclid(1_000)]
}

/// RFC 3339 text of a time in the years 0000 to 9999, written digit by digit into 24
/// bytes (`2026-01-01T00:00:00.000Z`): every reply carries a few, and a page of eSIMs a
/// hundred, where the formatting machinery cost about 0.2 µs each. `None` outside those
/// years (then `Display`'s general `write!`).
fn rfc3339_bytes(time: Millis) -> Option<[u8; 24]> {
    let fields = utc_fields(time);
    if !(0..=9_999).contains(&fields[0]) {
        return None;
    }
    let mut text = *b"0000-00-00T00:00:00.000Z";
    // Where each field's digits end (exclusive) and how many there are.
    const PLACES: [(usize, usize); 7] = [(4, 4), (7, 2), (10, 2), (13, 2), (16, 2), (19, 2), (23, 3)];
    for (mut value, (end, digits)) in fields.into_iter().zip(PLACES) {
        for place in (end - digits..end).rev() {
            text[place] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    Some(text)
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = rfc3339_bytes(*self) {
            return f.write_str(std::str::from_utf8(&text).expect("ASCII digits"));
        }
        let [year, month, day, hour, minute, second, millis] = utc_fields(*self);
        write!(f, "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
    }
}

impl Serialize for Millis {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.0)
    }
}

/// Serializes a timestamp as RFC 3339 text (what API bodies carry).
pub mod rfc3339 {
    use super::Millis;
    /// Writes the timestamp as RFC 3339 text.
    pub fn serialize<S: serde::Serializer>(value: &Millis, serializer: S) -> Result<S::Ok, S::Error> {
        // The same text as `collect_str` gives, without the formatting machinery.
        match super::rfc3339_bytes(*value) {
            Some(text) => serializer.serialize_str(std::str::from_utf8(&text).expect("ASCII digits")),
            None => serializer.collect_str(value),
        }
    }
    /// The same for an optional timestamp (`null` when absent).
    pub mod option {
        use super::Millis;
        /// Writes the timestamp as RFC 3339 text, or `null`.
        pub fn serialize<S: serde::Serializer>(value: &Option<Millis>, serializer: S) -> Result<S::Ok, S::Error> {
            match value {
                Some(v) => super::serialize(v, serializer),
                None => serializer.serialize_none(),
            }
        }
    }
}

/// A service day (days since 1970-01-01, UTC) as its date, `2026-01-31`.
pub fn day_to_date(day: i64) -> String {
    let (year, month, day) = civil_from_days(day);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Parses a report bound to the UTC day it falls on: a date (`2026-01-31`, that day) or
/// an RFC 3339 instant (the UTC day holding it: `2026-01-31T23:30:00-02:00` is 2026-02-01).
/// Both through `jiff`, so a date that does not exist is refused (decision 107).
pub fn parse_day(text: &str) -> Option<i64> {
    let text = text.trim();
    if text.len() == 10 && !text.contains('T') {
        let date: jiff::civil::Date = text.parse().ok()?;
        let (year, month, day) = (i64::from(date.year()), i64::from(date.month()), i64::from(date.day()));
        return Some(days_from_civil(year, month, day));
    }
    Millis::parse_rfc3339(text).map(Millis::day_number)
}

/// (year, month, day) to days since 1970-01-01; the inverse of [`civil_from_days`]
/// (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digit-by-digit text is what the general formatting writes, at every edge of
    /// its years and anywhere between; outside them the general formatting answers.
    #[test]
    fn rfc3339_digits_are_the_formatted_text() {
        /// The general formatting, as `Display` wrote every time before the digits.
        fn formatted(time: Millis) -> String {
            let [year, month, day, hour, minute, second, millis] = utc_fields(time);
            format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
        }
        /// How replies write a time, and an optional one.
        #[derive(Serialize)]
        struct Stamp(#[serde(serialize_with = "rfc3339::serialize")] Millis);
        #[derive(Serialize)]
        struct Maybe(#[serde(serialize_with = "rfc3339::option::serialize")] Option<Millis>);
        assert_eq!(serde_json::to_string(&Maybe(None)).unwrap(), "null");
        const FIRST: i64 = -62_167_219_200_000; // 0000-01-01T00:00:00.000Z
        const LAST: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
        for ms in
            [FIRST - 1, FIRST, FIRST + 1, -1, 0, 1, 999, 1_000, 951_782_399_999, LAST, LAST + 1, i64::MIN, i64::MAX]
        {
            let time = Millis(ms);
            assert_eq!(rfc3339_bytes(time).is_some(), (FIRST..=LAST).contains(&ms), "{ms}");
            assert_eq!(time.to_string(), formatted(time), "{ms}");
            assert_eq!(serde_json::to_string(&Stamp(time)).unwrap(), format!("{:?}", formatted(time)));
            assert_eq!(serde_json::to_string(&Maybe(Some(time))).unwrap(), format!("{:?}", formatted(time)));
        }
        assert_eq!(Millis(FIRST).to_string(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Millis(LAST).to_string(), "9999-12-31T23:59:59.999Z");
        quickcheck::quickcheck((|ms: i64| Millis(ms).to_string() == formatted(Millis(ms))) as fn(i64) -> bool);
        quickcheck::quickcheck(
            (|ms: i64| {
                let ms = ms.rem_euclid(LAST - FIRST + 1) + FIRST;
                rfc3339_bytes(Millis(ms)).is_some() && Millis(ms).to_string() == formatted(Millis(ms))
            }) as fn(i64) -> bool,
        );
    }

    #[test]
    fn formats_and_parses_round_trip() {
        assert_eq!(Millis::VIRTUAL_EPOCH.to_string(), "2026-01-01T00:00:00.000Z");
        assert_eq!(Millis(0).to_string(), "1970-01-01T00:00:00.000Z");
        for ms in [0, 951_782_400_123, 1_767_225_600_000, 4_102_444_799_999] {
            let text = Millis(ms).to_string();
            assert_eq!(Millis::parse_rfc3339(&text), Some(Millis(ms)), "{text}");
        }
        assert_eq!(Millis::parse_rfc3339("2026-01-01T02:00:00+02:00"), Some(Millis::VIRTUAL_EPOCH));
        assert_eq!(Millis::parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(Millis::parse_rfc3339("2026-02-31T00:00:00Z"), None, "February has no 31st");
        assert_eq!(Millis::parse_rfc3339("2025-02-29T00:00:00Z"), None, "2025 is no leap year");
        assert_eq!(
            Millis::parse_rfc3339("2028-02-29T00:00:00Z").map(|t| t.to_string()).as_deref(),
            Some("2028-02-29T00:00:00.000Z")
        );
        assert_eq!(Millis::parse_rfc3339("2026-01-01T24:00:00Z"), None);
        assert_eq!(Millis::parse_rfc3339("2026-01-01T00:00:00"), None, "no offset: not an instant");
        assert_eq!(Millis::parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn report_days_parse_from_dates_and_instants() {
        assert_eq!(parse_day("1970-01-01"), Some(0));
        assert_eq!(parse_day("2026-01-01"), Some(Millis::VIRTUAL_EPOCH.day_number()));
        assert_eq!(parse_day("2026-01-31T23:30:00-02:00"), parse_day("2026-02-01"));
        assert_eq!(parse_day("2026-01-31T23:59:59.999Z"), parse_day("2026-01-31"));
        assert_eq!(parse_day("2026-02-31"), None, "February has no 31st");
        assert_eq!(parse_day("31/01/2026"), None);
        for day in [-800, 0, 59, 60, 20_454, 20_513, 47_482] {
            assert_eq!(parse_day(&day_to_date(day)), Some(day), "{}", day_to_date(day));
        }
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(Millis(0).seconds_until_ceil(Millis(1)), 1);
        assert_eq!(Millis(0).seconds_until_ceil(Millis(60_000)), 60);
        assert_eq!(Millis(5).seconds_until_ceil(Millis(0)), 0);
    }
}
