//! The records the engine keeps. Plain data: every rule lives in the `impl Engine`
//! blocks of the resource modules (the wallet rules in `wallet`), so this file only
//! says what is remembered and why.

use crate::command::CardBehavior;
use crate::event::EventName;
use crate::ledger::{AccountSlots, WalletSlots};
use crate::time::Millis;
use crate::wallet::CrossingAlarm;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// An index newtype: the position of a record in its engine list, serialized as the
/// bare number (so the state digest and snapshots do not change), and usable as an
/// index of that list only.
macro_rules! index_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty) indexes $record:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);
        impl std::ops::Index<$name> for Vec<$record> {
            type Output = $record;
            fn index(&self, ix: $name) -> &$record {
                &self[ix.0 as usize]
            }
        }
        impl std::ops::IndexMut<$name> for Vec<$record> {
            fn index_mut(&mut self, ix: $name) -> &mut $record {
                &mut self[ix.0 as usize]
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

index_newtype!(
    /// An account: its position in `Engine::accounts`.
    AccountIx(u32) indexes Account
);
index_newtype!(
    /// An eSIM: its position in `Engine::esims`.
    EsimIx(u32) indexes Esim
);
index_newtype!(
    /// A group: its position in `Engine::groups`.
    GroupIx(u32) indexes Group
);
index_newtype!(
    /// A webhook: its position in `Engine::webhooks`.
    WebhookIx(u32) indexes Webhook
);

/// A webhook delivery: the key of `Engine::pending_deliveries`, and the number the
/// shell reports an outcome with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub u64);

/// Serializes a struct as the tuple of its fields, in order: records that were tuples
/// keep their serialized form (so the state digest and snapshots do not change).
macro_rules! serde_as_tuple {
    ($name:ident { $($field:ident: $ty:ty),+ $(,)? }) => {
        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                ($(&self.$field,)+).serialize(serializer)
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let ($($field,)+) = <($($ty,)+)>::deserialize(deserializer)?;
                Ok($name { $($field),+ })
            }
        }
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EsimStatus {
    Pending,
    Active,
    Suspended,
    Terminated,
}

impl EsimStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EsimStatus::Pending => "pending",
            EsimStatus::Active => "active",
            EsimStatus::Suspended => "suspended",
            EsimStatus::Terminated => "terminated",
        }
    }
    pub fn parse(text: &str) -> Option<EsimStatus> {
        [EsimStatus::Pending, EsimStatus::Active, EsimStatus::Suspended, EsimStatus::Terminated]
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EuiccState {
    Released,
    Downloaded,
    Installed,
    Enabled,
}

impl EuiccState {
    pub fn as_str(self) -> &'static str {
        match self {
            EuiccState::Released => "RELEASED",
            EuiccState::Downloaded => "DOWNLOADED",
            EuiccState::Installed => "INSTALLED",
            EuiccState::Enabled => "ENABLED",
        }
    }
}

/// The upstream view of one wallet (a standalone SIM's or a group's) and the state of
/// its reporting pipeline and low-balance notifications.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Wallet {
    pub slots: WalletSlots,
    /// Reporting is paused until then (set by every fund call).
    pub reporting_paused_until: Millis,
    /// A report timer is pending for usage not yet reported.
    pub report_scheduled: bool,
    /// esim.balance_low / depleted, or group.balance_low / depleted, once per crossing.
    /// Flattened: the state digest and snapshots keep the two flags as they were.
    #[serde(flatten)]
    pub alarm: CrossingAlarm,
    /// Data paused while a return is on its way (defund, move, group defund).
    pub paused: bool,
}

impl Wallet {
    pub fn new(slots: WalletSlots, alarm: CrossingAlarm) -> Self {
        Wallet { slots, reporting_paused_until: Millis(i64::MIN), report_scheduled: false, alarm, paused: false }
    }
}

/// A balance on its way back to the reseller balance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PendingReturn {
    /// eSIM defund: the exact credit taken off the SIM.
    Defund { amount: Decimal, settles_at: Millis },
    /// Adding a funded standalone eSIM to a group.
    Move { group: GroupIx, amount: Decimal, settles_at: Millis },
}

