//! Everything the engine waits for: the timers, their scheduling and what each does
//! when it fires. A timer whose subject moved on (a retry of a webhook disabled or
//! deleted since, a held-back event already sent, an answer the store's bound dropped)
//! is stale: it fires as a no-op, and its handler says why that is expected. Timers
//! that always find their subject (a return to settle, a card charge) assert it.

use crate::engine::Engine;
use crate::state::{AccountIx, DeliveryId, EsimIx, GroupIx, WalletOwner};
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Everything the engine waits for. Fired in deadline order, ties by scheduling order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Timer {
    /// A sync cycle reaches a wallet with unreported usage (decision 6).
    Report(WalletOwner),
    /// An eSIM defund or move settles (decisions 8 and 30).
    SettleReturn(EsimIx),
    /// A group defund settles (decision 32).
    SettleGroupDefund(GroupIx),
    /// A webhook delivery is due again (decision 38).
    RetryDelivery(DeliveryId),
    /// A simulated card charge settles (decision 34).
    CardSettles(AccountIx),
    /// A held-back `group.balance_low` goes out without waiting longer (decision 33).
    GroupLowDeadline(GroupIx),
    /// A stored idempotent answer expires (decision 40).
    ExpireIdempotency(AccountIx, String),
    /// A revoked API key's record has been kept long enough (by its id, decision 231).
    DropRevokedKey(u128),
}

impl Engine {
    /// Waits for `deadline` (never earlier than now); ties fire in scheduling order.
    pub(crate) fn schedule(&mut self, deadline: Millis, timer: Timer) {
        let seq = self.next_timer_seq;
        self.next_timer_seq += 1;
        self.timers.insert((deadline.max(self.now), seq), timer);
    }

    /// Carries out a timer due now (`handle_timeout` set the time to its deadline).
    pub(crate) fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::Report(owner) => self.report_usage(owner),
            Timer::SettleReturn(sim) => self.settle_return(WalletOwner::Sim(sim)),
            Timer::SettleGroupDefund(group) => self.settle_return(WalletOwner::Group(group)),
            Timer::RetryDelivery(id) => self.retry_delivery(id),
            Timer::CardSettles(account) => self.card_settles(account),
            Timer::GroupLowDeadline(group) => self.group_low_deadline(group),
            Timer::ExpireIdempotency(account, key) => self.expire_idempotent(account, &key),
            Timer::DropRevokedKey(id) => self.drop_revoked_key(id),
        }
    }
}
