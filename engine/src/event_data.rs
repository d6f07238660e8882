//! The `data` object of every event, typed: one variant of [`EventData`] per event, each
//! a struct with every field the receiver gets (the common fields of its family
//! included), so a reader matches on a variant instead of looking a field up by name.
//!
//! Serialized only at the edge (the envelope's bytes, the kept text of the events API).
//! On the wire, `data`'s keys are in alphabetical order (decision 17: the order of the
//! JSON object the engine wrote before these types): every struct here declares its
//! fields in that order, and a test checks each event's bytes against that object's.
//!
//! The `///` doc comment of a payload or field is also its description in the OpenAPI
//! document's `webhooks` section (derived with `schemars`, as in [`crate::reply`]).

use crate::codes::Iccid;
use crate::event_name::EventName;
use crate::schema;
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

/// An event's `data`, one variant per event (the variant names the event).
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum EventData {
    /// `esim.provisioned`.
    EsimProvisioned(EsimProvisionedData),
    /// `esim.activated`.
    EsimActivated(EsimActivatedData),
    /// `esim.terminated`.
    EsimTerminated(EsimTerminatedData),
    /// `esim.data_suspended`.
    EsimDataSuspended(EsimData),
    /// `esim.data_resumed`.
    EsimDataResumed(EsimData),
    /// `esim.balance_low` (decision 15).
    EsimBalanceLow(EsimBalanceLowData),
    /// `esim.balance_depleted` (decision 15).
    EsimBalanceDepleted(EsimBalanceDepletedData),
    /// `esim.defunded` (decision 9).
    EsimDefunded(EsimDefundedData),
    /// `balance.low` (decision 16).
    BalanceLow(BalanceLowData),
    /// `balance.depleted` (decision 16).
    BalanceDepleted(BalanceDepletedData),
    /// `balance.topped_up`.
    BalanceToppedUp(BalanceToppedUpData),
    /// `balance.auto_refill_succeeded` (decision 34).
    BalanceAutoRefillSucceeded(AutoRefillSucceededData),
    /// `balance.auto_refill_failed` (decision 34).
    BalanceAutoRefillFailed(AutoRefillFailedData),
    /// `group.balance_low` (decision 33).
    GroupBalanceLow(GroupBalanceLowData),
    /// `group.funded`.
    GroupFunded(GroupFundedData),
    /// `group.balance_depleted`.
    GroupBalanceDepleted(GroupData),
    /// `group.defunded` (decision 32).
    GroupDefunded(GroupDefundedData),
    /// `esim.group_assigned`.
    EsimGroupAssigned(EsimGroupAssignedData),
    /// `esim.group_removed` (removed, or terminated: decision 58).
    EsimGroupRemoved(EsimGroupRemovedData),
    /// `test`: the probe of `POST /webhooks/{id}/test` (decision 39).
    Test(TestData),
}

impl EventData {
    /// The event this payload is.
    pub fn name(&self) -> EventName {
        use EventData as D;
        use EventName as N;
        match self {
            D::EsimProvisioned(_) => N::EsimProvisioned,
            D::EsimActivated(_) => N::EsimActivated,
            D::EsimTerminated(_) => N::EsimTerminated,
            D::EsimDataSuspended(_) => N::EsimDataSuspended,
            D::EsimDataResumed(_) => N::EsimDataResumed,
            D::EsimBalanceLow(_) => N::EsimBalanceLow,
            D::EsimBalanceDepleted(_) => N::EsimBalanceDepleted,
            D::EsimDefunded(_) => N::EsimDefunded,
            D::BalanceLow(_) => N::BalanceLow,
            D::BalanceDepleted(_) => N::BalanceDepleted,
            D::BalanceToppedUp(_) => N::BalanceToppedUp,
            D::BalanceAutoRefillSucceeded(_) => N::BalanceAutoRefillSucceeded,
            D::BalanceAutoRefillFailed(_) => N::BalanceAutoRefillFailed,
            D::GroupBalanceLow(_) => N::GroupBalanceLow,
            D::GroupFunded(_) => N::GroupFunded,
            D::GroupBalanceDepleted(_) => N::GroupBalanceDepleted,
            D::GroupDefunded(_) => N::GroupDefunded,
            D::EsimGroupAssigned(_) => N::EsimGroupAssigned,
            D::EsimGroupRemoved(_) => N::EsimGroupRemoved,
            D::Test(_) => N::Test,
        }
    }

