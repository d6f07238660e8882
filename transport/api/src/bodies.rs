//! The request bodies of the reseller, admin and sandbox APIs: one type per body, so a
//! field's name, shape, bounds and description are written once, here. [`crate::api`]
//! reads a body into its type ([`Fields::read`]); [`crate::openapi`] derives the request
//! schemas from the same types (`schemars`).
//!
//! A `///` doc comment on a body or field is its description in the OpenAPI document
//! (one line for the API user); notes for Rust readers are `//` comments. The bounds
//! (`range`, `length`, `multipleOf`) document what the engine enforces, with its own
//! messages; reading checks only the shape.
//!
//! Reading keeps the API's rules: unknown fields are ignored, `null` counts as absent, an
//! empty body is an empty object, and a field of the wrong shape is refused with 400
//! `VALIDATION_ERROR` naming it. Fields are checked in declaration order (with two bad
//! fields, the first declared is named), and numbers are read from their JSON text,
//! exactly: never through `f64`.

use esim_engine::reply::schema::{ThrottleSpeed, Usd};
use esim_engine::{ApiError, CardBehavior, EventName};
use rust_decimal::Decimal;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, value::BorrowedStrDeserializer, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// One sandbox clock advance at most: a leap year (decision 67); a longer jump is
/// several calls.
pub const CLOCK_ADVANCE_MAX_SECONDS: i64 = 366 * 24 * 3600;

// ----- reseller API -----

/// Optional body of a provisioning
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
pub struct ProvisionRequest {
    /// Your customer or order reference; surfaced in webhook payloads
    #[serde(deserialize_with = "field::string")]
    #[schemars(length(max = 256))]
    pub end_user_reference: Option<String>,
    /// Human label; surfaced in webhook payloads
    #[serde(deserialize_with = "field::string")]
    #[schemars(length(max = 256))]
    pub label: Option<String>,
    /// Issue the eSIM into this group; omit for a standalone eSIM
    #[serde(deserialize_with = "field::string")]
    #[schemars(extend("format" = "uuid"))]
    pub group_id: Option<String>,
}

/// Speed limit to apply
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct ThrottleRequest {
    // Checked against the accepted speeds by the engine (`esim::is_valid_speed`).
    #[serde(deserialize_with = "field::string")]
    #[schemars(with = "ThrottleSpeed")]
    pub speed: String,
}

/// Amount to move from the reseller balance into the eSIM wallet, in the field `amount` (the admin API's top-up and auto-refill bodies call theirs `amount_usd`)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct FundRequest {
    /// US dollars as a JSON number (20 or 20.5; not a string), 0.01 to 10000, at most 2 decimals; taken from the reseller balance. This body's field is `amount`, not `amount_usd` (the name in the admin API's top-up and auto-refill)
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Usd", range(min = 0.01, max = 10000), extend("multipleOf" = 0.01))]
    pub amount: Decimal,
}

/// Amount to move from the reseller balance into the group balance, in the field `amount` (the admin API's top-up and auto-refill bodies call theirs `amount_usd`)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct GroupFundRequest {
    /// US dollars as a JSON number (20 or 20.5; not a string), 0.01 to 10000, at most 2 decimals; taken from the reseller balance. This body's field is `amount`, not `amount_usd` (the name in the admin API's top-up and auto-refill)
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Usd", range(min = 0.01, max = 10000), extend("multipleOf" = 0.01))]
    pub amount: Decimal,
}

/// A new group
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct GroupCreateRequest {
    /// Unique on the account (compared after trimming)
    #[serde(deserialize_with = "field::string")]
    #[schemars(length(min = 1, max = 100))]
    pub name: String,
    /// USD, default 10, at most 2 decimals
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 0, max = 10000), extend("multipleOf" = 0.01))]
    pub low_balance_threshold_usd: Option<Decimal>,
    /// USD, default 25, at most 2 decimals
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 0.01, max = 10000), extend("multipleOf" = 0.01))]
    pub refill_amount_usd: Option<Decimal>,
}

/// At least one of the fields
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct GroupUpdateRequest {
    /// Unique on the account (compared after trimming)
    #[serde(deserialize_with = "field::string")]
    #[schemars(length(min = 1, max = 100))]
    pub name: Option<String>,
    /// USD, default 10, at most 2 decimals
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 0, max = 10000), extend("multipleOf" = 0.01))]
    pub low_balance_threshold_usd: Option<Decimal>,
    /// USD, default 25, at most 2 decimals
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 0.01, max = 10000), extend("multipleOf" = 0.01))]
    pub refill_amount_usd: Option<Decimal>,
}

