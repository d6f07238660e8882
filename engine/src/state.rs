//! The records the engine keeps. Plain data: every rule lives in the `impl Engine`
//! blocks of the resource modules (the wallet rules in `wallet`), so this file only
//! says what is remembered and why.

use crate::alarm::CrossingAlarm;
use crate::event_name::EventName;
use crate::ledger::{AccountSlots, WalletSlots};
use crate::time::Millis;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use crate::ids::{AccountIx, DeliveryId, EsimIx, GroupIx, WalletOwner, WebhookIx};

/// Each record list is indexed by its own index newtype (see `ids`), and by nothing else.
macro_rules! indexed_by {
    ($($ix:ty => $record:ty),+ $(,)?) => {$(
        impl std::ops::Index<$ix> for Vec<$record> {
            type Output = $record;
            fn index(&self, ix: $ix) -> &$record {
                &self[ix.index()]
            }
        }
        impl std::ops::IndexMut<$ix> for Vec<$record> {
            fn index_mut(&mut self, ix: $ix) -> &mut $record {
                &mut self[ix.index()]
            }
        }
    )+};
}

indexed_by!(AccountIx => Account, EsimIx => Esim, GroupIx => Group, WebhookIx => Webhook);

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

/// An eSIM's status as the API shows it (decision 13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EsimStatus {
    /// Provisioned, never installed (and back here on enable if never installed).
    Pending,
    /// Installed at least once, data enabled.
    Active,
    /// Data disabled by the reseller.
    Suspended,
    /// Terminated for good: nothing changes it again.
    Terminated,
}

impl EsimStatus {
    /// The API's text (`pending`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EsimStatus::Pending => "pending",
            EsimStatus::Active => "active",
            EsimStatus::Suspended => "suspended",
            EsimStatus::Terminated => "terminated",
        }
    }
    /// Every status, in the order of [`EsimStatus::index`].
    pub const ALL: [EsimStatus; 4] =
        [EsimStatus::Pending, EsimStatus::Active, EsimStatus::Suspended, EsimStatus::Terminated];

    /// Its place in [`EsimStatus::ALL`] (the index of a per-status count).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the rules move an eSIM from this status to `next` (decision 13): a
    /// terminated eSIM never changes again; install makes a pending one active, the data
    /// switch moves between suspended and pending or active, and any other may end.
    pub fn may_become(self, next: EsimStatus) -> bool {
        use EsimStatus::*;
        match (self, next) {
            (Terminated, _) => false,
            (_, Terminated) => true,
            (Pending, Active) | (Pending, Suspended) | (Active, Suspended) => true,
            (Suspended, Active) | (Suspended, Pending) => true,
            _ => false,
        }
    }

    /// The status of the API's text (the `status` filter of the list).
    pub fn parse(text: &str) -> Option<EsimStatus> {
        EsimStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// The profile's state on the device, as the network reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EuiccState {
    /// Made, not downloaded yet.
    Released,
    /// Downloaded to a device.
    Downloaded,
    /// Installed on a device.
    Installed,
    /// Installed and enabled: data can flow.
    Enabled,
}

impl EuiccState {
    /// The API's text (`RELEASED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EuiccState::Released => "RELEASED",
            EuiccState::Downloaded => "DOWNLOADED",
            EuiccState::Installed => "INSTALLED",
            EuiccState::Enabled => "ENABLED",
        }
    }
}

/// The upstream view of one wallet (a standalone eSIM's or a group's) and the state of
/// its reporting pipeline and low-balance notifications. Whether its data is paused is
/// not kept here: its holder knows (a return on its way), and writes it as the wallet's
/// `paused` field (see `WalletForm`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Wallet {
    /// Its ledger slots: where its money is.
    pub slots: WalletSlots,
    /// Reporting is paused until then (set by every fund call).
    pub reporting_paused_until: Millis,
    /// A report timer is pending for usage not yet reported.
    pub report_scheduled: bool,
    /// esim.balance_low / depleted, or group.balance_low / depleted, once per crossing.
    /// Flattened: the state digest and snapshots keep the two flags as they were.
    #[serde(flatten)]
    pub alarm: CrossingAlarm,
}

impl Wallet {
    /// A wallet with nothing charged, reporting not paused.
    pub fn new(slots: WalletSlots, alarm: CrossingAlarm) -> Self {
        Wallet { slots, reporting_paused_until: Millis(i64::MIN), report_scheduled: false, alarm }
    }
}

/// A wallet as the state (digest, snapshots) writes it: its fields, its alarm's two
/// flags, then `paused` (data paused while a return is on its way), the flag the wallet
/// kept before its holder's state said it. The serialized form is unchanged. Written and
/// read field by field, not with `#[serde(flatten)]` (the same bytes): flattened, every
/// eSIM's wallet went through serde's buffered map when a snapshot was read.
struct WalletForm<'a> {
    wallet: &'a Wallet,
    paused: bool,
}

impl Serialize for WalletForm<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (low_armed, depleted_sent) = self.wallet.alarm.flags();
        let mut form = serializer.serialize_struct("Wallet", 6)?;
        form.serialize_field("slots", &self.wallet.slots)?;
        form.serialize_field("reporting_paused_until", &self.wallet.reporting_paused_until)?;
        form.serialize_field("report_scheduled", &self.wallet.report_scheduled)?;
        form.serialize_field("low_armed", &low_armed)?;
        form.serialize_field("depleted_sent", &depleted_sent)?;
        form.serialize_field("paused", &self.paused)?;
        form.end()
    }
}

/// The fields of a written wallet (see [`WalletForm`]).
#[derive(Deserialize)]
struct WalletFields {
    slots: WalletSlots,
    reporting_paused_until: Millis,
    report_scheduled: bool,
    low_armed: bool,
    depleted_sent: bool,
    paused: bool,
}

impl WalletFields {
    fn wallet(&self) -> Wallet {
        Wallet {
            slots: self.slots,
            reporting_paused_until: self.reporting_paused_until,
            report_scheduled: self.report_scheduled,
            alarm: CrossingAlarm::from_flags(self.low_armed, self.depleted_sent),
        }
    }
}