    /// The schema of `name`'s payload (registered with `generator`, answering its
    /// `$ref`): the OpenAPI document's `webhooks` section describes each event by it.
    pub fn schema_of(name: EventName, generator: &mut SchemaGenerator) -> Schema {
        use EventName as N;
        match name {
            N::EsimProvisioned => generator.subschema_for::<EsimProvisionedData>(),
            N::EsimActivated => generator.subschema_for::<EsimActivatedData>(),
            N::EsimTerminated => generator.subschema_for::<EsimTerminatedData>(),
            N::EsimDataSuspended | N::EsimDataResumed => generator.subschema_for::<EsimData>(),
            N::EsimBalanceLow => generator.subschema_for::<EsimBalanceLowData>(),
            N::EsimBalanceDepleted => generator.subschema_for::<EsimBalanceDepletedData>(),
            N::EsimDefunded => generator.subschema_for::<EsimDefundedData>(),
            N::BalanceLow => generator.subschema_for::<BalanceLowData>(),
            N::BalanceDepleted => generator.subschema_for::<BalanceDepletedData>(),
            N::BalanceToppedUp => generator.subschema_for::<BalanceToppedUpData>(),
            N::BalanceAutoRefillSucceeded => generator.subschema_for::<AutoRefillSucceededData>(),
            N::BalanceAutoRefillFailed => generator.subschema_for::<AutoRefillFailedData>(),
            N::GroupBalanceLow => generator.subschema_for::<GroupBalanceLowData>(),
            N::GroupFunded => generator.subschema_for::<GroupFundedData>(),
            N::GroupBalanceDepleted => generator.subschema_for::<GroupData>(),
            N::GroupDefunded => generator.subschema_for::<GroupDefundedData>(),
            N::EsimGroupAssigned => generator.subschema_for::<EsimGroupAssignedData>(),
            N::EsimGroupRemoved => generator.subschema_for::<EsimGroupRemovedData>(),
            N::Test => generator.subschema_for::<TestData>(),
        }
    }

    /// The `data` object's JSON text, as delivered.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("event payloads serialize")
    }

    /// The ICCID of the eSIM an `esim.*` event is about.
    pub fn iccid(&self) -> Option<&str> {
        use EventData as D;
        let iccid = match self {
            D::EsimProvisioned(d) => &d.iccid,
            D::EsimActivated(d) => &d.iccid,
            D::EsimTerminated(d) => &d.iccid,
            D::EsimDataSuspended(d) | D::EsimDataResumed(d) => &d.iccid,
            D::EsimBalanceLow(d) => &d.iccid,
            D::EsimBalanceDepleted(d) => &d.iccid,
            D::EsimDefunded(d) => &d.iccid,
            D::EsimGroupAssigned(d) => &d.iccid,
            D::EsimGroupRemoved(d) => &d.iccid,
            _ => return None,
        };
        Some(iccid.as_str())
    }

    /// The `group_id` the event carries: a `group.*` event's group, or the group an
    /// eSIM was provisioned into, joined or left.
    pub fn group_id(&self) -> Option<&str> {
        use EventData as D;
        match self {
            D::EsimProvisioned(d) => d.group_id.as_deref(),
            D::EsimGroupAssigned(d) => Some(&d.group_id),
            D::EsimGroupRemoved(d) => Some(&d.group_id),
            D::GroupBalanceLow(d) => Some(&d.group_id),
            D::GroupFunded(d) => Some(&d.group_id),
            D::GroupBalanceDepleted(d) => Some(&d.group_id),
            D::GroupDefunded(d) => Some(&d.group_id),
            _ => None,
        }
    }
}

// ----- esim.* -----

/// The data of esim.data_suspended and esim.data_resumed: the fields every esim.* event carries
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
}

/// The data of esim.provisioned
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimProvisionedData {
    /// When it was provisioned
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// Its group, null when standalone
    #[schemars(extend("format" = "uuid"))]
    pub group_id: Option<String>,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// LPA activation code
    pub lpa_string: String,
    /// The eSIM status
    #[schemars(with = "schema::EsimStatus")]
    pub status: &'static str,
}

/// The data of esim.activated
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimActivatedData {
    /// First install
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub activated_at: Millis,
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The profile state on the device (ENABLED)
    #[schemars(with = "schema::EuiccState")]
    pub euicc_state: &'static str,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// The eSIM status
    #[schemars(with = "schema::EsimStatus")]
    pub status: &'static str,
}

