//! Every wallet rule in one place, keyed by [`WalletOwner`] (a standalone eSIM or a
//! group): fund, a return and its settlement, usage charged and reported, the balance
//! shown, and the once-per-crossing alarms. The endpoints in `esim` and `group` only
//! decide which error wins; so eSIM and group wallets cannot drift apart unnoticed.
//! Money still moves only through [`crate::ledger::Ledger::transfer`].

use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::{EsimEvent, GroupEvent};
use crate::ledger::Reason;
use crate::money;
use crate::state::*;
use crate::time::Millis;
use crate::timer::Timer;

pub use crate::alarm::{Alarms, CrossingAlarm, Rearm};
use rust_decimal::Decimal;

/// Why a wallet's balance goes back to the reseller balance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Return {
    /// An eSIM or group defund (decisions 8, 9, 32).
    Defund,
    /// A funded standalone eSIM joins this group once its balance is back (decision 30).
    MoveInto(GroupIx),
}

impl WalletOwner {
    /// The re-arm rule of this kind of wallet.
    pub fn rearm(self) -> Rearm {
        match self {
            WalletOwner::Esim(_) => Rearm::AtThreshold,
            WalletOwner::Group(_) => Rearm::OnAnyFund,
        }
    }
}

impl Engine {
    pub(crate) fn wallet(&self, owner: WalletOwner) -> &Wallet {
        match owner {
            WalletOwner::Esim(esim) => &self.esims[esim].wallet,
            WalletOwner::Group(group) => &self.groups[group].wallet,
        }
    }

    fn wallet_mut(&mut self, owner: WalletOwner) -> &mut Wallet {
        match owner {
            WalletOwner::Esim(esim) => &mut self.esims[esim].wallet,
            WalletOwner::Group(group) => &mut self.groups[group].wallet,
        }
    }

    fn wallet_account(&self, owner: WalletOwner) -> AccountIx {
        match owner {
            WalletOwner::Esim(esim) => self.esims[esim].account,
            WalletOwner::Group(group) => self.groups[group].account,
        }
    }

    /// The low threshold: $5 for an eSIM, the group's own for a group.
    fn low_threshold(&self, owner: WalletOwner) -> Decimal {
        match owner {
            WalletOwner::Esim(_) => money::low_balance_threshold_usd(),
            WalletOwner::Group(group) => self.groups[group].low_balance_threshold,
        }
    }

    /// What a wallet shows: its exact credit plus a return on its way, rounded down
    /// (decisions 2 and 9). A group member's own wallet shows 0 (decision 28).
    pub(crate) fn shown_balance(&self, owner: WalletOwner) -> Decimal {
        let pending = match owner {
            WalletOwner::Esim(esim) => match &self.esims[esim].funding {
                Funding::Member { .. } => return Decimal::ZERO,
                Funding::Returning(pending) => pending.amount(),
                Funding::NoWallet | Funding::Wallet => Decimal::ZERO,
            },
            WalletOwner::Group(group) => self.groups[group].defund.map_or(Decimal::ZERO, |defund| defund.amount),
        };
        money::displayed(self.ledger.balance(self.wallet(owner).slots.credit) + pending)
    }

    /// Funds a wallet with `amount` (`cents` of it) from the reseller balance: the
    /// upstream credit to the wallet, the rest to dust (decisions 1 and 5), the reporting
    /// pause (decision 7) and the alarms re-armed. The caller checked every precondition.
    /// Returns the balance the wallet shows now.
    pub(crate) fn fund_wallet(&mut self, owner: WalletOwner, amount: Decimal, cents: i64) -> Decimal {
        assert_eq!(Decimal::new(cents, 2), amount, "the cents are the amount");
        let credit = money::upstream_credit(cents);
        assert!(credit <= amount, "the credit never exceeds the amount");
        assert!(amount - credit < Decimal::new(1, 2), "dust is under a cent");
        let account = self.wallet_account(owner);
        let slots = self.accounts[account].slots;
        let wallet = self.wallet(owner).slots;
        let reason = match owner {
            WalletOwner::Esim(_) => Reason::EsimFund,
            WalletOwner::Group(_) => Reason::GroupFund,
        };
        self.ledger.transfer(slots.reseller, wallet.credit, credit, reason);
        self.ledger.transfer(slots.reseller, slots.dust, amount - credit, Reason::ConversionDust);
        self.accounts[account].lifetime_usage += amount;
        self.after_reseller_debit(account);

        let pause_until = self.now.plus_ms(self.config.reporting_pause_ms);
        let exact = self.ledger.balance(wallet.credit);
        assert!(exact >= credit && exact > Decimal::ZERO, "a fund leaves the wallet holding at least its credit");
        let threshold = self.low_threshold(owner);
        let record = self.wallet_mut(owner);
        record.reporting_paused_until = pause_until;
        record.alarm.rearm(exact, threshold, owner.rearm());
        match owner {
            WalletOwner::Esim(esim) => {
                let funding = &mut self.esims[esim].funding;
                assert!(funding.is_settled_standalone(), "only a standalone eSIM with nothing on its way is funded");
                // Its first fund makes the upstream wallet (decision 10).
                *funding = Funding::Wallet;
            }
            // A fund answers a held-back group.balance_low: nothing left to wait for.
            WalletOwner::Group(group) => self.groups[group].low_event_waiting_until = None,
        }
        self.shown_balance(owner)
    }

