//! The JSON the world writes and reads: the bodies of its requests, written by hand so
//! that every amount keeps the exact decimal digits the op holds, and amounts read back
//! from responses with their digits.

use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;

/// A small JSON object writer: numbers are written with their exact decimal digits.
pub(super) struct Json(String);

/// A value as JSON text in a request body the world writes.
pub(super) trait JsonText {
    fn json_text(&self) -> String;
}

impl JsonText for Decimal {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for bool {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for u32 {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for str {
    fn json_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "\"\"".to_string())
    }
}

impl JsonText for Vec<String> {
    fn json_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Json {
    pub(super) fn new() -> Json {
        Json(String::from("{"))
    }

    pub(super) fn raw(mut self, key: &str, value: &str) -> Json {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&format!("\"{key}\":{value}"));
        self
    }

    pub(super) fn number(self, key: &str, value: &Decimal) -> Json {
        self.raw(key, &value.json_text())
    }

    pub(super) fn string(self, key: &str, value: &str) -> Json {
        self.raw(key, &value.json_text())
    }

    /// Adds the field only when it has a value (an optional field stays absent).
    pub(super) fn optional<T: JsonText + ?Sized>(self, key: &str, value: Option<&T>) -> Json {
        match value {
            Some(value) => self.raw(key, &value.json_text()),
            None => self,
        }
    }

    pub(super) fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }

    /// An empty body when no field was set (optional bodies may be absent).
    pub(super) fn finish_or_empty(self) -> String {
        if self.0.len() == 1 {
            String::new()
        } else {
            self.finish()
        }
    }
}

/// A JSON number or string as a decimal (exact: numbers keep their digits).
pub fn decimal(value: &Value) -> Option<Decimal> {
    let text = match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        _ => return None,
    };
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}
