//! Events: the names of the spec (plus `esim.defunded`), the envelope, and how an
//! event is emitted (to observers and to the account's subscribed webhooks).

use crate::engine::Engine;
use crate::event_log::{EventId, JsonData, KeptData, KeptEvent};
use crate::random::Purpose;
use crate::state::{AccountIx, EsimIx, EsimStatus, GroupIx, WalletOwner, WebhookIx};
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

pub use crate::event_name::EventName;

/// One emitted event: the delivery envelope plus the account it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The envelope `id` (`evt_...`): receivers de-duplicate retries by it.
    pub id: String,
    /// The account it belongs to: only its webhooks receive it.
    pub account: AccountIx,
    /// What happened.
    pub name: EventName,
    /// When it happened (service time).
    pub created_at: Millis,
    /// The event's own fields (decision 17).
    pub data: serde_json::Value,
}

impl Event {
    /// The exact bytes POSTed to receivers: `{"id","event","created_at","data"}`.
    pub fn envelope_bytes(&self) -> Vec<u8> {
        envelope_text(&self.id, self.name, self.created_at, &self.data.to_string()).into_bytes()
    }
}

/// The envelope of an event whose `data` object is the JSON text `data_json`: the bytes
/// serde_json writes for the struct `{id, event, created_at, data}`. The one writer of
/// envelopes, for deliveries and for the events API alike (decision 155).
pub(crate) fn envelope_text(id: &str, name: EventName, created_at: Millis, data_json: &str) -> String {
    let created_at = created_at.to_rfc3339();
    let mut out = String::with_capacity(48 + id.len() + created_at.len() + data_json.len());
    out.push_str(r#"{"id":"#);
    push_json_str(&mut out, id);
    out.push_str(r#","event":"#);
    push_json_str(&mut out, name.as_str());
    out.push_str(r#","created_at":"#);
    push_json_str(&mut out, &created_at);
    out.push_str(r#","data":"#);
    out.push_str(data_json);
    out.push('}');
    out
}

/// `text` as a JSON string, as serde_json writes it: text it would not escape (no
/// quote, backslash or control character: every id, name and time) is copied as it is.
fn push_json_str(out: &mut String, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(text).expect("strings serialize"));
    }
}

// ----- typed payloads (decision 17) -----
//
// Each event's own fields are a variant of one of the enums below, and the variant names
// the event, so a payload cannot go out under the wrong name. The common fields are
// added by [`Engine::emit_esim`] and [`Engine::emit_group`]. On the wire, `data` is a JSON
// object with its keys in alphabetical order (serde_json's map), whatever the field order
// here.

/// The fields every `esim.*` event carries (decision 17).
#[derive(Serialize)]
struct EsimFields<'a> {
    iccid: &'a str,
    end_user_reference: &'a Option<String>,
    label: &'a Option<String>,
}

/// The fields every `group.*` event carries (decision 17).
#[derive(Serialize)]
struct GroupFields<'a> {
    group_id: &'a str,
    name: &'a str,
    balance_usd: Decimal,
}

/// An `esim.*` event: its own fields, beside [`EsimFields`].
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum EsimEvent {
    /// `esim.provisioned`.
    Provisioned {
        lpa_string: String,
        status: &'static str,
        #[serde(with = "rfc3339")]
        created_at: Millis,
        group_id: Option<String>,
    },
    /// `esim.activated`.
    Activated {
        #[serde(with = "rfc3339")]
        activated_at: Millis,
        euicc_state: &'static str,
        status: &'static str,
    },
    /// `esim.terminated`, with what the wallet forfeited (displayed amount).
    Terminated {
        status: &'static str,
        #[serde(with = "rfc3339")]
        terminated_at: Millis,
        forfeited_usd: Decimal,
    },
    /// `esim.data_suspended`.
    DataSuspended {},
    /// `esim.data_resumed`.
    DataResumed {},
    /// `esim.balance_low` (decision 15).
    BalanceLow { wallet_balance_usd: Decimal, threshold_usd: Decimal },
    /// `esim.balance_depleted` (decision 15).
    BalanceDepleted { wallet_balance_usd: Decimal },
    /// `esim.defunded` (decision 9).
    Defunded { returned_usd: Decimal },
    /// `esim.group_assigned`; `returned_usd` only after a move.
    GroupAssigned {
        group_id: String,
        group_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        returned_usd: Option<Decimal>,
    },
    /// `esim.group_removed` (removed, or terminated: decision 58).
    GroupRemoved { group_id: String, group_name: String },
}