/// A balance on its way back to the reseller balance.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PendingReturn {
    /// eSIM defund: the exact credit taken off the eSIM.
    Defund {
        /// The exact credit on its way.
        amount: Decimal,
        /// When it settles, or the report it waits for (docs/architecture.md, rule 5).
        settles_at: Millis,
    },
    /// Adding a funded standalone eSIM to a group.
    Move {
        /// The group it joins when the credit is back.
        group: GroupIx,
        /// The exact credit on its way.
        amount: Decimal,
        /// When it settles, or the report it waits for (docs/architecture.md, rule 5).
        settles_at: Millis,
    },
}

impl PendingReturn {
    /// The exact amount on its way.
    pub fn amount(&self) -> Decimal {
        match self {
            PendingReturn::Defund { amount, .. } | PendingReturn::Move { amount, .. } => *amount,
        }
    }
}

/// Where an eSIM's money is, in one value instead of four flags that had to agree (its
/// upstream wallet made, its group, a return on its way, its data paused for it). Each
/// variant is a state the rules reach; what the flags could also say (a member with a
/// return on its way, a return from a wallet never funded, data paused with nothing on
/// its way) cannot be written.
#[derive(Clone, Debug)]
pub enum Funding {
    /// Standalone and never funded: no upstream wallet yet, so a defund is
    /// WALLET_NOT_READY (decision 10).
    NoWallet,
    /// Standalone with its own upstream wallet, made by its first fund.
    Wallet,
    /// Standalone, its wallet's whole credit on its way back (a defund, or a move into a
    /// group: decisions 8 and 30); its data is paused until the return settles.
    Returning(PendingReturn),
    /// A group member: it spends the group's wallet, its own holds nothing (decision 28).
    /// `own_wallet` does not follow from the membership: an eSIM funded before it joined
    /// keeps its upstream wallet for when it leaves, one provisioned into the group has
    /// none (so a defund after it leaves is NO_BALANCE_TO_RETURN, or WALLET_NOT_READY).
    Member {
        /// The group whose wallet it spends.
        group: GroupIx,
        /// It was funded before it joined.
        own_wallet: bool,
    },
}

impl Funding {
    /// The group it is a member of.
    pub fn group(&self) -> Option<GroupIx> {
        match self {
            Funding::Member { group, .. } => Some(*group),
            _ => None,
        }
    }

    /// The return on its way.
    pub fn pending(&self) -> Option<&PendingReturn> {
        match self {
            Funding::Returning(pending) => Some(pending),
            _ => None,
        }
    }

    /// The upstream wallet exists: it was funded once (decision 10).
    pub fn has_wallet(&self) -> bool {
        match self {
            Funding::NoWallet => false,
            Funding::Wallet | Funding::Returning(_) => true,
            Funding::Member { own_wallet, .. } => *own_wallet,
        }
    }

    /// Standalone, with nothing on its way: what a fund, a defund, a move into a group
    /// or a join starts from.
    pub fn is_settled_standalone(&self) -> bool {
        matches!(self, Funding::NoWallet | Funding::Wallet)
    }

    /// Leaves its group (removed, or terminated), keeping its own wallet if it had one;
    /// the group it left.
    pub fn leave_group(&mut self) -> Option<GroupIx> {
        let Funding::Member { group, own_wallet } = *self else { return None };
        *self = if own_wallet { Funding::Wallet } else { Funding::NoWallet };
        Some(group)
    }
}

/// An eSIM's activation code, `LPA:1$<SMDP_ADDRESS>$<matching id>` (decision 23), kept
/// as its 29-character matching id when it has the service's SM-DP+ address (every code
/// the engine makes), so that a million eSIMs do not each hold the same prefix on the
/// heap (decision 126). Written as the whole text, as before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActivationCode {
    /// `LPA:1$<SMDP_ADDRESS>$` followed by these 29 ASCII characters.
    Standard([u8; 29]),
    /// Any other text (read from a state written with another address).
    Other(Box<str>),
}

impl ActivationCode {
    /// The code of its text.
    pub fn new(text: &str) -> ActivationCode {
        let matching = text
            .strip_prefix("LPA:1$")
            .and_then(|rest| rest.strip_prefix(crate::codes::SMDP_ADDRESS))
            .and_then(|rest| rest.strip_prefix('$'))
            .and_then(|id| <[u8; 29]>::try_from(id.as_bytes()).ok());
        match matching {
            Some(id) => ActivationCode::Standard(id),
            None => ActivationCode::Other(text.into()),
        }
    }

    /// The whole text (`LPA:1$...`).
    pub fn text(&self) -> String {
        match self {
            ActivationCode::Standard(id) => {
                // Built from a &str of the same bytes: valid UTF-8.
                let id = std::str::from_utf8(id).expect("the matching id was text");
                crate::codes::lpa_string(id)
            }
            ActivationCode::Other(text) => text.to_string(),
        }
    }
}

impl Serialize for ActivationCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for ActivationCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(ActivationCode::new(&String::deserialize(deserializer)?))
    }
}

/// An eSIM's speed limit as its Kbps, 0 for `NO_LIMIT` (decision 126): two bytes instead
/// of a heap string per eSIM. Written as the API's text, as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle(u16);

impl Throttle {
    /// No speed limit.
    pub const NO_LIMIT: Throttle = Throttle(0);

    /// The throttle of `NO_LIMIT` or `SPEED_<n>_KBPS` (n from 1 to 65535, no leading
    /// zero); which speeds the API accepts is `esim::is_valid_speed`'s rule.
    pub fn parse(text: &str) -> Option<Throttle> {
        if text == "NO_LIMIT" {
            return Some(Throttle::NO_LIMIT);
        }
        let digits = text.strip_prefix("SPEED_")?.strip_suffix("_KBPS")?;
        let kbps: u16 = digits.parse().ok()?;
        (kbps > 0 && kbps.to_string() == digits).then_some(Throttle(kbps))
    }
}

