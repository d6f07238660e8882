//! Events: the emitted event and its envelope, and what the emitters say (each event's
//! own fields, beside the common fields of its eSIM or group). How an event is emitted
//! (to observers, webhooks and the event log) is the engine's, in `emit`.

use crate::codes::Iccid;
use crate::event_data::*;
use crate::ids::AccountIx;
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
use serde::Serialize;

pub(crate) use crate::event_data::TopUpSource;
pub use crate::event_name::EventName;

/// One emitted event: the delivery envelope plus the account it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    /// The envelope `id` (`evt_...`): receivers de-duplicate retries by it.
    pub id: String,
    /// The account it belongs to: only its webhooks receive it.
    pub account: AccountIx,
    /// What happened.
    pub name: EventName,
    /// When it happened (service time).
    pub created_at: Millis,
    /// The event's fields (decision 17), typed: its variant is `name`'s.
    pub data: EventData,
}

impl Event {
    /// The exact bytes POSTed to receivers: `{"id","event","created_at","data"}`.
    pub fn envelope_bytes(&self) -> Vec<u8> {
        assert_eq!(self.name, self.data.name(), "an event's payload is its name's");
        envelope_text(&self.id, self.name, self.created_at, &self.data.to_json()).into_bytes()
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

// ----- what the emitters say (decision 17) -----
//
// An emitter names the event and gives its own fields, as a variant of one of the enums
// below; [`Engine::emit_esim`] and [`Engine::emit_group`] add the common fields of the
// eSIM or group, making the [`EventData`] that goes out, so a payload cannot go out under
// the wrong name or without its common fields.

/// The fields every `esim.*` event carries (decision 17), from the eSIM record.
#[derive(Serialize)]
pub(crate) struct EsimCommon {
    pub(crate) iccid: Iccid,
    pub(crate) end_user_reference: Option<String>,
    pub(crate) label: Option<String>,
}

/// The fields every `group.*` event carries (decision 17), from the group record.
#[derive(Serialize)]
pub(crate) struct GroupCommon {
    pub(crate) group_id: String,
    pub(crate) name: String,
    pub(crate) balance_usd: Decimal,
}

/// An `esim.*` event: its own fields, beside [`EsimCommon`].
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
    /// The payload: the eSIM's common fields and this event's own.
    pub(crate) fn into_data(self, common: EsimCommon) -> EventData {
        use EsimEvent as E;
        use EventData as D;
        let EsimCommon { iccid, end_user_reference, label } = common;
        match self {
            E::Provisioned { lpa_string, status, created_at, group_id } => D::EsimProvisioned(EsimProvisionedData {
                created_at,
                end_user_reference,
                group_id,
                iccid,
                label,
                lpa_string,
                status,
            }),
            E::Activated { activated_at, euicc_state, status } => D::EsimActivated(EsimActivatedData {
                activated_at,
                end_user_reference,
                euicc_state,
                iccid,
                label,
                status,
            }),
            E::Terminated { status, terminated_at, forfeited_usd } => D::EsimTerminated(EsimTerminatedData {
                end_user_reference,
                forfeited_usd,
                iccid,
                label,
                status,
                terminated_at,
            }),
            E::DataSuspended {} => D::EsimDataSuspended(EsimData { end_user_reference, iccid, label }),
            E::DataResumed {} => D::EsimDataResumed(EsimData { end_user_reference, iccid, label }),
            E::BalanceLow { wallet_balance_usd, threshold_usd } => D::EsimBalanceLow(EsimBalanceLowData {
                end_user_reference,
                iccid,
                label,
                threshold_usd,
                wallet_balance_usd,
            }),
            E::BalanceDepleted { wallet_balance_usd } => {
                D::EsimBalanceDepleted(EsimBalanceDepletedData { end_user_reference, iccid, label, wallet_balance_usd })
            }
            E::Defunded { returned_usd } => {
                D::EsimDefunded(EsimDefundedData { end_user_reference, iccid, label, returned_usd })
            }
            E::GroupAssigned { group_id, group_name, returned_usd } => D::EsimGroupAssigned(EsimGroupAssignedData {
                end_user_reference,
                group_id,
                group_name,
                iccid,
                label,
                returned_usd,
            }),
            E::GroupRemoved { group_id, group_name } => {
                D::EsimGroupRemoved(EsimGroupRemovedData { end_user_reference, group_id, group_name, iccid, label })
            }
        }
    }
}

/// A `group.*` event: its own fields, beside [`GroupCommon`].
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
    /// The payload: the group's common fields and this event's own.
    pub(crate) fn into_data(self, common: GroupCommon) -> EventData {
        use EventData as D;
        use GroupEvent as E;
        let GroupCommon { group_id, name, balance_usd } = common;
        match self {
            E::Funded { amount_usd } => D::GroupFunded(GroupFundedData { amount_usd, balance_usd, group_id, name }),
            E::Defunded { returned_usd } => {
                D::GroupDefunded(GroupDefundedData { balance_usd, group_id, name, returned_usd })
            }
            E::BalanceLow { suggested_amount_usd, threshold_usd, account_underfunded } => {
                D::GroupBalanceLow(GroupBalanceLowData {
                    account_underfunded,
                    balance_usd,
                    group_id,
                    name,
                    suggested_amount_usd,
                    threshold_usd,
                })
            }
            E::BalanceDepleted {} => D::GroupBalanceDepleted(GroupData { balance_usd, group_id, name }),
        }
    }
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
    /// The payload: this event's fields.
    pub(crate) fn into_data(self) -> EventData {
        use BalanceEvent as E;
        use EventData as D;
        match self {
            E::Low { balance_usd, threshold_usd } => D::BalanceLow(BalanceLowData { balance_usd, threshold_usd }),
            E::Depleted { balance_usd } => D::BalanceDepleted(BalanceDepletedData { balance_usd }),
            E::ToppedUp { amount_usd, new_balance_usd, balance_usd, source, topup_id } => {
                D::BalanceToppedUp(BalanceToppedUpData { amount_usd, balance_usd, new_balance_usd, source, topup_id })
            }
            E::AutoRefillSucceeded { amount_usd, payment_intent_id, balance_usd } => {
                D::BalanceAutoRefillSucceeded(AutoRefillSucceededData { amount_usd, balance_usd, payment_intent_id })
            }
            E::AutoRefillFailed { amount_usd, error_code, error_message, balance_usd } => {
                D::BalanceAutoRefillFailed(AutoRefillFailedData { amount_usd, balance_usd, error_code, error_message })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Decimal {
        text.parse().unwrap()
    }

    /// A payload as the engine wrote `data` before [`EventData`]: the common fields and
    /// the event's own merged into a `serde_json::Value` object (keys in alphabetical
    /// order), the oracle of the wire bytes.
    fn value_of(common: impl Serialize, own: impl Serialize) -> String {
        let mut data = serde_json::to_value(common).unwrap();
        let serde_json::Value::Object(fields) = serde_json::to_value(own).unwrap() else { unreachable!() };
        let map = data.as_object_mut().unwrap();
        for (key, value) in fields {
            assert!(map.insert(key, value).is_none(), "an event's own field never shadows a common one");
        }
        data.to_string()
    }

    fn esim_commons() -> Vec<EsimCommon> {
        let text = |t: &str| Some(t.to_string());
        vec![
            EsimCommon { iccid: Iccid::parse("8901000000000000012").unwrap(), end_user_reference: None, label: None },
            EsimCommon {
                iccid: Iccid::parse("8901000000000000020").unwrap(),
                end_user_reference: text("order \"9\" \\ é"),
                label: text("Phone\t😀\u{1}"),
            },
        ]
    }

    /// Every event's bytes are exactly those of the `Value` object the engine wrote
    /// before the typed payloads: keys in alphabetical order, the same numbers (scale
    /// kept, as `Decimal` writes them), `null` and absent fields alike.
    #[test]
    fn typed_payloads_write_the_bytes_of_the_value_object() {
        let at = Millis(1_767_225_600_123);
        let amounts = [dec("0"), dec("5"), dec("19.99"), dec("0.10"), dec("12.3450"), dec("-1.5")];
        let mut kinds = std::collections::BTreeSet::new();
        for amount in amounts {
            for group_id in [None, Some("5f0c1a2b-0000-4000-8000-000000000001".to_string())] {
                let returned = group_id.as_ref().map(|_| amount);
                let esim_events = [
                    EsimEvent::Provisioned {
                        lpa_string: "LPA:1$smdp.example.com$ABC".into(),
                        status: "pending",
                        created_at: at,
                        group_id: group_id.clone(),
                    },
                    EsimEvent::Activated { activated_at: at, euicc_state: "ENABLED", status: "active" },
                    EsimEvent::Terminated { status: "terminated", terminated_at: at, forfeited_usd: amount },
                    EsimEvent::DataSuspended {},
                    EsimEvent::DataResumed {},
                    EsimEvent::BalanceLow { wallet_balance_usd: amount, threshold_usd: dec("5") },
                    EsimEvent::BalanceDepleted { wallet_balance_usd: amount },
                    EsimEvent::Defunded { returned_usd: amount },
                    EsimEvent::GroupAssigned {
                        group_id: "g-1".into(),
                        group_name: "Fleet \"A\"".into(),
                        returned_usd: returned,
                    },
                    EsimEvent::GroupRemoved { group_id: "g-1".into(), group_name: "Fleet".into() },
                ];
                for event in esim_events {
                    for common in esim_commons() {
                        let want = value_of(&common, &event);
                        let data = event.clone().into_data(common);
                        check_one(&mut kinds, data, want);
                    }
                }
                let group_events = [
                    GroupEvent::Funded { amount_usd: amount },
                    GroupEvent::Defunded { returned_usd: amount },
                    GroupEvent::BalanceLow {
                        suggested_amount_usd: amount,
                        threshold_usd: dec("2.50"),
                        account_underfunded: group_id.is_some(),
                    },
                    GroupEvent::BalanceDepleted {},
                ];
                for event in group_events {
                    let common = GroupCommon { group_id: "g-1".into(), name: "Fleet é".into(), balance_usd: amount };
                    let want = value_of(&common, &event);
                    check_one(&mut kinds, event.into_data(common), want);
                }
                let balance_events = [
                    BalanceEvent::Low { balance_usd: amount, threshold_usd: dec("5") },
                    BalanceEvent::Depleted { balance_usd: amount },
                    BalanceEvent::ToppedUp {
                        amount_usd: amount,
                        new_balance_usd: amount,
                        balance_usd: amount,
                        source: if group_id.is_some() { TopUpSource::Manual } else { TopUpSource::AutoRefill },
                        topup_id: group_id.as_ref().map(|_| "top_0123".to_string()),
                    },
                    BalanceEvent::AutoRefillSucceeded {
                        amount_usd: amount,
                        payment_intent_id: "pi_1".into(),
                        balance_usd: amount,
                    },
                    BalanceEvent::AutoRefillFailed {
                        amount_usd: amount,
                        error_code: "card_declined",
                        error_message: "the card was declined".into(),
                        balance_usd: amount,
                    },
                ];
                for event in balance_events {
                    let want = serde_json::to_value(&event).unwrap().to_string();
                    check_one(&mut kinds, event.into_data(), want);
                }
            }
        }
        #[derive(Serialize)]
        struct OldTest<'a> {
            webhook_id: &'a str,
            message: &'static str,
        }
        let old = OldTest { webhook_id: "wh_1", message: "This is a test event." };
        let test = EventData::Test(TestData { message: "This is a test event.", webhook_id: "wh_1".into() });
        check_one(&mut kinds, test, serde_json::to_value(&old).unwrap().to_string());
        let every: std::collections::BTreeSet<EventName> =
            EventName::SUBSCRIBABLE.into_iter().chain([EventName::Test]).collect();
        assert_eq!(kinds, every, "every event kind is compared");
    }

    fn check_one(kinds: &mut std::collections::BTreeSet<EventName>, data: EventData, want: String) {
        kinds.insert(data.name());
        assert_eq!(data.to_json(), want, "{:?}", data.name());
    }

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