/// The eSIM to move into the group
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct GroupAddEsimRequest {
    /// ICCID of a standalone eSIM of the account
    #[serde(deserialize_with = "field::string")]
    pub iccid: String,
}

/// A webhook endpoint to register (at most 5 per account)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct WebhookCreateRequest {
    /// Absolute https:// URL of a public host
    #[serde(deserialize_with = "field::string")]
    #[schemars(url, length(max = 2048))]
    pub url: String,
    /// Event names to receive, or ["*"] for all current and future events (test needs no subscription)
    #[serde(deserialize_with = "field::strings")]
    #[schemars(with = "Vec<WebhookEventName>", length(min = 1))]
    pub events: Vec<String>,
}

/// Fields to change
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct WebhookUpdateRequest {
    /// Absolute https:// URL of a public host
    #[serde(deserialize_with = "field::string")]
    #[schemars(url, length(max = 2048))]
    pub url: Option<String>,
    /// Event names to receive, or ["*"] for all current and future events (test needs no subscription)
    #[serde(deserialize_with = "field::strings")]
    #[schemars(with = "Option<Vec<WebhookEventName>>", length(min = 1))]
    pub events: Option<Vec<String>>,
    /// true re-activates the webhook and resets failure_count to 0
    #[serde(deserialize_with = "field::boolean")]
    pub active: Option<bool>,
}

/// Where to send the event again
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct EventResendRequest {
    /// One of the account's webhooks (active or not)
    #[serde(deserialize_with = "field::string")]
    pub webhook_id: String,
}

/// Fields to change (at least one); the saved card is not changed here
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct AutoRefillUpdateRequest {
    /// true charges the saved card when real spend leaves the balance low
    #[serde(deserialize_with = "field::boolean")]
    pub enabled: Option<bool>,
    /// US dollars charged to the card per refill, as a JSON number (not a string), 10 to 1000000, at most 2 decimals. This body's field is `amount_usd` (the fund bodies call theirs `amount`)
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 10, max = 1000000), extend("multipleOf" = 0.01))]
    pub amount_usd: Option<Decimal>,
}

// ----- admin API -----

/// A new reseller account, with its first API key
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct AccountCreateRequest {
    /// The reseller's contact address
    #[serde(deserialize_with = "field::string")]
    #[schemars(email)]
    pub contact_email: String,
    /// The reseller's company
    #[serde(deserialize_with = "field::string")]
    #[schemars(length(max = 256))]
    pub company_name: Option<String>,
}

/// A manual top-up of the reseller balance, in the field `amount_usd` (the reseller API's fund bodies call theirs `amount`)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct TopUpRequest {
    /// US dollars added to the reseller balance, as a JSON number (50 or 50.25; not a string), 10 to 1000000, at most 2 decimals. This body's field is `amount_usd`, not `amount` (the name in the reseller API's fund bodies)
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Usd", range(min = 10, max = 1000000), extend("multipleOf" = 0.01))]
    pub amount_usd: Decimal,
}

/// Freeze or unfreeze an account
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct FreezeRequest {
    /// true freezes the account: its changes answer ACCOUNT_SUSPENDED
    #[serde(deserialize_with = "field::boolean")]
    pub frozen: bool,
}

/// An account's auto-refill, with the saved card's behaviour (at least one field); its amount is the field `amount_usd` (the reseller API's fund bodies call theirs `amount`)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct AdminAutoRefillRequest {
    // Declared first: checked before the other fields, as it always was.
    /// How the saved card answers a charge
    #[serde(deserialize_with = "field::card")]
    #[schemars(with = "Option<CardName>")]
    pub card: Option<CardBehavior>,
    /// true charges the saved card when real spend leaves the balance low
    #[serde(deserialize_with = "field::boolean")]
    pub enabled: Option<bool>,
    /// US dollars charged to the card per refill, as a JSON number (not a string), 10 to 1000000, at most 2 decimals. This body's field is `amount_usd`, not `amount` (the name in the reseller API's fund bodies)
    #[serde(deserialize_with = "field::money")]
    #[schemars(with = "Option<Usd>", range(min = 10, max = 1000000), extend("multipleOf" = 0.01))]
    pub amount_usd: Option<Decimal>,
}