impl std::fmt::Display for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("NO_LIMIT"),
            kbps => write!(f, "SPEED_{kbps}_KBPS"),
        }
    }
}

impl Serialize for Throttle {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Throttle {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Throttle::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("no throttle is written {text:?}")))
    }
}

/// One provisioned eSIM: its profile, its switches, its wallet and where its money is.
/// Its id, activation code and throttle are kept without heap strings (decision 126).
#[derive(Clone, Debug)]
pub struct Esim {
    /// The API's `id` (written as the hyphenated lowercase text).
    pub id: uuid::Uuid,
    /// The 19-digit ICCID (decision 22): how the API names it.
    pub iccid: crate::codes::Iccid,
    /// The account that provisioned it; no other account sees it.
    pub account: AccountIx,
    /// The activation code (decision 23), written as `lpa_string`.
    pub lpa: ActivationCode,
    /// What the API shows (decision 13).
    pub status: EsimStatus,
    /// What the network says now (the live state).
    pub euicc_network: EuiccState,
    /// What we last read from the network (served when a network read fails).
    pub euicc_cached: EuiccState,
    /// The reseller's reference for its customer, echoed in events.
    pub end_user_reference: Option<String>,
    /// The reseller's label, echoed in events.
    pub label: Option<String>,
    /// When it was provisioned.
    pub created_at: Millis,
    /// Its first install (decision 13: `active` from then on).
    pub activated_at: Option<Millis>,
    /// When it was terminated.
    pub terminated_at: Option<Millis>,
    /// The reseller's data switch (enable/disable).
    pub data_enabled: bool,
    /// The speed limit (`NO_LIMIT` or `SPEED_<n>_KBPS`).
    pub throttle: Throttle,
    /// Its own upstream wallet (its slots exist from provisioning, funded or not).
    pub wallet: Wallet,
    /// Where its money is (no wallet yet, its own, on its way back, or a group's).
    pub funding: Funding,
}

/// An eSIM as the state writes it: the fields it had when its funding was four flags
/// (`wallet.paused`, `wallet_created`, `group`, `pending`), so that the state digest and
/// snapshots are unchanged; reading refuses a combination no rule makes.
impl Serialize for Esim {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let funding = &self.funding;
        let mut record = serializer.serialize_struct("Esim", 18)?;
        record.serialize_field("id", &self.id)?;
        record.serialize_field("iccid", &self.iccid)?;
        record.serialize_field("account", &self.account)?;
        record.serialize_field("lpa_string", &self.lpa)?;
        record.serialize_field("status", &self.status)?;
        record.serialize_field("euicc_network", &self.euicc_network)?;
        record.serialize_field("euicc_cached", &self.euicc_cached)?;
        record.serialize_field("end_user_reference", &self.end_user_reference)?;
        record.serialize_field("label", &self.label)?;
        record.serialize_field("created_at", &self.created_at)?;
        record.serialize_field("activated_at", &self.activated_at)?;
        record.serialize_field("terminated_at", &self.terminated_at)?;
        record.serialize_field("data_enabled", &self.data_enabled)?;
        record.serialize_field("throttle", &self.throttle)?;
        let paused = funding.pending().is_some();
        record.serialize_field("wallet", &WalletForm { wallet: &self.wallet, paused })?;
        record.serialize_field("wallet_created", &funding.has_wallet())?;
        record.serialize_field("group", &funding.group())?;
        record.serialize_field("pending", &funding.pending())?;
        record.end()
    }
}

/// The fields of a written eSIM (see `impl Serialize for Esim`).
#[derive(Deserialize)]
struct EsimForm {
    id: uuid::Uuid,
    iccid: crate::codes::Iccid,
    account: AccountIx,
    lpa_string: ActivationCode,
    status: EsimStatus,
    euicc_network: EuiccState,
    euicc_cached: EuiccState,
    end_user_reference: Option<String>,
    label: Option<String>,
    created_at: Millis,
    activated_at: Option<Millis>,
    terminated_at: Option<Millis>,
    data_enabled: bool,
    throttle: Throttle,
    wallet: WalletFields,
    wallet_created: bool,
    group: Option<GroupIx>,
    pending: Option<PendingReturn>,
}

impl<'de> Deserialize<'de> for Esim {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = EsimForm::deserialize(deserializer)?;
        let paused = form.wallet.paused;
        let funding = match (form.wallet_created, form.group, form.pending) {
            (false, None, None) if !paused => Funding::NoWallet,
            (true, None, None) if !paused => Funding::Wallet,
            (true, None, Some(pending)) if paused => Funding::Returning(pending),
            (own_wallet, Some(group), None) if !paused => Funding::Member { group, own_wallet },
            (wallet_created, group, pending) => {
                return Err(serde::de::Error::custom(format!(
                    "eSIM {}: no rule makes wallet_created {wallet_created}, group {group:?}, a pending return {} \
                     and data paused {paused}",
                    form.iccid,
                    pending.is_some()
                )))
            }
        };
        Ok(Esim {
            id: form.id,
            iccid: form.iccid,
            account: form.account,
            lpa: form.lpa_string,
            status: form.status,
            euicc_network: form.euicc_network,
            euicc_cached: form.euicc_cached,
            end_user_reference: form.end_user_reference,
            label: form.label,
            created_at: form.created_at,
            activated_at: form.activated_at,
            terminated_at: form.terminated_at,
            data_enabled: form.data_enabled,
            throttle: form.throttle,
            wallet: form.wallet.wallet(),
            funding,
        })
    }
}

/// The simulated saved card of an account's auto-refill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CardBehavior {
    /// Every charge succeeds.
    Ok,
    /// Every charge fails with `card_declined`.
    Declined,
    /// Every charge fails with `authentication_required` (3-D Secure the service
    /// cannot complete unattended).
    RequiresAction,
    /// Every charge fails with `expired_card`.
    Expired,
}

impl CardBehavior {
    /// Every card, in declaration order (scripts and tests iterate over them).
    pub const ALL: [CardBehavior; 4] =
        [CardBehavior::Ok, CardBehavior::Declined, CardBehavior::RequiresAction, CardBehavior::Expired];
}

