//! Events: the names of the spec (plus `esim.defunded`), the envelope, and how an
//! event is emitted (to observers and to the account's subscribed webhooks).

use crate::engine::Engine;
use crate::state::{AccountIx, WebhookIx};
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Every event the service emits; its wire name is [`EventName::as_str`]. The enum, not
/// the text, is kept in the state and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventName {
    /// An eSIM was provisioned.
    EsimProvisioned,
    /// A profile was installed for the first time.
    EsimActivated,
    /// An eSIM was terminated (with what its wallet forfeited).
    EsimTerminated,
    /// Data was disabled by the reseller.
    EsimDataSuspended,
    /// Data was enabled again.
    EsimDataResumed,
    /// An eSIM wallet fell below $5, as the reporting pipeline saw it (decision 15).
    EsimBalanceLow,
    /// An eSIM wallet reached $0 (decision 15).
    EsimBalanceDepleted,
    /// An eSIM defund settled (decision 9).
    EsimDefunded,
    /// The reseller balance fell below $5 (decision 16).
    BalanceLow,
    /// The reseller balance reached $0 (decision 16).
    BalanceDepleted,
    /// The reseller balance was topped up (manually or by auto-refill).
    BalanceToppedUp,
    /// An auto-refill charge succeeded (decision 34).
    BalanceAutoRefillSucceeded,
    /// An auto-refill charge failed, or the daily limit stopped it (decision 34).
    BalanceAutoRefillFailed,
    /// A group balance fell below its threshold (decision 33).
    GroupBalanceLow,
    /// A group was funded.
    GroupFunded,
    /// A group balance reached $0.
    GroupBalanceDepleted,
    /// A group defund settled (decision 32).
    GroupDefunded,
    /// An eSIM joined a group (at once, or when its move settled).
    EsimGroupAssigned,
    /// An eSIM left a group (removed, or terminated: decision 58).
    EsimGroupRemoved,
    /// The probe of `POST /webhooks/{id}/test`: never subscribable (decision 39).
    Test,
}

impl EventName {
    /// Every event a webhook can subscribe to (`test` needs no subscription).
    pub const SUBSCRIBABLE: [EventName; 19] = [
        EventName::EsimProvisioned,
        EventName::EsimActivated,
        EventName::EsimTerminated,
        EventName::EsimDataSuspended,
        EventName::EsimDataResumed,
        EventName::EsimBalanceLow,
        EventName::EsimBalanceDepleted,
        EventName::EsimDefunded,
        EventName::BalanceLow,
        EventName::BalanceDepleted,
        EventName::BalanceToppedUp,
        EventName::BalanceAutoRefillSucceeded,
        EventName::BalanceAutoRefillFailed,
        EventName::GroupBalanceLow,
        EventName::GroupFunded,
        EventName::GroupBalanceDepleted,
        EventName::GroupDefunded,
        EventName::EsimGroupAssigned,
        EventName::EsimGroupRemoved,
    ];

    /// The wire name (`esim.provisioned`, ...).
    pub fn as_str(self) -> &'static str {
        use EventName::*;
        match self {
            EsimProvisioned => "esim.provisioned",
            EsimActivated => "esim.activated",
            EsimTerminated => "esim.terminated",
            EsimDataSuspended => "esim.data_suspended",
            EsimDataResumed => "esim.data_resumed",
            EsimBalanceLow => "esim.balance_low",
            EsimBalanceDepleted => "esim.balance_depleted",
            EsimDefunded => "esim.defunded",
            BalanceLow => "balance.low",
            BalanceDepleted => "balance.depleted",
            BalanceToppedUp => "balance.topped_up",
            BalanceAutoRefillSucceeded => "balance.auto_refill_succeeded",
            BalanceAutoRefillFailed => "balance.auto_refill_failed",
            GroupBalanceLow => "group.balance_low",
            GroupFunded => "group.funded",
            GroupBalanceDepleted => "group.balance_depleted",
            GroupDefunded => "group.defunded",
            EsimGroupAssigned => "esim.group_assigned",
            EsimGroupRemoved => "esim.group_removed",
            Test => "test",
        }
    }

    /// The event of a wire name, `test` included; `None` for an unknown name.
    pub fn parse(name: &str) -> Option<EventName> {
        Self::SUBSCRIBABLE.into_iter().chain([EventName::Test]).find(|e| e.as_str() == name)
    }
}

/// One emitted event: the delivery envelope plus the account it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The envelope `id` (`evt_...`): receivers de-duplicate retries by it.
    pub id: String,
    /// The account it belongs to: only its webhooks receive it.
    pub account: u32,
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
        #[derive(Serialize)]
        struct Envelope<'a> {
            id: &'a str,
            event: &'static str,
            created_at: String,
            data: &'a serde_json::Value,
        }
        serde_json::to_vec(&Envelope {
            id: &self.id,
            event: self.name.as_str(),
            created_at: self.created_at.to_rfc3339(),
            data: &self.data,
        })
        .expect("event envelopes always serialize")
    }
}

impl Engine {
    /// Emits an event of an account: queued for observers, and handed to every active
    /// webhook of the account subscribed to it.
    pub(crate) fn emit(&mut self, account: AccountIx, name: EventName, data: serde_json::Value) {
        let event = Event { id: self.random_id("evt_", 12), account: account.0, name, created_at: self.now, data };
        let body = String::from_utf8(event.envelope_bytes()).expect("JSON is UTF-8");
        let targets: Vec<WebhookIx> = self.accounts[account]
            .webhooks
            .iter()
            .copied()
            .filter(|&w| {
                let webhook = &self.webhooks[w];
                webhook.active && !webhook.deleted && webhook.subscription.covers(name)
            })
            .collect();
        for webhook in targets {
            self.start_delivery(webhook, &event, body.clone(), false);
        }
        self.events.push_back(event);
    }
}