/// An account's limits (absent fields keep their value)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct LimitsRequest {
    // Read as any u32; the engine refuses what is outside 1 to OPERATOR_LIMIT_MAX.
    /// Groups the account may have
    #[serde(deserialize_with = "field::integer::<COUNT_MAX, _, _>")]
    #[schemars(range(min = 1, max = OPERATOR_LIMIT_MAX))]
    pub max_groups: Option<u64>,
    /// eSIMs a group of the account may hold
    #[serde(deserialize_with = "field::integer::<COUNT_MAX, _, _>")]
    #[schemars(range(min = 1, max = OPERATOR_LIMIT_MAX))]
    pub max_group_size: Option<u64>,
}

/// The largest group limit the engine takes.
const OPERATOR_LIMIT_MAX: u32 = esim_engine::limits::OPERATOR_LIMIT_MAX;

/// The largest limit: a `u32`.
pub const COUNT_MAX: u64 = u32::MAX as u64;

/// The eSIM inventory
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct InventoryRequest {
    /// eSIM profiles left to provision
    #[serde(deserialize_with = "field::integer::<INVENTORY_MAX, _, _>")]
    #[schemars(range(max = INVENTORY_MAX))]
    pub available: u64,
}

/// The largest inventory an operator can set.
pub const INVENTORY_MAX: u64 = 1_000_000_000;

// ----- sandbox API -----

/// How far to move the sandbox clock
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct ClockAdvanceRequest {
    /// Seconds, above 0 and at most a leap year; fractions are kept to the millisecond
    // multipleOf: what is kept. A number with more digits than a Decimal holds (1e-300)
    // is refused, so the document offers only what is kept (schemathesis found it).
    #[serde(deserialize_with = "field::number")]
    #[schemars(
        with = "Usd",
        range(max = CLOCK_ADVANCE_MAX_SECONDS),
        extend("exclusiveMinimum" = 0, "multipleOf" = 0.001)
    )]
    pub seconds: Decimal,
}

/// A simulated data session of an installed eSIM
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct UsageRequest {
    /// Megabytes used in this session, above 0 and at most 1000000, at most 6 decimals
    // A number with more digits than a Decimal holds (1e-300) is refused: the document
    // offers a millionth of a MB (a byte) at the finest (schemathesis found it).
    #[serde(deserialize_with = "field::number")]
    #[schemars(
        with = "Usd",
        range(max = esim_engine::limits::MAX_USAGE_MB),
        extend("exclusiveMinimum" = 0, "multipleOf" = 0.000001)
    )]
    pub mb: Decimal,
    /// ISO2 code of the visited country, one of the rates table's (GET /api/v2/reseller/rates); lower case is accepted too
    #[serde(deserialize_with = "field::string")]
    #[schemars(with = "CountryCode")]
    pub country: String,
    /// The visited network's operator; the country's first when absent
    #[serde(deserialize_with = "field::string")]
    pub operator: Option<String>,
}

/// Faults of the simulated upstream (absent fields keep their value)
#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
pub struct FaultsRequest {
    /// true makes pausing data upstream fail (defunds and moves answer UPSTREAM_ERROR)
    #[serde(deserialize_with = "field::boolean")]
    pub upstream_pause_fails: Option<bool>,
    /// true makes live reads of the network fail (the cached state is shown)
    #[serde(deserialize_with = "field::boolean")]
    pub network_read_fails: Option<bool>,
}

// ----- field types whose schema is not their Rust type's -----

/// A name a webhook subscribes to: a subscribable event, or `*` for all.
pub struct WebhookEventName;

impl WebhookEventName {
    /// `*` and the subscribable events.
    pub fn names() -> Vec<&'static str> {
        std::iter::once("*").chain(EventName::SUBSCRIBABLE.iter().map(|event| event.as_str())).collect()
    }
}

impl JsonSchema for WebhookEventName {
    fn schema_name() -> Cow<'static, str> {
        "WebhookEventName".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": WebhookEventName::names(),
            "description": "A subscribable event name, or * for all current and future events",
        })
    }
}

/// A card's behaviour as the admin API writes it (`requires_action`).
pub struct CardName;