/// The name of a card as the API and scripts write it (`requires_action`), from its serde
/// form: one spelling for the HTTP body, the journal and the simulation's scripts.
impl std::str::FromStr for CardBehavior {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(text.to_string()))
            .map_err(|_| "card must be one of ok, declined, requires_action, expired".to_string())
    }
}

impl std::fmt::Display for CardBehavior {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => f.write_str(&name),
            _ => Err(std::fmt::Error),
        }
    }
}

/// The operator's auto-refill of a reseller balance (decision 34).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AutoRefill {
    /// Off after a failed charge or the daily limit, until the operator turns it on.
    pub enabled: bool,
    /// What one charge adds to the reseller balance.
    pub amount: Decimal,
    /// How the simulated card answers.
    pub card: CardBehavior,
    /// Times of the charges started in the last 24 hours (bounded by the daily limit).
    pub recent_charges: Vec<Millis>,
    /// A charge is on its way (the card settles after a short delay).
    pub charge_in_flight: Option<Decimal>,
    /// The last failed charge, shown in the account record (decision 19).
    pub last_error: Option<RefillError>,
}

/// Why the last auto-refill charge failed (decision 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefillError {
    /// The machine code (`card_declined`, ...).
    pub code: String,
    /// The human text.
    pub message: String,
    /// When the charge failed.
    pub at: Millis,
}
serde_as_tuple!(RefillError { code: String, message: String, at: Millis });

/// A reseller account.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Account {
    /// The API's `id`.
    pub id: String,
    /// Who to contact; also how a restart finds the demo account (decision 62).
    pub contact_email: String,
    /// The company, when given.
    pub company_name: Option<String>,
    /// When the operator created it.
    pub created_at: Millis,
    /// An operator freeze: no new spend and no data (decision 20).
    pub frozen: bool,
    /// Its fixed ledger slots.
    pub slots: AccountSlots,
    /// Every top-up ever, manual and auto-refill (the account record's `lifetime_topup_usd`).
    pub lifetime_topup: Decimal,
    /// Every fee and fund ever (the account record's `lifetime_usage_usd`).
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
    /// Groups it may have (spec default 10).
    pub max_groups: u32,
    /// eSIMs a group may hold (spec default 500).
    pub max_group_size: u32,
    /// Its auto-refill settings and state.
    pub auto_refill: AutoRefill,
}

/// A shared-balance group: one wallet its members spend.
#[derive(Clone, Debug)]
pub struct Group {
    /// The API's `id` (uuid).
    pub id: String,
    /// The account that created it.
    pub account: AccountIx,
    /// Unique per account, trimmed (decision 26).
    pub name: String,
    /// `group.balance_low` below this (decision 33).
    pub low_balance_threshold: Decimal,
    /// What the account should top up when the group runs low (`suggested_amount_usd`).
    pub refill_amount: Decimal,
    /// The group's upstream wallet.
    pub wallet: Wallet,
    /// Member eSIM indexes.
    pub members: BTreeSet<EsimIx>,
    /// Moves on their way in (they count against the size limit).
    pub incoming_moves: u32,
    /// A defund on its way: data of every member pauses until it settles (decision 32).
    pub defund: Option<GroupDefund>,
    /// group.balance_low is held back until this deadline while a card charge is on its way.
    pub low_event_waiting_until: Option<Millis>,
    /// When it was created.
    pub created_at: Millis,
    /// When it last changed (an update, a fund, a settled defund).
    pub updated_at: Millis,
}

/// A group as the state writes it: its wallet's `paused` is its defund on its way (the
/// flag the wallet kept before), so that the state digest and snapshots are unchanged.
impl Serialize for Group {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut record = serializer.serialize_struct("Group", 12)?;
        record.serialize_field("id", &self.id)?;
        record.serialize_field("account", &self.account)?;
        record.serialize_field("name", &self.name)?;
        record.serialize_field("low_balance_threshold", &self.low_balance_threshold)?;
        record.serialize_field("refill_amount", &self.refill_amount)?;
        let paused = self.defund.is_some();
        record.serialize_field("wallet", &WalletForm { wallet: &self.wallet, paused })?;
        record.serialize_field("members", &self.members)?;
        record.serialize_field("incoming_moves", &self.incoming_moves)?;
        record.serialize_field("defund", &self.defund)?;
        record.serialize_field("low_event_waiting_until", &self.low_event_waiting_until)?;
        record.serialize_field("created_at", &self.created_at)?;
        record.serialize_field("updated_at", &self.updated_at)?;
        record.end()
    }
}

/// The fields of a written group (see `impl Serialize for Group`).
#[derive(Deserialize)]
struct GroupForm {
    id: String,
    account: AccountIx,
    name: String,
    low_balance_threshold: Decimal,
    refill_amount: Decimal,
    wallet: WalletFields,
    members: BTreeSet<EsimIx>,
    incoming_moves: u32,
    defund: Option<GroupDefund>,
    low_event_waiting_until: Option<Millis>,
    created_at: Millis,
    updated_at: Millis,
}

impl<'de> Deserialize<'de> for Group {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = GroupForm::deserialize(deserializer)?;
        if form.wallet.paused != form.defund.is_some() {
            return Err(serde::de::Error::custom(format!(
                "group {}: data paused {} with a defund on its way {}",
                form.id,
                form.wallet.paused,
                form.defund.is_some()
            )));
        }
        Ok(Group {
            id: form.id,
            account: form.account,
            name: form.name,
            low_balance_threshold: form.low_balance_threshold,
            refill_amount: form.refill_amount,
            wallet: form.wallet.wallet(),
            members: form.members,
            incoming_moves: form.incoming_moves,
            defund: form.defund,
            low_event_waiting_until: form.low_event_waiting_until,
            created_at: form.created_at,
            updated_at: form.updated_at,
        })
    }
}