impl EsimEvent {
    /// The event this payload is.
    pub(crate) fn name(&self) -> EventName {
        match self {
            EsimEvent::Provisioned { .. } => EventName::EsimProvisioned,
            EsimEvent::Activated { .. } => EventName::EsimActivated,
            EsimEvent::Terminated { .. } => EventName::EsimTerminated,
            EsimEvent::DataSuspended {} => EventName::EsimDataSuspended,
            EsimEvent::DataResumed {} => EventName::EsimDataResumed,
            EsimEvent::BalanceLow { .. } => EventName::EsimBalanceLow,
            EsimEvent::BalanceDepleted { .. } => EventName::EsimBalanceDepleted,
            EsimEvent::Defunded { .. } => EventName::EsimDefunded,
            EsimEvent::GroupAssigned { .. } => EventName::EsimGroupAssigned,
            EsimEvent::GroupRemoved { .. } => EventName::EsimGroupRemoved,
        }
    }
}

/// A `group.*` event: its own fields, beside [`GroupFields`].
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum GroupEvent {
    /// `group.funded`.
    Funded { amount_usd: Decimal },
    /// `group.defunded` (decision 32).
    Defunded { returned_usd: Decimal },
    /// `group.balance_low` (decision 33); `account_underfunded` always present.
    BalanceLow { suggested_amount_usd: Decimal, threshold_usd: Decimal, account_underfunded: bool },
    /// `group.balance_depleted`.
    BalanceDepleted {},
}

impl GroupEvent {
    /// The event this payload is.
    pub(crate) fn name(&self) -> EventName {
        match self {
            GroupEvent::Funded { .. } => EventName::GroupFunded,
            GroupEvent::Defunded { .. } => EventName::GroupDefunded,
            GroupEvent::BalanceLow { .. } => EventName::GroupBalanceLow,
            GroupEvent::BalanceDepleted {} => EventName::GroupBalanceDepleted,
        }
    }
}

/// Where a top-up came from (`balance.topped_up`'s `source`).
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TopUpSource {
    /// The admin API.
    Manual,
    /// An auto-refill charge that settled.
    AutoRefill,
}

/// A `balance.*` event of the reseller balance: every field is its own (decision 17:
/// each carries `balance_usd`).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum BalanceEvent {
    /// `balance.low` (decision 16).
    Low { balance_usd: Decimal, threshold_usd: Decimal },
    /// `balance.depleted` (decision 16).
    Depleted { balance_usd: Decimal },
    /// `balance.topped_up`; `topup_id` for a manual top-up only.
    ToppedUp {
        amount_usd: Decimal,
        new_balance_usd: Decimal,
        balance_usd: Decimal,
        source: TopUpSource,
        #[serde(skip_serializing_if = "Option::is_none")]
        topup_id: Option<String>,
    },
    /// `balance.auto_refill_succeeded` (decision 34).
    AutoRefillSucceeded { amount_usd: Decimal, payment_intent_id: String, balance_usd: Decimal },
    /// `balance.auto_refill_failed` (decision 34).
    AutoRefillFailed { amount_usd: Decimal, error_code: &'static str, error_message: String, balance_usd: Decimal },
}

impl BalanceEvent {
    /// The event this payload is.
    pub(crate) fn name(&self) -> EventName {
        match self {
            BalanceEvent::Low { .. } => EventName::BalanceLow,
            BalanceEvent::Depleted { .. } => EventName::BalanceDepleted,
            BalanceEvent::ToppedUp { .. } => EventName::BalanceToppedUp,
            BalanceEvent::AutoRefillSucceeded { .. } => EventName::BalanceAutoRefillSucceeded,
            BalanceEvent::AutoRefillFailed { .. } => EventName::BalanceAutoRefillFailed,
        }
    }
}