impl JsonSchema for CardName {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "CardName".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<String> = CardBehavior::ALL.iter().map(CardBehavior::to_string).collect();
        json_schema!({ "type": "string", "enum": names })
    }
}

/// The ISO2 code of a country of the rates table (what a usage names).
pub struct CountryCode;

impl JsonSchema for CountryCode {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "CountryCode".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut codes: Vec<&str> =
            esim_engine::rates::RateTable::builtin().countries().iter().map(|country| country.iso2.as_str()).collect();
        codes.sort_unstable();
        json_schema!({ "type": "string", "enum": codes })
    }
}

// ----- reading -----

/// A request body as a JSON object: empty when the body is absent or blank (an optional
/// body may be left out even with `Content-Type: application/json`).
#[derive(Debug, Default)]
pub struct Fields(Map<String, Value>);

impl Fields {
    /// The body's object; 400 when it is not JSON or not an object.
    pub fn parse(bytes: &[u8]) -> Result<Fields, ApiError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Fields(Map::new()));
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(_) => Err(ApiError::validation("the body must be a JSON object")),
            Err(error) => Err(ApiError::validation(format!("malformed JSON body: {error}"))),
        }
    }

    /// The body read into `T`, one of this module's types: each field checked in
    /// declaration order, the first refused one answering 400 naming it. (The types are
    /// read only here: their optional fields carry no `serde(default)`, which schemars
    /// would document as `"default": null`, because this reader offers every field.)
    pub fn read<'a, T: Deserialize<'a>>(&'a self) -> Result<T, ApiError> {
        T::deserialize(Declared(&self.0)).map_err(|Refused(message)| ApiError::validation(message))
    }
}

/// Why a field was refused: the message, naming the field.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl de::Error for Refused {
    fn custom<T: std::fmt::Display>(message: T) -> Self {
        Refused(message.to_string())
    }
}

/// Deserializes a body type from the object, offering every declared field in
/// declaration order (absent ones as `None`), so each field's own check, required or
/// not, runs in that order and the first failure names its field.
struct Declared<'de>(&'de Map<String, Value>);

impl<'de> Deserializer<'de> for Declared<'de> {
    type Error = Refused;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        let body = self.0;
        visitor
            .visit_map(InOrder { body, fields: fields.iter(), current: "" })
            .map_err(|Refused(message)| Refused(with_hint(body, fields, message)))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Refused> {
        Err(Refused("a body is read into a struct".into()))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The declared fields of one body, in order.
struct InOrder<'de> {
    body: &'de Map<String, Value>,
    fields: std::slice::Iter<'static, &'static str>,
    /// The field whose value comes next.
    current: &'static str,
}

impl<'de> MapAccess<'de> for InOrder<'de> {
    type Error = Refused;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Refused> {
        let Some(&name) = self.fields.next() else { return Ok(None) };
        self.current = name;
        seed.deserialize(BorrowedStrDeserializer::new(name)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refused> {
        let name = self.current;
        assert!(!name.is_empty(), "a value is asked for after its key");
        let value = self.body.get(name).filter(|value| !value.is_null());
        seed.deserialize(Given(value)).map_err(|Refused(message)| Refused(named(name, message)))
    }
}

/// Field names that one API spells one way and another API the other (issue 37): the
/// reseller API's fund bodies take `amount`, the admin API's top-up and auto-refill
/// `amount_usd`. (declared, look-alike, where each is used.)
const LOOK_ALIKES: &[(&str, &str, &str)] = &[
    ("amount_usd", "amount", "the admin top-up and auto-refill take `amount_usd`, the reseller fund bodies `amount`"),
    ("amount", "amount_usd", "the reseller fund bodies take `amount`, the admin top-up and auto-refill `amount_usd`"),
];

/// A refusal of a missing field, when the body holds its look-alike instead (`amount`
/// sent to the top-up), gains a hint: "did you mean `amount_usd`?". Any other message is
/// kept as it is.
fn with_hint(body: &Map<String, Value>, fields: &[&str], message: String) -> String {
    let given = |name: &str| body.get(name).is_some_and(|value| !value.is_null());
    for &(declared, other, where_used) in LOOK_ALIKES {
        let missing = message == format!("{declared} {}", field::REQUIRED);
        if missing && fields.contains(&declared) && !fields.contains(&other) && given(other) {
            return format!("{message}: the body has `{other}`; did you mean `{declared}`? ({where_used})");
        }
    }
    message
}

/// The message names the field: its name in front, unless it starts with it already.
fn named(name: &str, message: String) -> String {
    match message.strip_prefix(name) {
        Some(rest) if rest.starts_with(' ') => message,
        _ => format!("{name} {message}"),
    }
}

/// One field's value, `None` when absent or null. The checks of [`field`] read it as
/// an `Option<Value>`; any other use treats an absent field as a missing required one.
struct Given<'de>(Option<&'de Value>);

