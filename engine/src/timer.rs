//! Everything the engine waits for: the timers (scheduled and fired by the engine,
//! each handled by the part whose rule it waits for). A timer whose subject moved on (a retry of a webhook disabled or
//! deleted since, a held-back event already sent, an answer the store's bound dropped)
//! is stale: it fires as a no-op, and its handler says why that is expected. Timers
//! that always find their subject (a return to settle, a card charge) assert it.

use crate::ids::{AccountIx, DeliveryId, EsimIx, GroupIx, WalletOwner};
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