    /// Starts a return of a wallet's whole credit (decisions 8, 30, 32). The upstream
    /// pause is the last precondition (502, nothing moved); then the credit goes to the
    /// returns on their way, data pauses, and the settlement timer starts. Returns the
    /// exact amount on its way.
    pub(crate) fn request_return(&mut self, owner: WalletOwner, why: Return) -> Result<Decimal, ApiError> {
        if self.faults.upstream_pause_fails {
            return Err(ApiError::new(ErrorCode::UpstreamError, "data could not be paused upstream; nothing moved"));
        }
        match owner {
            WalletOwner::Esim(esim) => {
                assert!(matches!(self.esims[esim].funding, Funding::Wallet), "one return at a time, of a funded wallet")
            }
            WalletOwner::Group(group) => assert!(self.groups[group].defund.is_none(), "one return at a time"),
        }
        let settles_at = self.now.plus_ms(self.config.settle_delay_ms);
        let account = self.wallet_account(owner);
        let returns = self.accounts[account].slots.returns_pending;
        let credit = self.wallet(owner).slots.credit;
        let amount = self.ledger.transfer_all(credit, returns, Reason::ReturnRequested);
        assert!(self.ledger.balance(credit).is_zero(), "a return takes the wallet's whole credit");
        assert!(!money::displayed(amount).is_zero(), "a return carries at least a cent");
        // Data pauses while the return is on its way (`data_blocked`): the return's
        // record below says it.
        match (owner, why) {
            (WalletOwner::Esim(esim), Return::Defund) => {
                let esim_record = &mut self.esims[esim];
                // Emptied by the reseller's choice: no low or depleted event for it until
                // a fund (decision 65).
                esim_record.wallet.alarm.disarm();
                esim_record.funding = Funding::Returning(PendingReturn::Defund { amount, settles_at });
                self.schedule(settles_at, Timer::SettleReturn(esim));
            }
            (WalletOwner::Esim(esim), Return::MoveInto(group)) => {
                self.esims[esim].funding = Funding::Returning(PendingReturn::Move { group, amount, settles_at });
                self.groups[group].incoming_moves += 1;
                self.schedule(settles_at, Timer::SettleReturn(esim));
            }
            (WalletOwner::Group(group), Return::Defund) => {
                let record = &mut self.groups[group];
                record.defund = Some(GroupDefund { amount, settles_at });
                record.low_event_waiting_until = None;
                self.schedule(settles_at, Timer::SettleGroupDefund(group));
            }
            (WalletOwner::Group(_), Return::MoveInto(_)) => unreachable!("a group never moves into a group"),
        }
        Ok(amount)
    }

    /// A standalone eSIM joining a group with a balance that shows $0: the sub-cent
    /// credit goes to dust at once (decision 29).
    pub(crate) fn drop_sub_cent_credit(&mut self, esim: EsimIx) {
        let account = self.esims[esim].account;
        let dust = self.accounts[account].slots.dust;
        let credit = self.esims[esim].wallet.slots.credit;
        assert!(money::displayed(self.ledger.balance(credit)).is_zero(), "only a balance that shows $0");
        self.ledger.transfer_all(credit, dust, Reason::MoveDust);
    }

    /// A member leaves its group: its own wallet, at $0 since it joined, stays silent
    /// until it is funded.
    pub(crate) fn wallet_standalone_again(&mut self, esim: EsimIx) {
        let record = &mut self.esims[esim];
        assert!(record.funding.is_settled_standalone(), "a standalone eSIM with nothing on its way");
        assert!(self.ledger.balance(record.wallet.slots.credit).is_zero(), "members hold no wallet (decision 28)");
        record.wallet.alarm.disarm();
    }