impl PendingReturn {
    pub fn amount(&self) -> Decimal {
        match self {
            PendingReturn::Defund { amount, .. } | PendingReturn::Move { amount, .. } => *amount,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Esim {
    pub id: String,
    pub iccid: String,
    pub account: AccountIx,
    pub lpa_string: String,
    pub status: EsimStatus,
    /// What the network says now (the live state).
    pub euicc_network: EuiccState,
    /// What we last read from the network (served when a network read fails).
    pub euicc_cached: EuiccState,
    pub end_user_reference: Option<String>,
    pub label: Option<String>,
    pub created_at: Millis,
    pub activated_at: Option<Millis>,
    pub terminated_at: Option<Millis>,
    /// The reseller's data switch (enable/disable).
    pub data_enabled: bool,
    pub throttle: String,
    pub wallet: Wallet,
    /// The upstream wallet exists once the SIM was first funded.
    pub wallet_created: bool,
    pub group: Option<GroupIx>,
    pub pending: Option<PendingReturn>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AutoRefill {
    pub enabled: bool,
    pub amount: Decimal,
    pub card: CardBehavior,
    /// Times of the charges started in the last 24 hours (bounded by the daily limit).
    pub recent_charges: Vec<Millis>,
    /// A charge is on its way (the card settles after a short delay).
    pub charge_in_flight: Option<Decimal>,
    pub last_error: Option<RefillError>,
}

/// Why the last auto-refill charge failed (decision 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefillError {
    pub code: String,
    pub message: String,
    pub at: Millis,
}
serde_as_tuple!(RefillError { code: String, message: String, at: Millis });

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Account {
    pub id: String,
    pub contact_email: String,
    pub company_name: Option<String>,
    pub created_at: Millis,
    pub frozen: bool,
    pub slots: AccountSlots,
    pub lifetime_topup: Decimal,
    pub lifetime_usage: Decimal,
    /// balance.low / balance.depleted of the reseller balance, once per crossing.
    #[serde(flatten)]
    pub balance_alarm: CrossingAlarm,
    /// eSIM indexes in provisioning order.
    pub esims: Vec<EsimIx>,
    /// Group indexes in creation order.
    pub groups: Vec<GroupIx>,
    /// Webhook indexes (deleted ones are removed).
    pub webhooks: Vec<WebhookIx>,
    pub max_groups: u32,
    pub max_group_size: u32,
    pub auto_refill: AutoRefill,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Group {
    pub id: String,
    pub account: AccountIx,
    pub name: String,
    pub low_balance_threshold: Decimal,
    pub refill_amount: Decimal,
    pub wallet: Wallet,
    /// Member eSIM indexes.
    pub members: BTreeSet<EsimIx>,
    /// Moves on their way in (they count against the size limit).
    pub incoming_moves: u32,
    pub defund: Option<GroupDefund>,
    /// group.balance_low is held back until this deadline while a card charge is on its way.
    pub low_event_waiting_until: Option<Millis>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A group defund on its way (decision 32): the exact credit taken off the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupDefund {
    pub amount: Decimal,
    pub settles_at: Millis,
}
serde_as_tuple!(GroupDefund { amount: Decimal, settles_at: Millis });

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Subscription {
    All,
    Events(BTreeSet<EventName>),
}

impl Subscription {
    pub fn covers(&self, name: EventName) -> bool {
        match self {
            Subscription::All => name != EventName::Test,
            Subscription::Events(set) => set.contains(&name),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    pub account: AccountIx,
    pub url: String,
    pub events: Vec<String>,
    pub subscription: Subscription,
    /// Sealed by the shell; opened only by the sender, to sign.
    pub signing_secret: crate::secret::SealedSecret,
    pub active: bool,
    pub failure_count: u32,
    pub last_triggered_at: Option<Millis>,
    pub last_failure_at: Option<Millis>,
    pub created_at: Millis,
    pub deleted: bool,
}

/// A delivery the engine is responsible for until it succeeds or is given up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryState {
    pub webhook: WebhookIx,
    pub event_id: String,
    pub event: EventName,
    pub body: String,
    pub attempt: u32,
    pub first_attempt_at: Millis,
    /// Handed out and waiting for its outcome (otherwise waiting for a retry timer).
    pub in_flight: bool,
    /// A `test` delivery: one attempt, outcome answered to the caller, counts nothing.
    pub test: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyRecord {
    pub digest: crate::secret::KeyDigest,
    pub account: AccountIx,
    pub revoked: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdempotencyEntry {
    pub fingerprint: [u8; 32],
    pub status: u16,
    pub body: String,
    /// The LPA text of a provisioning's QR code, drawn again into `body` on a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qr_text: Option<String>,
    /// A webhook creation's signing secret (sealed), shown again on a replay: the
    /// stored body holds an empty `signing_secret` in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<crate::secret::SealedSecret>,
    pub expires_at: Millis,
}

/// A stored answer in its account's expiry queue: with its expiry, which tells a key
/// stored again after it expired from the entry it replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredKey {
    pub expires_at: Millis,
    pub key: String,
}
serde_as_tuple!(StoredKey { expires_at: Millis, key: String });

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Faults {
    pub upstream_pause_fails: bool,
    pub network_read_fails: bool,
}

/// Which wallet a report timer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WalletOwner {
    Sim(EsimIx),
    Group(GroupIx),
}

pub use crate::timer::Timer;

/// Serializes a map whose keys are not strings as a list of `[key, value]` pairs, so
/// that JSON (digest, snapshots) can hold it.
pub mod map_as_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, K, V, D>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records that were tuples serialize as those tuples did: the state digest and
    /// every snapshot stay byte-identical.
    #[test]
    fn named_records_serialize_as_their_tuples() {
        let at = Millis(1_234);
        let amount = Decimal::new(1_999, 2);
        let same = |named: String, tuple: String| assert_eq!(named, tuple);
        same(
            serde_json::to_string(&GroupDefund { amount, settles_at: at }).unwrap(),
            serde_json::to_string(&(amount, at)).unwrap(),
        );
        let error = RefillError { code: "card_declined".into(), message: "declined".into(), at };
        same(
            serde_json::to_string(&error).unwrap(),
            serde_json::to_string(&("card_declined", "declined", at)).unwrap(),
        );
        let stored = StoredKey { expires_at: at, key: "k".into() };
        same(serde_json::to_string(&stored).unwrap(), serde_json::to_string(&(at, "k")).unwrap());
        let back: StoredKey = serde_json::from_str(&serde_json::to_string(&stored).unwrap()).unwrap();
        assert_eq!(back, stored);
    }
}
