//! Events: the names of the spec (plus `esim.defunded`), the envelope, and how an
//! event is emitted (to observers and to the account's subscribed webhooks).

use crate::engine::Engine;
use crate::state::{AccountIx, WebhookIx};
use crate::time::Millis;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventName {
    EsimProvisioned,
    EsimActivated,
    EsimTerminated,
    EsimDataSuspended,
    EsimDataResumed,
    EsimBalanceLow,
    EsimBalanceDepleted,
    EsimDefunded,
    BalanceLow,
    BalanceDepleted,
    BalanceToppedUp,
    BalanceAutoRefillSucceeded,
    BalanceAutoRefillFailed,
    GroupBalanceLow,
    GroupFunded,
    GroupBalanceDepleted,
    GroupDefunded,
    EsimGroupAssigned,
    EsimGroupRemoved,
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

    pub fn parse(name: &str) -> Option<EventName> {
        Self::SUBSCRIBABLE.into_iter().chain([EventName::Test]).find(|e| e.as_str() == name)
    }
}

/// One emitted event: the delivery envelope plus the account it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    pub account: u32,
    pub name: EventName,
    pub created_at: Millis,
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