/// The probe of `POST /webhooks/{id}/test` (decision 39).
#[derive(Serialize)]
pub(crate) struct TestEvent<'a> {
    pub(crate) webhook_id: &'a str,
    pub(crate) message: &'static str,
}

/// A payload as the JSON object `data` carries: the common fields and the event's own.
fn data_of(common: impl Serialize, own: impl Serialize) -> serde_json::Value {
    let mut data = serde_json::to_value(common).expect("event fields serialize");
    let serde_json::Value::Object(fields) = serde_json::to_value(own).expect("event fields serialize") else {
        unreachable!("every payload is a struct: a JSON object")
    };
    let map = data.as_object_mut().expect("common fields are an object");
    for (key, value) in fields {
        let previous = map.insert(key, value);
        assert!(previous.is_none(), "an event's own field never shadows a common one");
    }
    data
}

impl Engine {
    /// Emits an `esim.*` event: the common fields of the eSIM, then the event's own.
    pub(crate) fn emit_esim(&mut self, sim: EsimIx, event: EsimEvent) {
        let esim = &self.esims[sim];
        let common =
            EsimFields { iccid: &esim.iccid, end_user_reference: &esim.end_user_reference, label: &esim.label };
        let data = data_of(common, &event);
        let account = esim.account;
        let typed = self.typed_esim_event(sim, &event);
        let group = match (&typed, &event) {
            (Some(_), _) => None,
            (None, EsimEvent::Provisioned { group_id: Some(id), .. })
            | (None, EsimEvent::GroupAssigned { group_id: id, .. })
            | (None, EsimEvent::GroupRemoved { group_id: id, .. }) => self.group_index.get(id.as_str()).copied(),
            _ => None,
        };
        self.emit(account, event.name(), data, typed, Some(sim), group);
    }

    /// The typed kept form of `esim.provisioned` and `esim.activated` (decision 155),
    /// only when it renders back to exactly `event`: every value it leaves out is one
    /// [`Engine::typed_event_data`] finds again, unchanged, in the eSIM or group record
    /// (provisioning sets an eSIM's texts; no command changes them, nor a group's id).
    fn typed_esim_event(&self, sim: EsimIx, event: &EsimEvent) -> Option<KeptData> {
        match event {
            EsimEvent::Provisioned { lpa_string, status: "pending", created_at, group_id }
                if *created_at == self.now && *lpa_string == self.esims[sim].lpa.text() =>
            {
                // A provisioning into a group names the eSIM's group.
                let group = match group_id {
                    None => None,
                    Some(id) => Some(self.esims[sim].funding.group().filter(|&g| self.groups[g].id == *id)?),
                };
                Some(KeptData::Provisioned { sim, group })
            }
            EsimEvent::Activated { activated_at, euicc_state: "ENABLED", status } if *activated_at == self.now => {
                let status = EsimStatus::ALL.into_iter().find(|s| s.as_str() == *status)?;
                Some(KeptData::Activated { sim, status })
            }
            _ => None,
        }
    }

    /// The `data` of a typed kept event created at `created_at`, built as it was when
    /// it was emitted; `None` for one kept as JSON text.
    fn typed_event_data(&self, data: &KeptData, created_at: Millis) -> Option<serde_json::Value> {
        let (sim, event) = match *data {
            KeptData::Provisioned { sim, group } => {
                let event = EsimEvent::Provisioned {
                    lpa_string: self.esims[sim].lpa.text(),
                    status: "pending",
                    created_at,
                    group_id: group.map(|group| self.groups[group].id.clone()),
                };
                (sim, event)
            }
            KeptData::Activated { sim, status } => {
                let event =
                    EsimEvent::Activated { activated_at: created_at, euicc_state: "ENABLED", status: status.as_str() };
                (sim, event)
            }
            KeptData::Json(_) | KeptData::Legacy(_) => return None,
        };
        let esim = &self.esims[sim];
        let common =
            EsimFields { iccid: &esim.iccid, end_user_reference: &esim.end_user_reference, label: &esim.label };
        Some(data_of(common, &event))
    }