/// A group defund on its way (decision 32): the exact credit taken off the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupDefund {
    /// The exact credit taken off the group.
    pub amount: Decimal,
    /// When it settles (settlement waits for nothing else).
    pub settles_at: Millis,
}
serde_as_tuple!(GroupDefund { amount: Decimal, settles_at: Millis });

/// Which events a webhook receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Subscription {
    /// `["*"]`: every subscribable event, now and later.
    All,
    /// Exactly these events.
    Events(BTreeSet<EventName>),
}

impl Subscription {
    /// Whether an event goes to this webhook (`test` only ever to the one tested).
    pub fn covers(&self, name: EventName) -> bool {
        match self {
            Subscription::All => name != EventName::Test,
            Subscription::Events(set) => set.contains(&name),
        }
    }
}

/// A registered webhook.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Webhook {
    /// The API's `id`.
    pub id: String,
    /// The account whose events it receives.
    pub account: AccountIx,
    /// Where deliveries go (checked at registration, decision 35).
    pub url: String,
    /// The event names as registered, shown back as given.
    pub events: Vec<String>,
    /// What those names cover.
    pub subscription: Subscription,
    /// Sealed by the shell; opened only by the sender, to sign.
    pub signing_secret: crate::secret::SealedSecret,
    /// The secret before the last rotation, and until when it still signs (decision 116).
    #[serde(default)]
    pub previous_secret: Option<(crate::secret::SealedSecret, Millis)>,
    /// Inactive webhooks receive nothing (decision 38).
    pub active: bool,
    /// Consecutive failed attempts; at `WEBHOOK_DISABLE_AT` it turns inactive.
    pub failure_count: u32,
    /// Its last delivery attempt.
    pub last_triggered_at: Option<Millis>,
    /// Its last failed attempt.
    pub last_failure_at: Option<Millis>,
    /// When it was registered.
    pub created_at: Millis,
    /// Deleted: kept so indexes stay stable, invisible to the API.
    pub deleted: bool,
    /// Its last delivery attempts, oldest first (`GET /webhooks/{id}/deliveries`; at
    /// most `DELIVERY_LOG_PER_WEBHOOK_MAX`, none older than `EVENT_RETENTION_MS`).
    #[serde(default)]
    pub delivery_log: std::collections::VecDeque<DeliveryAttempt>,
}

/// How a webhook POST ended, as the shell saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryResult {
    /// The receiver answered with this HTTP status (2xx is success).
    Status(u16),
    /// No answer within the delivery timeout.
    Timeout,
    /// No connection (refused, DNS, TLS): the text says which.
    Failed(String),
}

impl DeliveryResult {
    /// Whether the receiver accepted the delivery: any 2xx status.
    pub fn is_success(&self) -> bool {
        matches!(self, DeliveryResult::Status(200..=299))
    }
}

/// One finished delivery attempt, as the delivery log shows it (decision 118).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    /// The delivery (one event to one webhook); its attempts share it.
    pub delivery_id: u64,
    /// The event's envelope id (the same on every attempt and every resend).
    pub event_id: String,
    /// The event's name.
    pub event: EventName,
    /// 1 for the first attempt of a delivery, then counting its retries.
    pub attempt: u32,
    /// A manual resend (`POST /events/{id}/resend`): never retried, counts nothing.
    pub manual: bool,
    /// Service time the attempt was handed to the sender.
    pub attempted_at: Millis,
    /// What the sender saw.
    pub result: DeliveryResult,
    /// How long the POST took on the sender's wall clock (None when not measured).
    pub duration_ms: Option<u64>,
    /// When the next attempt of this delivery is due, if one was scheduled.
    pub next_retry_at: Option<Millis>,
}

/// A delivery the engine is responsible for until it succeeds or is given up.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryState {
    /// The webhook it goes to.
    pub webhook: WebhookIx,
    /// The event's envelope id (same for every attempt).
    pub event_id: String,
    /// The event's name.
    pub event: EventName,
    /// The exact envelope bytes, sent again on retries.
    pub body: String,
    /// Attempts made so far (the next one's header is this plus 1).
    pub attempt: u32,
    /// Retries stop 3 days after it (decision 38).
    pub first_attempt_at: Millis,
    /// Handed out and waiting for its outcome (otherwise waiting for a retry timer).
    pub in_flight: bool,
    /// A `test` delivery: one attempt, outcome answered to the caller, counts nothing.
    pub test: bool,
    /// A manual resend: one attempt, counts nothing (decision 118).
    #[serde(default)]
    pub manual: bool,
    /// Service time of the last hand-out (the delivery log's `attempted_at`).
    #[serde(default)]
    pub handed_out_at: Millis,
}

/// An API key, as its digest only (decision 69).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyRecord {
    /// SHA-256 of the key: the key itself never reaches the engine.
    pub digest: crate::secret::KeyDigest,
    /// The account it authenticates.
    pub account: AccountIx,
    /// Refused from now on; the record stays for `limits::REVOKED_KEY_RETENTION_MS`
    /// (revoking it again meanwhile is not a 404), then a timer drops it (decision 231).
    pub revoked: bool,
    /// Its first 12 characters, shown in the key list (`None` for keys made before
    /// the list existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// When it was made (`None` for keys made before the list existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Millis>,
    /// When it was revoked: `Some` exactly when `revoked` (a revoked key written by an
    /// earlier build has none, and is dropped when its snapshot is read, decision 231).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Millis>,
}

/// A stored answer of an `Idempotency-Key` (decision 40).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdempotencyEntry {
    /// SHA-256 of the request: the same key with another request is a conflict.
    pub fingerprint: [u8; 32],
    /// The stored HTTP status.
    pub status: u16,
    /// The stored body, replayed byte for byte.
    pub body: String,
    /// The LPA text of a provisioning's QR code, drawn again into `body` on a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qr_text: Option<String>,
    /// A webhook creation's signing secret (sealed), shown again on a replay: the
    /// stored body holds an empty `signing_secret` in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<crate::secret::SealedSecret>,
    /// When it is dropped.
    pub expires_at: Millis,
}