impl<'de> Deserializer<'de> for Given<'de> {
    type Error = Refused;

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.0 {
            None => visitor.visit_none(),
            Some(value) => visitor.visit_some(value).map_err(de::Error::custom),
        }
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.0 {
            None => Err(Refused(field::REQUIRED.into())),
            Some(value) => value.deserialize_any(visitor).map_err(de::Error::custom),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// The shape checks of the fields (`deserialize_with`), one per kind. Each answers its
/// message without the field's name, which [`InOrder`] puts in front; a field's Rust type
/// says whether it is required (`T`) or optional (`Option<T>`).
mod field {
    use super::*;

    pub(super) const REQUIRED: &str = "is required";

    /// A field of type `Self` holding a `T` when given.
    pub(super) trait Presence<T>: Sized {
        fn given(value: Option<T>) -> Result<Self, String>;
    }

    impl<T> Presence<T> for Option<T> {
        fn given(value: Option<T>) -> Result<Self, String> {
            Ok(value)
        }
    }

    macro_rules! required {
        ($($kind:ty),*) => {$(
            impl Presence<$kind> for $kind {
                fn given(value: Option<$kind>) -> Result<Self, String> {
                    value.ok_or_else(|| REQUIRED.to_string())
                }
            }
        )*};
    }
    required!(String, Vec<String>, Decimal, bool, u64);

    /// Reads the field and checks the shape of a given value.
    fn check<'de, D, T, P>(field: D, shape: impl FnOnce(Value) -> Result<T, String>) -> Result<P, D::Error>
    where
        D: Deserializer<'de>,
        P: Presence<T>,
    {
        let value = Option::<Value>::deserialize(field)?;
        let value = value.map(shape).transpose().map_err(de::Error::custom)?;
        P::given(value).map_err(de::Error::custom)
    }

    pub(super) fn string<'de, D: Deserializer<'de>, P: Presence<String>>(field: D) -> Result<P, D::Error> {
        check(field, |value| match value {
            Value::String(text) => Ok(text),
            _ => Err("must be a string".into()),
        })
    }

    pub(super) fn strings<'de, D: Deserializer<'de>, P: Presence<Vec<String>>>(field: D) -> Result<P, D::Error> {
        check(field, |value| {
            let items = match value {
                Value::Array(items) => items,
                _ => return Err("must be an array of strings".to_string()),
            };
            items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => Some(text),
                    _ => None,
                })
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| "must be an array of strings".into())
        })
    }

    pub(super) fn boolean<'de, D: Deserializer<'de>, P: Presence<bool>>(field: D) -> Result<P, D::Error> {
        check(field, |value| value.as_bool().ok_or_else(|| "must be true or false".into()))
    }

    /// A number exactly as written: one with more digits than a `Decimal` holds is
    /// refused, never rounded.
    fn exact(value: Value) -> Result<Decimal, String> {
        match value {
            Value::Number(number) => exact_decimal(&number.to_string())
                .ok_or_else(|| "has more digits than can be held exactly, or is out of range".into()),
            _ => Err("must be a number".into()),
        }
    }

    pub(super) fn number<'de, D: Deserializer<'de>, P: Presence<Decimal>>(field: D) -> Result<P, D::Error> {
        check(field, exact)
    }

    /// A USD amount: at most 2 decimal places (decision 3), never rounded.
    pub(super) fn money<'de, D: Deserializer<'de>, P: Presence<Decimal>>(field: D) -> Result<P, D::Error> {
        check(field, |value| match exact(value)? {
            amount if amount.normalize().scale() > 2 => Err("must have at most 2 decimal places".into()),
            amount => Ok(amount),
        })
    }

    /// A whole number from 0 to `MAX`.
    pub(super) fn integer<'de, const MAX: u64, D: Deserializer<'de>, P: Presence<u64>>(
        field: D,
    ) -> Result<P, D::Error> {
        check(field, |value| match value {
            Value::Number(number) => number
                .as_u64()
                .filter(|value| *value <= MAX)
                .ok_or_else(|| format!("must be an integer from 0 to {MAX}")),
            _ => Err("must be an integer".into()),
        })
    }

    /// A card's name; the engine's message names the field itself.
    pub(super) fn card<'de, D: Deserializer<'de>>(field: D) -> Result<Option<CardBehavior>, D::Error> {
        let name: Option<String> = string(field)?;
        name.map(|name| name.parse::<CardBehavior>()).transpose().map_err(de::Error::custom)
    }
}

