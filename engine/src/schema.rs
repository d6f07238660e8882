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

/// The profile's state on the device, as the network reports it
// Named once in the document (a generated client gets one class), its nullable uses
// `anyOf` with it and null; a test of the document pairs the values with
// `state::EuiccState`'s.
#[derive(JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code, missing_docs)] // only its schema is used; a `///` would make it a oneOf
pub enum EuiccState {
    Released,
    Downloaded,
    Installed,
    Enabled,
}

/// pending until first installed, active, suspended while data is disabled, terminated for good
// Named once, as `EuiccState`; a test pairs the values with `state::EsimStatus`'s.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, missing_docs)] // only its schema is used; a `///` would make it a oneOf
pub enum EsimStatus {
    Pending,
    Active,
    Suspended,
    Terminated,
}

/// The name of an event a webhook can subscribe to (`esim.provisioned`, ...): one of
/// [`crate::event_name::EventName::SUBSCRIBABLE`].
pub struct SubscribableEvent;

impl JsonSchema for SubscribableEvent {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "SubscribableEvent".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = crate::event_name::EventName::SUBSCRIBABLE.iter().map(|e| e.as_str()).collect();
        json_schema!({ "type": "string", "enum": names })
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
