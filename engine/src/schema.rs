//! JSON Schemas of the field types whose serde form is not their Rust type's: money as
//! an exact JSON number, times as RFC 3339 text, throttle speeds as their names.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use std::borrow::Cow;

/// A USD amount (a `Decimal`): a JSON number with its exact digits, never a string.
pub struct Usd;

impl JsonSchema for Usd {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Usd".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number" })
    }
}

/// A service time (`Millis`): RFC 3339 UTC with milliseconds.
pub struct Timestamp;

impl JsonSchema for Timestamp {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "date-time" })
    }
}

/// A throttle speed: one of [`ThrottleSpeed::names`].
pub struct ThrottleSpeed;

impl ThrottleSpeed {
    /// The accepted speeds: NO_LIMIT, 100 to 3000 Kbps in steps of 100, then 3500,
    /// 4000, 4500 and 5000 (what `esim::is_valid_speed` accepts; a test checks it).
    pub fn names() -> Vec<String> {
        let steps = (1..=30).map(|n| n * 100).chain([3_500, 4_000, 4_500, 5_000]);
        std::iter::once("NO_LIMIT".to_string()).chain(steps.map(|kbps| format!("SPEED_{kbps}_KBPS"))).collect()
    }
}

impl JsonSchema for ThrottleSpeed {
    fn schema_name() -> Cow<'static, str> {
        "ThrottleSpeed".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": ThrottleSpeed::names(),
            "description": "Speed limit: NO_LIMIT (full speed), SPEED_100_KBPS to SPEED_3000_KBPS in 100 Kbps steps, SPEED_3500_KBPS, SPEED_4000_KBPS, SPEED_4500_KBPS or SPEED_5000_KBPS",
        })
    }
}
