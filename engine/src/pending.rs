//! What the engine waits for, as the sandbox shows it (`GET /sandbox/v1/pending`): a
//! read of the timer queue, in the words of the records each timer concerns.

use crate::engine::Engine;
use crate::ids::{AccountIx, WalletOwner};
use crate::reply::{PendingTimer, PendingTimers};
use crate::state::PendingReturn;
use crate::time::Millis;
use crate::timer::Timer;
use std::collections::BTreeMap;

impl Engine {
    /// The timers that move money or send events, soonest first (`GET
    /// /sandbox/v1/pending`): the first `limit` and how many there are. A pure read of the
    /// timer queue, ordered by when each falls due, then by scheduling order:
    /// deterministic. A return whose wallet still has usage to report settles after that
    /// report (its timer, due first, waits for it): it shows at the report's time. Stale
    /// timers (a retry whose delivery is gone, a held-back event already sent) and
    /// housekeeping (idempotent answers, revoked key records) are not listed.
    pub fn pending_timers(&self, limit: u64) -> PendingTimers {
        let reports: BTreeMap<WalletOwner, Millis> = self
            .timers
            .iter()
            .filter_map(|(&(due, _), timer)| match timer {
                Timer::Report(owner) => Some((*owner, due)),
                _ => None,
            })
            .collect();
        let mut listed = Vec::new();
        for (&(deadline, seq), timer) in &self.timers {
            let Some(pending) = self.pending_timer(timer) else { continue };
            let due = match timer {
                Timer::SettleReturn(esim) => {
                    reports.get(&WalletOwner::Esim(*esim)).map_or(deadline, |&r| r.max(deadline))
                }
                _ => deadline,
            };
            listed.push(((due, seq), pending));
        }
        listed.sort_by_key(|(order, _)| *order);
        let total = listed.len() as u64;
        let timers = listed
            .into_iter()
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .map(|((due_at, _), pending)| PendingTimer {
                due_at,
                // Whole seconds, rounded up: "due in 0 s" only when it is due.
                due_in_seconds: ((due_at.0 - self.now.0).max(0) + 999) / 1000,
                ..pending
            })
            .collect();
        PendingTimers { now: self.now, total, limit, timers }
    }

    /// What a timer concerns, or `None` for housekeeping and stale timers (due time unset).
    fn pending_timer(&self, timer: &Timer) -> Option<PendingTimer> {
        let about = |kind, account: AccountIx| PendingTimer {
            kind,
            due_at: self.now,
            due_in_seconds: 0,
            account_id: self.accounts[account].id.clone(),
            iccid: None,
            group_id: None,
            webhook_id: None,
            event: None,
            attempt: None,
            amount_usd: None,
        };
        let of_owner = |kind, owner: WalletOwner| match owner {
            WalletOwner::Esim(esim) => {
                let esim_record = &self.esims[esim];
                PendingTimer { iccid: Some(esim_record.iccid.to_string()), ..about(kind, esim_record.account) }
            }
            WalletOwner::Group(group) => {
                let record = &self.groups[group];
                PendingTimer { group_id: Some(record.id.clone()), ..about(kind, record.account) }
            }
        };
        let pending = match timer {
            Timer::Report(owner) => {
                let unreported = self.ledger.balance(self.wallet(*owner).slots.unreported);
                PendingTimer { amount_usd: Some(unreported), ..of_owner("usage_report", *owner) }
            }
            Timer::SettleReturn(esim) => {
                let amount = self.esims[*esim].funding.pending().map(PendingReturn::amount);
                PendingTimer { amount_usd: amount, ..of_owner("esim_return", WalletOwner::Esim(*esim)) }
            }
            Timer::SettleGroupDefund(group) => {
                let amount = self.groups[*group].defund.as_ref().map(|defund| defund.amount);
                PendingTimer { amount_usd: amount, ..of_owner("group_return", WalletOwner::Group(*group)) }
            }
            Timer::CardSettles(account) => PendingTimer {
                amount_usd: self.accounts[*account].auto_refill.charge_in_flight,
                ..about("card_charge", *account)
            },
            Timer::RetryDelivery(id) => {
                let delivery = self.deliveries.get(id)?;
                let webhook = &self.webhooks[delivery.webhook];
                PendingTimer {
                    webhook_id: Some(webhook.id.clone()),
                    event: Some(delivery.event.as_str()),
                    attempt: Some(delivery.attempt + 1),
                    ..about("webhook_retry", webhook.account)
                }
            }
            Timer::GroupLowDeadline(group) => {
                self.groups[*group].low_event_waiting_until?;
                of_owner("group_low_event", WalletOwner::Group(*group))
            }
            Timer::ExpireIdempotency(..) | Timer::DropRevokedKey(_) => return None,
        };
        Some(pending)
    }
}