/// A stored answer in its account's expiry queue: with its expiry, which tells a key
/// stored again after it expired from the entry it replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredKey {
    /// When the key's entry expires.
    pub expires_at: Millis,
    /// The `Idempotency-Key`.
    pub key: String,
}
serde_as_tuple!(StoredKey { expires_at: Millis, key: String });

/// Upstream faults switched on by the sandbox (and the simulation).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Faults {
    /// Pausing data upstream fails: eSIM and group defunds and moves answer 502, nothing moved.
    pub upstream_pause_fails: bool,
    /// Network reads fail: the eSIM detail falls back to the cached `euicc_state` (decision 63).
    pub network_read_fails: bool,
}

/// The API keys, by the first half of their digest ([`crate::secret::KeyDigest::id`]).
/// Looked up on every reseller request: a hash table finds a key with one cache miss
/// where the B-tree it replaced walked four or five nodes, each a miss at 10,000
/// accounts (issue 15, decision 195). Its order never shows: it is written (snapshots,
/// the state digest) as the B-tree was, pairs in key order, and iterated only in id
/// order ([`KeyTable::sorted`]) or into a list sorted by a total order of the caller's.
/// A `hashbrown` table given the hash of each key: the id is the first half of a SHA-256
/// digest of a key the service drew at random (no client chooses one), so its low 64
/// bits are a hash already; no hasher with a random seed is involved.
///
/// Beside it, each account's active keys (decision 232): a key operation of an account
/// touches its own keys only, however many keys other accounts, or its own revoked
/// ones, hold. The index is derived from the records (rebuilt when a snapshot is read,
/// never written), so every change goes through the methods below that keep both.
#[derive(Clone, Debug, Default)]
pub struct KeyTable {
    table: hashbrown::HashTable<(u128, KeyRecord)>,
    /// Per account, the ids of its active keys, in id order (so the index read back
    /// from a snapshot is the one kept live).
    active: BTreeMap<AccountIx, Vec<u128>>,
}

/// The hash of a key id: its low 64 bits (see [`KeyTable`]).
fn key_hash(id: u128) -> u64 {
    id as u64
}

impl KeyTable {
    /// The key of this id.
    pub fn get(&self, id: &u128) -> Option<&KeyRecord> {
        self.table.find(key_hash(*id), |(key, _)| key == id).map(|(_, record)| record)
    }

    /// Adds a key; the one it replaced, if any (its index entry goes with it).
    pub fn insert(&mut self, id: u128, record: KeyRecord) -> Option<KeyRecord> {
        assert_eq!(record.revoked, record.revoked_at.is_some(), "a revoked key says when it was revoked");
        let (account, active) = (record.account, !record.revoked);
        let replaced = match self.table.entry(key_hash(id), |(key, _)| *key == id, |(key, _)| key_hash(*key)) {
            hashbrown::hash_table::Entry::Occupied(mut held) => Some(std::mem::replace(&mut held.get_mut().1, record)),
            hashbrown::hash_table::Entry::Vacant(free) => {
                free.insert((id, record));
                None
            }
        };
        if let Some(old) = &replaced {
            self.unindex(old.account, id);
        }
        if active {
            let ids = self.active.entry(account).or_default();
            if let Err(at) = ids.binary_search(&id) {
                ids.insert(at, id);
            }
        }
        replaced
    }

    /// Marks an active key revoked at `at` and takes it out of its account's index;
    /// `false` (nothing changed) when there is no such key or it is revoked already.
    pub fn revoke(&mut self, id: u128, at: Millis) -> bool {
        let Some((_, record)) = self.table.find_mut(key_hash(id), |(key, _)| *key == id) else { return false };
        if record.revoked {
            return false;
        }
        record.revoked = true;
        record.revoked_at = Some(at);
        let account = record.account;
        self.unindex(account, id);
        true
    }

    /// Drops a key's record for good (a revoked key past its retention).
    pub fn remove(&mut self, id: u128) -> Option<KeyRecord> {
        let held = self.table.find_entry(key_hash(id), |(key, _)| *key == id).ok()?;
        let ((_, record), _) = held.remove();
        self.unindex(record.account, id);
        Some(record)
    }

    /// Takes `id` out of `account`'s active keys, if it is there.
    fn unindex(&mut self, account: AccountIx, id: u128) {
        if let Some(ids) = self.active.get_mut(&account) {
            if let Ok(at) = ids.binary_search(&id) {
                ids.remove(at);
            }
            if ids.is_empty() {
                self.active.remove(&account);
            }
        }
    }

    /// The ids of `account`'s active keys, in id order: what a key operation of the
    /// account reads, never the whole table.
    pub fn active_ids(&self, account: AccountIx) -> &[u128] {
        self.active.get(&account).map_or(&[], Vec::as_slice)
    }

    /// A record the account index does not name: only for the test that key operations
    /// read the index, not the table.
    #[cfg(test)]
    pub(crate) fn insert_unindexed(&mut self, id: u128, record: KeyRecord) {
        self.table.insert_unique(key_hash(id), (id, record), |(key, _)| key_hash(*key));
    }

    /// How many keys (revoked ones within their retention included).
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Every key in the table's own order, for a caller that orders what it keeps by a
    /// total order of its own (so the table's order reaches nothing); otherwise
    /// [`KeyTable::sorted`].
    pub fn unordered(&self) -> impl Iterator<Item = (&u128, &KeyRecord)> {
        self.table.iter().map(|(id, record)| (id, record))
    }

    /// Every key, in id order (the B-tree's order).
    pub fn sorted(&self) -> Vec<(&u128, &KeyRecord)> {
        let mut pairs: Vec<_> = self.unordered().collect();
        pairs.sort_unstable_by_key(|(id, _)| **id);
        pairs
    }
}

impl Serialize for KeyTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As `map_as_pairs` wrote the B-tree: a sequence of (id, record) in id order.
        serializer.collect_seq(self.sorted())
    }
}