/// The data of esim.terminated
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimTerminatedData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The wallet balance forfeited (displayed amount)
    #[schemars(with = "schema::Usd")]
    pub forfeited_usd: Decimal,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// Always terminated
    #[schemars(with = "String", extend("const" = "terminated"))]
    pub status: &'static str,
    /// When it was terminated
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub terminated_at: Millis,
}

/// The data of esim.balance_low
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimBalanceLowData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// The threshold crossed (5)
    #[schemars(with = "schema::Usd")]
    pub threshold_usd: Decimal,
    /// The wallet balance as reported
    #[schemars(with = "schema::Usd")]
    pub wallet_balance_usd: Decimal,
}

/// The data of esim.balance_depleted
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimBalanceDepletedData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// 0: data stops
    #[schemars(with = "schema::Usd")]
    pub wallet_balance_usd: Decimal,
}

/// The data of esim.defunded
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimDefundedData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// Credited to the reseller balance
    #[schemars(with = "schema::Usd")]
    pub returned_usd: Decimal,
}

/// The data of esim.group_assigned
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimGroupAssignedData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The group joined
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// Its name
    pub group_name: String,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
    /// After a pending move: the balance returned to the reseller balance
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::Usd")]
    pub returned_usd: Option<Decimal>,
}

/// The data of esim.group_removed
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct EsimGroupRemovedData {
    /// Your reference given at provisioning
    pub end_user_reference: Option<String>,
    /// The group left
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// Its name
    pub group_name: String,
    /// The eSIM
    #[schemars(with = "String")]
    pub iccid: Iccid,
    /// Your label given at provisioning
    pub label: Option<String>,
}

// ----- balance.* (the reseller balance) -----

/// The data of balance.low
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct BalanceLowData {
    /// The reseller balance
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The threshold crossed (5)
    #[schemars(with = "schema::Usd")]
    pub threshold_usd: Decimal,
}

/// The data of balance.depleted
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct BalanceDepletedData {
    /// The reseller balance: 0
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
}

/// Where the top-up came from
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // a variant's `///` would turn the enum's schema into a oneOf
pub enum TopUpSource {
    // The admin API.
    Manual,
    // An auto-refill charge that settled.
    AutoRefill,
}

/// The data of balance.topped_up
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct BalanceToppedUpData {
    /// The amount added
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// The reseller balance after it (same as new_balance_usd)
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The reseller balance after it
    #[schemars(with = "schema::Usd")]
    pub new_balance_usd: Decimal,
    /// Where the top-up came from
    pub source: TopUpSource,
    /// A manual top-up's id
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub topup_id: Option<String>,
}

/// The data of balance.auto_refill_succeeded
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct AutoRefillSucceededData {
    /// The amount charged
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// The reseller balance after it
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The payment processor's reference
    pub payment_intent_id: String,
}

/// The data of balance.auto_refill_failed
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct AutoRefillFailedData {
    /// The amount that could not be charged
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// The reseller balance
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// Why; auto-refill is then off
    #[schemars(with = "String", extend("enum" = ["card_declined", "authentication_required", "expired_card", "daily_limit_reached"]))]
    pub error_code: &'static str,
    /// Detail
    pub error_message: String,
}

// ----- group.* -----

/// The data of group.balance_depleted: the fields every group.* event carries
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct GroupData {
    /// The group balance as shown, after the event
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The group's name
    pub name: String,
}

/// The data of group.balance_low
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct GroupBalanceLowData {
    /// true when the reseller balance could not cover a refill within about 30 minutes
    pub account_underfunded: bool,
    /// The group balance as shown, after the event
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The group's name
    pub name: String,
    /// The group's refill amount
    #[schemars(with = "schema::Usd")]
    pub suggested_amount_usd: Decimal,
    /// The group's threshold crossed
    #[schemars(with = "schema::Usd")]
    pub threshold_usd: Decimal,
}

/// The data of group.funded
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct GroupFundedData {
    /// The amount funded
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// The group balance as shown, after the event
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The group's name
    pub name: String,
}

/// The data of group.defunded
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct GroupDefundedData {
    /// The group balance as shown, after the event
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The group's name
    pub name: String,
    /// Credited to the reseller balance
    #[schemars(with = "schema::Usd")]
    pub returned_usd: Decimal,
}

// ----- test -----

/// The data of test
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct TestData {
    /// A fixed text
    pub message: &'static str,
    /// The webhook tested
    pub webhook_id: String,
}