    /// Terminate: whatever the wallet still holds is forfeited (a pending return still
    /// completes, decision 60). Returns the exact amount forfeited.
    pub(crate) fn forfeit_wallet(&mut self, esim: EsimIx) -> Decimal {
        let account = self.esims[esim].account;
        let forfeited = self.accounts[account].slots.forfeited;
        let credit = self.esims[esim].wallet.slots.credit;
        let amount = self.ledger.transfer_all(credit, forfeited, Reason::Forfeit);
        assert!(self.ledger.balance(credit).is_zero(), "a terminated eSIM's wallet holds nothing");
        amount
    }

    pub(crate) fn settles_in_minutes(&self) -> u64 {
        (self.config.settle_delay_ms.max(0) as u64).div_ceil(60_000)
    }

    /// A return settles (its timer): the displayed amount goes back to the reseller
    /// balance, the sub-cent rest to dust, data resumes; then the defund's event, or the
    /// move's join. An eSIM's return waits for its usage to report first (docs/architecture.md, rule 5).
    pub(crate) fn settle_return(&mut self, owner: WalletOwner) {
        let (amount, pending) = match owner {
            WalletOwner::Esim(esim) => {
                let esim_record = &self.esims[esim];
                if esim_record.wallet.report_scheduled && esim_record.funding.pending().is_some() {
                    // The report timer fires on this sync boundary; this one, scheduled
                    // after it, follows it.
                    let report_due = self.report_due(owner);
                    if let Funding::Returning(
                        PendingReturn::Defund { settles_at, .. } | PendingReturn::Move { settles_at, .. },
                    ) = &mut self.esims[esim].funding
                    {
                        *settles_at = report_due;
                    }
                    self.schedule(report_due, Timer::SettleReturn(esim));
                    return;
                }
                // One return at a time, and only its settlement timer ends it: the wallet
                // is back to holding nothing on its way (and data resumes).
                let Funding::Returning(pending) = std::mem::replace(&mut self.esims[esim].funding, Funding::Wallet)
                else {
                    panic!("a settle timer finds its return");
                };
                (pending.amount(), Some(pending))
            }
            WalletOwner::Group(group) => {
                // One defund at a time, and only its settlement timer ends it.
                let defund = self.groups[group].defund.take().expect("a settle timer finds its defund");
                (defund.amount, None)
            }
        };
        let account = self.wallet_account(owner);
        let slots = self.accounts[account].slots;
        let returned = money::displayed(amount);
        assert!(returned <= amount && amount - returned < Decimal::new(1, 2), "the rest is under a cent");
        self.ledger.transfer(slots.returns_pending, slots.reseller, returned, Reason::ReturnSettled);
        self.ledger.transfer(slots.returns_pending, slots.dust, amount - returned, Reason::ReturnDust);
        #[cfg(feature = "test-switches")]
        if matches!(owner, WalletOwner::Esim(_))
            && self.injected_bug == Some(crate::config::InjectedBug::SettlementPaysOneCentMore)
        {
            // Deliberately broken rule, for the simulation's own tests only.
            let balance = self.ledger.balance(slots.reseller);
            self.ledger.corrupt_for_test(slots.reseller, balance + Decimal::new(1, 2));
        }
        self.after_reseller_credit(account);
        let now = self.now;
        match (owner, pending) {
            (WalletOwner::Esim(esim), Some(PendingReturn::Defund { .. })) => {
                self.emit_esim(esim, EsimEvent::Defunded { returned_usd: returned });
            }
            (WalletOwner::Esim(esim), Some(PendingReturn::Move { group, .. })) => {
                assert!(self.groups[group].incoming_moves > 0, "a settling move was counted by its group");
                self.groups[group].incoming_moves -= 1;
                if self.esims[esim].status != EsimStatus::Terminated {
                    self.join_group(esim, group, Some(returned));
                }
            }
            (WalletOwner::Group(group), _) => {
                let record = &mut self.groups[group];
                // At $0 by the reseller's choice: silent until the next fund.
                record.wallet.alarm.disarm();
                record.updated_at = now;
                self.emit_group(group, GroupEvent::Defunded { returned_usd: returned });
            }
            (WalletOwner::Esim(_), None) => unreachable!("an eSIM settles its pending return"),
        }
    }