impl<'de> Deserialize<'de> for KeyTable {
    /// Reads the pairs in id order and rebuilds the account index from them. A revoked
    /// key without a revocation time (written by a build before retention) is dropped
    /// here: nothing says when its retention would end, and a revoked key authenticates
    /// nothing (decision 231).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(u128, KeyRecord)>::deserialize(deserializer)?;
        let mut table = KeyTable::default();
        table.table.reserve(pairs.len(), |(key, _)| key_hash(*key));
        let mut previous = None;
        for (id, record) in pairs {
            // Written in id order, so a repeated id is next to its twin.
            if previous == Some(id) || table.get(&id).is_some() {
                return Err(serde::de::Error::custom(format!("the key id {id} is written twice")));
            }
            previous = Some(id);
            if record.revoked != record.revoked_at.is_some() {
                if record.revoked_at.is_some() {
                    return Err(serde::de::Error::custom(format!("the active key {id} has a revocation time")));
                }
                continue;
            }
            table.insert(id, record);
        }
        Ok(table)
    }
}

/// Serializes a map whose keys are not strings as a list of `[key, value]` pairs, so
/// that JSON (digest, snapshots) can hold it.
pub mod map_as_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    /// Writes the map as `[key, value]` pairs.
    pub fn serialize<K: Serialize, V: Serialize, S: Serializer>(
        map: &BTreeMap<K, V>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(map.iter())
    }

    /// Reads the map back from its pairs.
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

    const ID: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";

    /// The compact id, activation code and throttle (decision 126) write the text they
    /// replaced and read it back: the state digest and snapshots are unchanged.
    #[test]
    fn compact_esim_fields_write_the_text_they_replaced() {
        let same = |value: String, text: &str| assert_eq!(value, serde_json::to_string(text).unwrap());
        let code = crate::codes::lpa_string(&crate::codes::matching_id([7; 16]));
        let compact = ActivationCode::new(&code);
        assert!(matches!(compact, ActivationCode::Standard(_)), "the service's own codes are kept compact");
        assert_eq!(compact.text(), code);
        same(serde_json::to_string(&compact).unwrap(), &code);
        for other in ["LPA:1$x$y", "LPA:1$smdp.esim-reseller.example$SHORT", ""] {
            let kept = ActivationCode::new(other);
            assert_eq!(kept, ActivationCode::Other(other.into()));
            let back: ActivationCode = serde_json::from_str(&serde_json::to_string(&kept).unwrap()).unwrap();
            assert_eq!(back.text(), other);
        }
        let mut speeds = vec!["NO_LIMIT".to_string()];
        speeds.extend((1..=30).map(|k| format!("SPEED_{}_KBPS", k * 100)));
        speeds.extend([3_500, 4_000, 4_500, 5_000].map(|k| format!("SPEED_{k}_KBPS")));
        for speed in &speeds {
            assert!(crate::esim::is_valid_speed(speed));
            let throttle = Throttle::parse(speed).unwrap();
            assert_eq!(throttle.to_string(), *speed);
            same(serde_json::to_string(&throttle).unwrap(), speed);
            assert_eq!(serde_json::from_str::<Throttle>(&serde_json::to_string(speed).unwrap()).unwrap(), throttle);
        }
        for bad in ["SPEED_0_KBPS", "SPEED_0100_KBPS", "SPEED_70000_KBPS", "no_limit", "SPEED__KBPS"] {
            assert_eq!(Throttle::parse(bad), None, "{bad}");
            assert!(serde_json::from_str::<Throttle>(&serde_json::to_string(bad).unwrap()).is_err());
        }
        let id = uuid::Uuid::parse_str(ID).unwrap();
        same(serde_json::to_string(&id).unwrap(), ID);
    }

    #[test]
    fn the_key_table_is_written_as_the_b_tree_it_replaced() {
        let mut table = KeyTable::default();
        let mut tree = std::collections::BTreeMap::new();
        for n in 0..300u32 {
            let digest = crate::secret::KeyDigest::of(&format!("rsk_{n}"));
            let record = KeyRecord {
                digest,
                account: AccountIx(n % 7),
                revoked: n % 5 == 0,
                prefix: (n % 2 == 0).then(|| format!("rsk_{n}")),
                created_at: (n % 3 == 0).then_some(Millis(i64::from(n))),
                revoked_at: (n % 5 == 0).then_some(Millis(i64::from(n) + 1)),
            };
            assert!(table.insert(digest.id(), record.clone()).is_none());
            tree.insert(digest.id(), record);
        }
        let mut written_tree = Vec::new();
        map_as_pairs::serialize(&tree, &mut serde_json::Serializer::new(&mut written_tree)).unwrap();
        let written = serde_json::to_vec(&table).unwrap();
        assert_eq!(String::from_utf8(written.clone()).unwrap(), String::from_utf8(written_tree).unwrap());
        let back: KeyTable = serde_json::from_slice(&written).unwrap();
        assert_eq!(back.len(), 300);
        assert_eq!(serde_json::to_vec(&back).unwrap(), written, "read back and written again: the same bytes");
        for (id, record) in &tree {
            assert_eq!(
                back.get(id).map(|r| (r.digest, r.account, r.revoked)),
                Some((record.digest, record.account, record.revoked))
            );
        }
        assert!(back.get(&7).is_none(), "an id nobody holds");
        let sorted: Vec<u128> = back.sorted().into_iter().map(|(id, _)| *id).collect();
        assert_eq!(sorted, tree.keys().copied().collect::<Vec<_>>());
        // The same id written twice is a damaged state, not a key silently dropped.
        let text = String::from_utf8(written).unwrap();
        let first = &text[1..text.find("],[").unwrap() + 1];
        let twice = format!("[{first},{first}]");
        assert!(serde_json::from_str::<KeyTable>(&twice).is_err());
        // The account index is rebuilt from the records: each account's active keys, in
        // id order (the tree's), as the live table keeps them.
        for account in 0..7 {
            let expected: Vec<u128> =
                tree.iter().filter(|(_, r)| r.account == AccountIx(account) && !r.revoked).map(|(id, _)| *id).collect();
            assert_eq!(back.active_ids(AccountIx(account)), expected, "account {account}");
            assert_eq!(table.active_ids(AccountIx(account)), expected, "account {account}, live");
        }
    }

    #[test]
    fn the_key_index_follows_every_change_and_old_revoked_keys_are_dropped_on_read() {
        let record = |n: u32, account: u32| KeyRecord {
            digest: crate::secret::KeyDigest::of(&format!("rsk_{n}")),
            account: AccountIx(account),
            revoked: false,
            prefix: None,
            created_at: Some(Millis(1)),
            revoked_at: None,
        };
        let mut table = KeyTable::default();
        for n in 0..4 {
            table.insert(record(n, n % 2).digest.id(), record(n, n % 2));
        }
        let id = |n: u32| record(n, 0).digest.id();
        let sorted = |mut ids: Vec<u128>| {
            ids.sort_unstable();
            ids
        };
        assert_eq!(table.active_ids(AccountIx(0)), sorted(vec![id(0), id(2)]));
        assert!(table.revoke(id(2), Millis(5)));
        assert!(!table.revoke(id(2), Millis(6)), "a second revocation changes nothing");
        assert_eq!(table.get(&id(2)).unwrap().revoked_at, Some(Millis(5)));
        assert_eq!(table.active_ids(AccountIx(0)), [id(0)]);
        assert_eq!(table.len(), 4, "a revoked key is kept until its retention ends");
        assert!(table.remove(id(2)).is_some_and(|r| r.revoked));
        assert!(table.remove(id(0)).is_some());
        assert!(table.active_ids(AccountIx(0)).is_empty());
        assert_eq!(table.active_ids(AccountIx(1)), sorted(vec![id(1), id(3)]));
        // A revoked key written by a build before retention (no revocation time) is
        // dropped when read; an active key with a revocation time is damage.
        let mut legacy = record(9, 1);
        legacy.revoked = true;
        let written = serde_json::to_string(&vec![(id(9), legacy.clone()), (id(1), record(1, 1))]).unwrap();
        let back: KeyTable = serde_json::from_str(&written).unwrap();
        assert_eq!((back.len(), back.active_ids(AccountIx(1))), (1, &[id(1)][..]));
        legacy.revoked = false;
        legacy.revoked_at = Some(Millis(3));
        assert!(serde_json::from_str::<KeyTable>(&serde_json::to_string(&vec![(id(9), legacy)]).unwrap()).is_err());
    }

    fn esim(funding: Funding) -> Esim {
        let mut ledger = crate::ledger::Ledger::default();
        ledger.open_account(AccountIx(0));
        Esim {
            id: uuid::Uuid::parse_str(ID).unwrap(),
            iccid: crate::codes::Iccid::parse("8944100000000000017").expect("19 digits"),
            account: AccountIx(0),
            lpa: ActivationCode::new("LPA:1$x$y"),
            status: EsimStatus::Active,
            euicc_network: EuiccState::Enabled,
            euicc_cached: EuiccState::Enabled,
            end_user_reference: None,
            label: Some("l".into()),
            created_at: Millis(1),
            activated_at: Some(Millis(2)),
            terminated_at: None,
            data_enabled: true,
            throttle: Throttle::NO_LIMIT,
            wallet: Wallet::new(ledger.open_esim_wallet(AccountIx(0)), CrossingAlarm::UNARMED),
            funding,
        }
    }

    /// The funding of an eSIM is written as the four flags it replaced, in their places
    /// (`paused` last in the wallet, then `wallet_created`, `group`, `pending`), and read
    /// back as the same state: the state digest and snapshots stay byte-identical.
    #[test]
    fn funding_is_written_as_the_flags_it_replaced() {
        let wallet = r#""wallet":{"slots":{"credit":6,"unreported":7,"reported":8},"reporting_paused_until":-9223372036854775808,"report_scheduled":false,"low_armed":false,"depleted_sent":false,"#;
        let head = r#"{"id":"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9","iccid":"8944100000000000017","account":0,"lpa_string":"LPA:1$x$y","status":"Active","euicc_network":"Enabled","euicc_cached":"Enabled","end_user_reference":null,"label":"l","created_at":1,"activated_at":2,"terminated_at":null,"data_enabled":true,"throttle":"NO_LIMIT","#;
        let pending = PendingReturn::Move { group: GroupIx(3), amount: Decimal::new(1_999, 2), settles_at: Millis(9) };
        let cases = [
            (Funding::NoWallet, r#""paused":false},"wallet_created":false,"group":null,"pending":null}"#),
            (Funding::Wallet, r#""paused":false},"wallet_created":true,"group":null,"pending":null}"#),
            (
                Funding::Returning(pending),
                r#""paused":true},"wallet_created":true,"group":null,"pending":{"Move":{"group":3,"amount":19.99,"settles_at":9}}}"#,
            ),
            (
                Funding::Member { group: GroupIx(3), own_wallet: false },
                r#""paused":false},"wallet_created":false,"group":3,"pending":null}"#,
            ),
            (
                Funding::Member { group: GroupIx(3), own_wallet: true },
                r#""paused":false},"wallet_created":true,"group":3,"pending":null}"#,
            ),
        ];
        for (funding, tail) in cases {
            let text = serde_json::to_string(&esim(funding)).unwrap();
            assert_eq!(text, format!("{head}{wallet}{tail}"));
            let back: Esim = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), text);
        }
        // What no rule makes is refused: a return from a wallet never funded, a member
        // with a return on its way, data paused with nothing on its way.
        for tail in [
            r#""paused":true},"wallet_created":false,"group":null,"pending":{"Defund":{"amount":1,"settles_at":9}}}"#,
            r#""paused":true},"wallet_created":true,"group":3,"pending":{"Defund":{"amount":1,"settles_at":9}}}"#,
            r#""paused":true},"wallet_created":true,"group":null,"pending":null}"#,
        ] {
            assert!(serde_json::from_str::<Esim>(&format!("{head}{wallet}{tail}")).is_err(), "{tail}");
        }
    }
}