    /// A kept event's envelope: the bytes that were delivered when it was emitted.
    pub(crate) fn kept_envelope_text(&self, event: &KeptEvent) -> String {
        let id = event.id.text();
        match &event.data {
            KeptData::Json(json) => envelope_text(&id, json.name, event.created_at, &json.data),
            KeptData::Legacy(legacy) => legacy.envelope.to_string(),
            typed => {
                let data = self.typed_event_data(typed, event.created_at).expect("not JSON text: typed");
                envelope_text(&id, typed.name(), event.created_at, &data.to_string())
            }
        }
    }

    /// Emits a `group.*` event: the group's id, name and shown balance, then its own.
    pub(crate) fn emit_group(&mut self, group: GroupIx, event: GroupEvent) {
        let record = &self.groups[group];
        let balance_usd = self.shown_balance(WalletOwner::Group(group));
        let common = GroupFields { group_id: &record.id, name: &record.name, balance_usd };
        let data = data_of(common, &event);
        let account = record.account;
        self.emit(account, event.name(), data, None, None, Some(group));
    }

    /// Emits a `balance.*` event of the account's reseller balance.
    pub(crate) fn emit_balance(&mut self, account: AccountIx, event: BalanceEvent) {
        let data = serde_json::to_value(&event).expect("event fields serialize");
        self.emit(account, event.name(), data, None, None, None);
    }

    /// Emits an event of an account: queued for observers, handed to every active
    /// webhook of the account subscribed to it, and kept for the events API (`typed`,
    /// or else its `data` as JSON text with the eSIM and group it names). Only the typed
    /// emitters above call it.
    fn emit(
        &mut self,
        account: AccountIx,
        name: EventName,
        data: serde_json::Value,
        typed: Option<KeptData>,
        sim: Option<EsimIx>,
        group: Option<GroupIx>,
    ) {
        let id = EventId(self.random_bytes::<12>(Purpose::EventId));
        let now = self.now;
        let targets: Vec<WebhookIx> = self.accounts[account]
            .webhooks
            .iter()
            .copied()
            .filter(|&w| {
                let webhook = &self.webhooks[w];
                webhook.active && !webhook.deleted && webhook.subscription.covers(name)
            })
            .collect();
        // The JSON text only where it is used: a typed event with no webhook to deliver
        // to (most, at scale) needs none (decision 155).
        let data_json = (typed.is_none() || !targets.is_empty()).then(|| data.to_string());
        let event = Event { id: id.text(), account, name, created_at: now, data };
        if let (Some(data_json), false) = (&data_json, targets.is_empty()) {
            let body = envelope_text(&event.id, name, now, data_json);
            for webhook in targets {
                self.start_delivery(webhook, &event, body.clone(), false);
            }
        }
        let data = match (typed, data_json) {
            (Some(typed), _) => typed,
            (None, data_json) => {
                let data = data_json.expect("written for every event kept as JSON").into_boxed_str();
                KeptData::Json(Box::new(JsonData { name, sim, group, data }))
            }
        };
        debug_assert_eq!(data.name(), name);
        self.event_log.push(KeptEvent { created_at: now, id, account, data }, now);
        self.events.push_back(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one envelope writer writes what serde_json writes for the envelope struct,
    /// escapes included.
    #[test]
    fn envelopes_are_the_bytes_serde_writes() {
        #[derive(Serialize)]
        struct Envelope<'a> {
            id: &'a str,
            event: &'static str,
            created_at: String,
            data: &'a serde_json::Value,
        }
        let data = serde_json::json!({ "label": "a \"b\" \\ c\td\u{7f} é 😀", "n": 1.5 });
        for id in ["evt_0123456789abcdef00ff109a", "evt_\"quoted\"", "evt_back\\slash", "evt_\u{1}", "evt_é\u{7f}"] {
            let created_at = Millis(1_767_225_600_123);
            let want = serde_json::to_string(&Envelope {
                id,
                event: EventName::EsimActivated.as_str(),
                created_at: created_at.to_rfc3339(),
                data: &data,
            })
            .unwrap();
            assert_eq!(envelope_text(id, EventName::EsimActivated, created_at, &data.to_string()), want, "{id}");
        }
    }
}
