//! The names of the events the service emits (the spec's, plus `esim.defunded`): what
//! a webhook subscribes to, the state keeps and a filter compares. A leaf: the events
//! themselves and how they are emitted live in `event`.

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