    /// Usage charged live to a wallet, even during the reporting pause (decision 7); it
    /// reports on a later sync cycle. A group checks its alarms live (decision 33).
    pub(crate) fn charge_usage(&mut self, owner: WalletOwner, charged: Decimal) {
        let slots = self.wallet(owner).slots;
        assert!(charged <= self.ledger.balance(slots.credit), "usage never takes a wallet below zero (rule 3)");
        self.ledger.transfer(slots.credit, slots.unreported, charged, Reason::DataCharge);
        self.schedule_report(owner);
        if let WalletOwner::Group(group) = owner {
            self.check_group_alarms(group);
        }
    }

    /// The next sync-cycle boundary strictly after `at`.
    fn next_sync(&self, at: Millis) -> Millis {
        let interval = self.config.sync_interval_ms.max(1);
        Millis((at.0.div_euclid(interval) + 1) * interval)
    }

    /// When a report of this wallet's usage comes: the first sync cycle after its pause.
    pub(crate) fn report_due(&self, owner: WalletOwner) -> Millis {
        self.next_sync(self.now.max(self.wallet(owner).reporting_paused_until))
    }

    fn schedule_report(&mut self, owner: WalletOwner) {
        if self.wallet(owner).report_scheduled {
            return;
        }
        let due = self.report_due(owner);
        self.wallet_mut(owner).report_scheduled = true;
        self.schedule(due, Timer::Report(owner));
    }

    /// A sync cycle reaches a wallet with unreported usage: after the pause, the usage
    /// becomes reported, and the eSIM balance events follow what was reported.
    pub(crate) fn report_usage(&mut self, owner: WalletOwner) {
        let now = self.now;
        let wallet = self.wallet_mut(owner);
        wallet.report_scheduled = false;
        if now < wallet.reporting_paused_until {
            // A fund after this timer was set paused reporting again: expected, it waits
            // for the first sync cycle after the new pause.
            self.schedule_report(owner);
            return;
        }
        let slots = wallet.slots;
        self.ledger.transfer_all(slots.unreported, slots.reported, Reason::DataReport);
        if let WalletOwner::Esim(esim) = owner {
            self.check_esim_alarms(esim);
        }
    }

    /// esim.balance_low once per crossing below $5, esim.balance_depleted at $0, as the
    /// pipeline reports (decision 15); never for a member, a pending return or a
    /// terminated eSIM.
    fn check_esim_alarms(&mut self, esim: EsimIx) {
        let record = &self.esims[esim];
        if record.status == EsimStatus::Terminated || !record.funding.is_settled_standalone() {
            return;
        }
        let owner = WalletOwner::Esim(esim);
        let exact = self.ledger.balance(record.wallet.slots.credit);
        let shown = money::displayed(exact);
        let threshold = self.low_threshold(owner);
        let alarms = self.esims[esim].wallet.alarm.observe(exact, threshold, owner.rearm());
        if alarms.low {
            self.emit_esim(esim, EsimEvent::BalanceLow { wallet_balance_usd: shown, threshold_usd: threshold });
        }
        if alarms.depleted {
            self.emit_esim(esim, EsimEvent::BalanceDepleted { wallet_balance_usd: shown });
        }
    }

    /// The group low-balance loop, run on every change of the group balance by usage and
    /// of its threshold: group.balance_low once per crossing (held back while an
    /// auto-refill charge for the refill is on its way), group.balance_depleted at 0.
    pub(crate) fn check_group_alarms(&mut self, group: GroupIx) {
        let record = &self.groups[group];
        if record.defund.is_some() {
            return;
        }
        let owner = WalletOwner::Group(group);
        let account = record.account;
        let refill = record.refill_amount;
        let exact = self.ledger.balance(record.wallet.slots.credit);
        let threshold = self.low_threshold(owner);
        let alarms = self.groups[group].wallet.alarm.observe(exact, threshold, owner.rearm());
        if alarms.low {
            let underfunded = self.reseller_balance(account) < refill;
            if underfunded && self.accounts[account].auto_refill.enabled && self.start_auto_refill(account) {
                let deadline = self.now.plus_ms(self.config.group_low_wait_ms);
                self.groups[group].low_event_waiting_until = Some(deadline);
                self.schedule(deadline, Timer::GroupLowDeadline(group));
            } else {
                self.emit_group_low(group, underfunded);
            }
        }
        if alarms.depleted {
            self.emit_group(group, GroupEvent::BalanceDepleted {});
        }
    }
}