/// A number's text as an exact `Decimal` (plain or scientific), or `None` when it has
/// more significant digits than a `Decimal` holds or is out of its range.
pub fn exact_decimal(text: &str) -> Option<Decimal> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let mut value = Decimal::from_str_exact(mantissa).ok()?;
    if value.is_zero() {
        return Some(Decimal::ZERO);
    }
    if exponent >= 0 {
        // Past 10^29 nothing but zero fits a Decimal (at most about 7.9 * 10^28).
        for _ in 0..exponent.min(29) {
            value = value.checked_mul(Decimal::TEN)?;
        }
        (exponent <= 29).then_some(value)
    } else {
        let scale = value.scale().checked_add(exponent.unsigned_abs())?;
        value.set_scale(scale).ok()?;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The field-by-field reader these types replaced, kept as the oracle: reading a body
    /// into its type must refuse and accept exactly as it did, with the same message.
    struct Oracle(Map<String, Value>);

    impl Oracle {
        fn present(&self, name: &str) -> Option<&Value> {
            self.0.get(name).filter(|v| !v.is_null())
        }
        fn string(&self, name: &str) -> Result<Option<String>, String> {
            match self.present(name) {
                None => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => Err(format!("{name} must be a string")),
            }
        }
        fn required<T>(name: &str, value: Result<Option<T>, String>) -> Result<T, String> {
            value?.ok_or_else(|| format!("{name} is required"))
        }
        fn decimal(&self, name: &str) -> Result<Option<Decimal>, String> {
            match self.present(name) {
                None => Ok(None),
                Some(Value::Number(number)) => exact_decimal(&number.to_string())
                    .map(Some)
                    .ok_or_else(|| format!("{name} has more digits than can be held exactly, or is out of range")),
                Some(_) => Err(format!("{name} must be a number")),
            }
        }
        fn money(&self, name: &str) -> Result<Option<Decimal>, String> {
            match self.decimal(name)? {
                Some(amount) if amount.normalize().scale() > 2 => {
                    Err(format!("{name} must have at most 2 decimal places"))
                }
                other => Ok(other),
            }
        }
        fn bool(&self, name: &str) -> Result<Option<bool>, String> {
            match self.present(name) {
                None => Ok(None),
                Some(Value::Bool(value)) => Ok(Some(*value)),
                Some(_) => Err(format!("{name} must be true or false")),
            }
        }
        fn integer(&self, name: &str, max: u64) -> Result<Option<u64>, String> {
            match self.present(name) {
                None => Ok(None),
                Some(Value::Number(number)) => match number.as_u64() {
                    Some(value) if value <= max => Ok(Some(value)),
                    _ => Err(format!("{name} must be an integer from 0 to {max}")),
                },
                Some(_) => Err(format!("{name} must be an integer")),
            }
        }
        fn strings(&self, name: &str) -> Result<Option<Vec<String>>, String> {
            match self.present(name) {
                None => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| item.as_str().map(str::to_string))
                    .collect::<Option<Vec<String>>>()
                    .map(Some)
                    .ok_or_else(|| format!("{name} must be an array of strings")),
                Some(_) => Err(format!("{name} must be an array of strings")),
            }
        }
    }

    /// Reads `text` both ways; `Ok` with the new reading's Debug form when both accept.
    fn both<T: for<'a> Deserialize<'a> + std::fmt::Debug, O: std::fmt::Debug>(
        text: &str,
        oracle: impl Fn(&Oracle) -> Result<O, String>,
    ) -> (Result<String, String>, Result<String, String>) {
        let new = Fields::parse(text.as_bytes()).and_then(|fields| fields.read::<T>()).map(|t| format!("{t:?}"));
        let old = Fields::parse(text.as_bytes())
            .map_err(|e| e.message)
            .and_then(|Fields(map)| oracle(&Oracle(map)).map(|o| format!("{o:?}")));
        (new.map_err(|e| e.message), old)
    }

    /// The answer of both readings agrees: the same message, or both accept.
    fn agree<T: for<'a> Deserialize<'a> + std::fmt::Debug, O: std::fmt::Debug>(
        text: &str,
        oracle: impl Fn(&Oracle) -> Result<O, String>,
    ) -> Result<(), TestCaseError> {
        let (new, old) = both::<T, O>(text, oracle);
        match (&new, &old) {
            (Err(new), Err(old)) => prop_assert_eq!(new, old, "{}", text),
            (Ok(_), Ok(_)) => {}
            _ => prop_assert!(false, "{text}: new {new:?}, old {old:?}"),
        }
        Ok(())
    }

    /// A JSON value of any of the kinds a field may be given, including edge numbers.
    fn any_value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("\"text\"".to_string()),
            Just("[]".to_string()),
            Just("[\"a\", \"b\"]".to_string()),
            Just("[\"a\", 1]".to_string()),
            Just("{}".to_string()),
            Just("-1".to_string()),
            Just("4294967296".to_string()),
            Just("1000000001".to_string()),
            Just("1000000000".to_string()),
            Just("4294967295".to_string()),
            Just("0".to_string()),
            Just("1.10".to_string()),
            Just("19.999".to_string()),
            Just("1e40".to_string()),
            Just("1.5e-30".to_string()),
            Just("123456789012345678901234567890123".to_string()),
            (0u64..5_000_000_000).prop_map(|n| n.to_string()),
            (0i64..2_000_000, 0u32..4).prop_map(|(n, scale)| Decimal::new(n, scale).to_string()),
        ]
    }

    /// An object with some of `names` (and an unknown field), in any order.
    fn object_of(names: &'static [&'static str]) -> impl Strategy<Value = String> {
        let fields = names.iter().chain(&["unknown"]).map(|name| (Just(*name), proptest::option::of(any_value())));
        (fields.collect::<Vec<_>>(), any::<prop::sample::Index>()).prop_map(|(fields, turn)| {
            let mut given: Vec<String> =
                fields.into_iter().filter_map(|(name, value)| Some(format!("\"{name}\": {}", value?))).collect();
            if !given.is_empty() {
                let at = turn.index(given.len());
                given.rotate_left(at);
            }
            format!("{{{}}}", given.join(", "))
        })
    }

    proptest! {
        #[test]
        fn group_bodies_read_as_before(text in object_of(&["name", "low_balance_threshold_usd", "refill_amount_usd"])) {
            agree::<GroupCreateRequest, _>(&text, |o| {
                Ok((
                    Oracle::required("name", o.string("name"))?,
                    o.money("low_balance_threshold_usd")?,
                    o.money("refill_amount_usd")?,
                ))
            })?;
            agree::<GroupUpdateRequest, _>(&text, |o| {
                Ok((o.string("name")?, o.money("low_balance_threshold_usd")?, o.money("refill_amount_usd")?))
            })?;
        }

        #[test]
        fn webhook_bodies_read_as_before(text in object_of(&["url", "events", "active"])) {
            agree::<WebhookCreateRequest, _>(&text, |o| {
                Ok((Oracle::required("url", o.string("url"))?, Oracle::required("events", o.strings("events"))?))
            })?;
            agree::<WebhookUpdateRequest, _>(&text, |o| Ok((o.string("url")?, o.strings("events")?, o.bool("active")?)))?;
        }

        #[test]
        fn admin_bodies_read_as_before(text in object_of(&["card", "enabled", "amount_usd", "max_groups", "available", "frozen"])) {
            agree::<AdminAutoRefillRequest, _>(&text, |o| {
                let card = match o.string("card")? {
                    None => None,
                    Some(text) => Some(text.parse::<CardBehavior>()?),
                };
                Ok((card, o.bool("enabled")?, o.money("amount_usd")?))
            })?;
            agree::<LimitsRequest, _>(&text, |o| o.integer("max_groups", u32::MAX.into()))?;
            agree::<InventoryRequest, _>(&text, |o| Oracle::required("available", o.integer("available", 1_000_000_000)))?;
            agree::<FreezeRequest, _>(&text, |o| Oracle::required("frozen", o.bool("frozen")))?;
            agree::<TopUpRequest, _>(&text, |o| Oracle::required("amount_usd", o.money("amount_usd")))?;
        }

        #[test]
        fn sandbox_bodies_read_as_before(text in object_of(&["mb", "country", "operator", "seconds"])) {
            agree::<UsageRequest, _>(&text, |o| {
                Ok((Oracle::required("mb", o.decimal("mb"))?, Oracle::required("country", o.string("country"))?, o.string("operator")?))
            })?;
            agree::<ClockAdvanceRequest, _>(&text, |o| Oracle::required("seconds", o.decimal("seconds")))?;
        }
    }

    #[test]
    fn fields_are_checked_in_declaration_order_and_named() {
        let read = |text: &str| Fields::parse(text.as_bytes()).and_then(|f| f.read::<WebhookCreateRequest>());
        let message = |text: &str| read(text).unwrap_err().message;
        // A missing first field is named before a bad later one, wherever it is written.
        assert_eq!(message(r#"{"events": 5}"#), "url is required");
        assert_eq!(message(r#"{"events": 5, "url": "https://a.example"}"#), "events must be an array of strings");
        assert_eq!(message(r#"{"url": null, "events": ["*"]}"#), "url is required", "null is absent");
        let ok = read(r#"{"url": "https://a.example", "events": ["*"], "other": {"x": 1}}"#).unwrap();
        assert_eq!(ok.events, ["*"], "unknown fields are ignored");
        // The last of a repeated field counts, as in any JSON object read here.
        assert_eq!(read(r#"{"url": 1, "url": "u", "events": []}"#).unwrap().url, "u");
        let card = Fields::parse(br#"{"card": "gold"}"#).unwrap().read::<AdminAutoRefillRequest>().unwrap_err();
        assert_eq!(card.message, "card must be one of ok, declined, requires_action, expired");
    }

    #[test]
    fn an_amount_under_the_other_apis_name_is_refused_with_a_hint() {
        let message = |text: &str, read: fn(&Fields) -> Result<(), ApiError>| {
            read(&Fields::parse(text.as_bytes()).unwrap()).unwrap_err().message
        };
        let top_up = |fields: &Fields| fields.read::<TopUpRequest>().map(drop);
        let fund = |fields: &Fields| fields.read::<FundRequest>().map(drop);
        let group_fund = |fields: &Fields| fields.read::<GroupFundRequest>().map(drop);
        assert_eq!(
            message(r#"{"amount": 50}"#, top_up),
            "amount_usd is required: the body has `amount`; did you mean `amount_usd`? (the admin top-up and \
             auto-refill take `amount_usd`, the reseller fund bodies `amount`)"
        );
        for read in [fund, group_fund] {
            assert_eq!(
                message(r#"{"amount_usd": 20}"#, read),
                "amount is required: the body has `amount_usd`; did you mean `amount`? (the reseller fund bodies \
                 take `amount`, the admin top-up and auto-refill `amount_usd`)"
            );
        }
        // No hint without the look-alike, with a null one, or for another refusal.
        assert_eq!(message("{}", top_up), "amount_usd is required");
        assert_eq!(message(r#"{"amount": null}"#, top_up), "amount_usd is required");
        assert_eq!(message(r#"{"amount": 50, "amount_usd": "50"}"#, top_up), "amount_usd must be a number");
        assert_eq!(message(r#"{"amount_usd": 1, "amount": 1.001}"#, fund), "amount must have at most 2 decimal places");
    }

    #[test]
    fn blank_and_non_object_bodies() {
        assert_eq!(Fields::parse(b"  \n").unwrap().read::<ProvisionRequest>().unwrap(), ProvisionRequest::default());
        assert_eq!(Fields::parse(b"[1]").unwrap_err().message, "the body must be a JSON object");
        assert!(Fields::parse(b"{").unwrap_err().message.starts_with("malformed JSON body: "));
        let missing = Fields::parse(b"").unwrap().read::<FundRequest>().unwrap_err();
        assert_eq!(
            (missing.code, missing.message.as_str()),
            (esim_engine::ErrorCode::ValidationError, "amount is required")
        );
    }
}
