//! The double-entry ledger: the one place where money moves.
//!
//! Every balance that holds money (a reseller balance, an eSIM's exact credit, a group
//! balance, returns on their way back, fees, data charged, forfeits, dust) is a ledger
//! *slot*. Money moves only through [`Ledger::transfer`], which takes from one slot and
//! gives to another of the same reseller account, so the sum of an account's slots is
//! always zero: the `World` slot goes negative by exactly what came in from outside.
//! That is docs/architecture.md, rule 6 as an identity, checked by the simulation after every step.

use crate::ids::AccountIx;
pub use crate::ids::Slot;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// What a slot holds. Only `World` may go below zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SlotKind {
    /// The outside world: card payments and manual top-ups come from here.
    World,
    /// The reseller balance.
    Reseller,
    /// Balances on their way back to the reseller balance (eSIM defund, move, group defund).
    ReturnsPending,
    /// Provisioning fees earned by the service.
    Fees,
    /// Wallet remainders forfeited on terminate.
    Forfeited,
    /// Conversion dust (fund amount minus upstream credit) and sub-cent remainders on return.
    Dust,
    /// The exact upstream credit of one eSIM wallet.
    #[serde(rename = "SimCredit")]
    EsimCredit,
    /// Data charged to one eSIM, used but not yet reported by the upstream pipeline.
    #[serde(rename = "SimUnreported")]
    EsimUnreported,
    /// Data charged to one eSIM and reported (`total_data_charged_usd`).
    #[serde(rename = "SimReported")]
    EsimReported,
    /// The exact upstream credit of one group.
    GroupCredit,
    /// Data charged to one group, used but not yet reported.
    GroupUnreported,
    /// Data charged to one group and reported (its `total_data_charged_usd`).
    GroupReported,
}

impl SlotKind {
    /// Every kind, in declaration order (the index of [`DayMovements::net`]).
    pub const ALL: [SlotKind; 12] = [
        SlotKind::World,
        SlotKind::Reseller,
        SlotKind::ReturnsPending,
        SlotKind::Fees,
        SlotKind::Forfeited,
        SlotKind::Dust,
        SlotKind::EsimCredit,
        SlotKind::EsimUnreported,
        SlotKind::EsimReported,
        SlotKind::GroupCredit,
        SlotKind::GroupUnreported,
        SlotKind::GroupReported,
    ];
}

/// What one account moved on one service day (UTC): the history a report over a period
/// needs. A kind's balance at the start of day D is its balance now minus the net changes
/// of the days from D on, exactly; one entry per (account, active day), whatever the
/// number of transfers that day.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DayMovements {
    /// Days since 1970-01-01, UTC (see [`crate::time::Millis::day_number`]).
    pub day: i64,
    /// The sum moved for each [`Reason`] that day, indexed like [`Reason::ALL`].
    pub flows: [Decimal; Reason::ALL.len()],
    /// The net change of each [`SlotKind`]'s balances that day, indexed like [`SlotKind::ALL`].
    pub net: [Decimal; SlotKind::ALL.len()],
}

impl DayMovements {
    fn new(day: i64) -> DayMovements {
        DayMovements { day, flows: [Decimal::ZERO; Reason::ALL.len()], net: [Decimal::ZERO; SlotKind::ALL.len()] }
    }
}

/// Why money moved: the lines of the finance report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// A manual top-up (admin API).
    TopUp,
    /// An auto-refill card charge that settled.
    AutoRefill,
    /// The fee of one provisioned eSIM.
    ProvisioningFee,
    /// An eSIM fund: its upstream credit.
    EsimFund,
    /// A group fund: its upstream credit.
    GroupFund,
    /// The part of a fund under one upstream retail cent (decision 1).
    ConversionDust,
    /// Usage charged live to a wallet.
    DataCharge,
    /// Usage the upstream pipeline reported (decision 7).
    DataReport,
    /// A wallet's credit sent on its way back (defund, move, group defund).
    ReturnRequested,
    /// A return that settled: its displayed amount back to the reseller balance.
    ReturnSettled,
    /// The sub-cent rest of a settled return.
    ReturnDust,
    /// What a terminated eSIM's wallet still held.
    Forfeit,
    /// A sub-cent credit left on an eSIM that joins a group (members hold no wallet).
    MoveDust,
}

impl Reason {
    /// Every reason, in report order (the index of `flows`).
    pub const ALL: [Reason; 13] = [
        Reason::TopUp,
        Reason::AutoRefill,
        Reason::ProvisioningFee,
        Reason::EsimFund,
        Reason::GroupFund,
        Reason::ConversionDust,
        Reason::DataCharge,
        Reason::DataReport,
        Reason::ReturnRequested,
        Reason::ReturnSettled,
        Reason::ReturnDust,
        Reason::Forfeit,
        Reason::MoveDust,
    ];

    /// The report line of the reason (`top_ups_usd`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reason::TopUp => "top_ups",
            Reason::AutoRefill => "auto_refills",
            Reason::ProvisioningFee => "provisioning_fees",
            Reason::EsimFund => "esim_funds",
            Reason::GroupFund => "group_funds",
            Reason::ConversionDust => "conversion_dust",
            Reason::DataCharge => "data_charged",
            Reason::DataReport => "data_reported",
            Reason::ReturnRequested => "returns_requested",
            Reason::ReturnSettled => "returns_settled",
            Reason::ReturnDust => "return_dust",
            Reason::Forfeit => "forfeited",
            Reason::MoveDust => "move_dust",
        }
    }
}

/// A slot's owner (the reseller account index) and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotInfo {
    /// The reseller account whose sum the slot counts in.
    pub account: AccountIx,
    /// What it holds.
    pub kind: SlotKind,
}

/// The fixed slots every reseller account has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountSlots {
    /// Money from outside the service; the only slot below zero.
    pub world: Slot,
    /// The reseller balance.
    pub reseller: Slot,
    /// Returns on their way back.
    pub returns_pending: Slot,
    /// Provisioning fees earned.
    pub fees: Slot,
    /// What terminated eSIMs forfeited.
    pub forfeited: Slot,
    /// Conversion dust and sub-cent rests.
    pub dust: Slot,
}

/// The three slots of a wallet (an eSIM's or a group's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletSlots {
    /// The exact upstream credit.
    pub credit: Slot,
    /// Usage charged but not yet reported.
    pub unreported: Slot,
    /// Usage reported.
    pub reported: Slot,
}

/// A slot: its balance beside its owner and kind. A transfer reads all three of both its
/// slots, and a wallet's three slots are opened together: in one array they share a cache
/// line or two, where a balances array and an owners array took a miss each at a million
/// eSIMs (decision 206).
#[derive(Clone, Copy, Debug)]
struct SlotEntry {
    balance: Decimal,
    info: SlotInfo,
}

/// Every slot's balance and every account's flows by reason: the one place money moves,
/// so conservation is an identity (see the module docs).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(try_from = "LedgerRecord")]
pub struct Ledger {
    slots: Vec<SlotEntry>,
    /// Per account, the sum moved for each [`Reason`] (indexed like `Reason::ALL`).
    flows: Vec<[Decimal; Reason::ALL.len()]>,
    /// Per account, its movements per service day, oldest first (days only grow: the
    /// engine's time never goes back, so a transfer touches the last entry or adds one).
    /// Absent from snapshots written before it existed: see [`LedgerRecord`].
    history: Vec<Vec<DayMovements>>,
    /// The service day transfers are recorded on, set by the engine as its time moves.
    day: i64,
}

/// The ledger is written as it was when balances and owners were two arrays (the same
/// snapshot bytes and state digest): `balances`, `info`, `flows`, `history`, `day`.
impl Serialize for Ledger {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// One column of the slots, as a sequence.
        struct Column<'a, T: Serialize>(&'a [SlotEntry], fn(&SlotEntry) -> T);
        impl<T: Serialize> Serialize for Column<'_, T> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter().map(self.1))
            }
        }
        let mut record = serializer.serialize_struct("Ledger", 5)?;
        record.serialize_field("balances", &Column(&self.slots, |entry| entry.balance))?;
        record.serialize_field("info", &Column(&self.slots, |entry| entry.info))?;
        record.serialize_field("flows", &self.flows)?;
        record.serialize_field("history", &self.history)?;
        record.serialize_field("day", &self.day)?;
        record.end()
    }
}

/// The ledger as a snapshot holds it. A snapshot written before the ledger kept its
/// history has none: each account's balances and flows then count as moved on the day
/// 0 (1970-01-01), so the history still explains every balance and a report's days start
/// there (decision 110).
#[derive(Deserialize)]
struct LedgerRecord {
    balances: Vec<Decimal>,
    info: Vec<SlotInfo>,
    flows: Vec<[Decimal; Reason::ALL.len()]>,
    history: Option<Vec<Vec<DayMovements>>>,
    #[serde(default)]
    day: i64,
}

impl TryFrom<LedgerRecord> for Ledger {
    type Error = String;
    fn try_from(record: LedgerRecord) -> Result<Ledger, String> {
        let LedgerRecord { balances, info, flows, history, day } = record;
        if balances.len() != info.len() {
            return Err(format!("the ledger holds {} balances for {} slots", balances.len(), info.len()));
        }
        let history = history.unwrap_or_else(|| {
            let mut history: Vec<Vec<DayMovements>> =
                flows.iter().map(|flows| vec![DayMovements { flows: *flows, ..DayMovements::new(0) }]).collect();
            for (slot, balance) in info.iter().zip(&balances) {
                history[slot.account.0 as usize][0].net[slot.kind as usize] += balance;
            }
            history
        });
        let slots = balances.into_iter().zip(info).map(|(balance, info)| SlotEntry { balance, info }).collect();
        Ok(Ledger { slots, flows, history, day })
    }
}

impl Ledger {
    fn open(&mut self, account: AccountIx, kind: SlotKind) -> Slot {
        let slot = Slot(u32::try_from(self.slots.len()).expect("fewer than 2^32 ledger slots"));
        self.slots.push(SlotEntry { balance: Decimal::ZERO, info: SlotInfo { account, kind } });
        slot
    }

    /// Opens the fixed slots of a new reseller account (`account` must be the next index).
    pub fn open_account(&mut self, account: AccountIx) -> AccountSlots {
        assert_eq!(account.0 as usize, self.flows.len(), "accounts are opened in order");
        self.flows.push([Decimal::ZERO; Reason::ALL.len()]);
        self.history.resize_with(self.flows.len(), Vec::new);
        AccountSlots {
            world: self.open(account, SlotKind::World),
            reseller: self.open(account, SlotKind::Reseller),
            returns_pending: self.open(account, SlotKind::ReturnsPending),
            fees: self.open(account, SlotKind::Fees),
            forfeited: self.open(account, SlotKind::Forfeited),
            dust: self.open(account, SlotKind::Dust),
        }
    }

    /// The three slots of a new eSIM wallet.
    pub fn open_esim_wallet(&mut self, account: AccountIx) -> WalletSlots {
        WalletSlots {
            credit: self.open(account, SlotKind::EsimCredit),
            unreported: self.open(account, SlotKind::EsimUnreported),
            reported: self.open(account, SlotKind::EsimReported),
        }
    }

    /// The three slots of a new group wallet.
    pub fn open_group_wallet(&mut self, account: AccountIx) -> WalletSlots {
        WalletSlots {
            credit: self.open(account, SlotKind::GroupCredit),
            unreported: self.open(account, SlotKind::GroupUnreported),
            reported: self.open(account, SlotKind::GroupReported),
        }
    }

    /// A slot's balance now.
    pub fn balance(&self, slot: Slot) -> Decimal {
        self.slots[slot.index()].balance
    }

    /// Moves `amount` from one slot to another of the same account. A zero amount is a
    /// no-op. Panics on a broken precondition (negative amount, cross-account move, or
    /// overdrawing a slot other than `World`): callers check business rules first, so
    /// reaching one is a bug, not an input error.
    pub fn transfer(&mut self, from: Slot, to: Slot, amount: Decimal, reason: Reason) {
        assert!(amount >= Decimal::ZERO, "negative transfer {amount} ({reason:?})");
        if amount.is_zero() {
            return;
        }
        let (from_info, to_info) = (self.slots[from.index()].info, self.slots[to.index()].info);
        assert_eq!(from_info.account, to_info.account, "transfers stay inside one account");
        let from_balance = self.slots[from.index()].balance - amount;
        assert!(
            from_info.kind == SlotKind::World || from_balance >= Decimal::ZERO,
            "{reason:?} would overdraw {:?} by {}",
            from_info.kind,
            -from_balance
        );
        let to_balance = self.slots[to.index()].balance + amount;
        // Conservation per transfer: what one slot loses the other gains, exactly.
        debug_assert_eq!(from_balance + to_balance, self.slots[from.index()].balance + self.slots[to.index()].balance);
        self.slots[from.index()].balance = from_balance;
        self.slots[to.index()].balance = to_balance;
        let index = reason as usize;
        let account = from_info.account.0 as usize;
        self.flows[account][index] += amount;
        // O(1): the current day is the last entry of the account's history, or a new one.
        if self.history.len() <= account {
            self.history.resize_with(self.flows.len(), Vec::new);
        }
        let days = &mut self.history[account];
        if days.last().is_none_or(|last| last.day != self.day) {
            days.push(DayMovements::new(self.day));
        }
        let today = days.last_mut().expect("pushed above");
        today.flows[index] += amount;
        today.net[from_info.kind as usize] -= amount;
        today.net[to_info.kind as usize] += amount;
    }

    /// Sets the service day later transfers are recorded on (the engine calls it whenever
    /// its time moves; days never go back).
    pub fn set_day(&mut self, day: i64) {
        self.day = self.day.max(day);
    }

    /// The service day transfers are recorded on now.
    pub fn day(&self) -> i64 {
        self.day
    }

    /// An account's movements per service day, oldest first (empty for an unknown account).
    pub fn history(&self, account: AccountIx) -> &[DayMovements] {
        self.history.get(account.0 as usize).map_or(&[], Vec::as_slice)
    }

    /// Every account's balances summed by kind (indexed like [`SlotKind::ALL`]), in one
    /// pass over the slots.
    pub fn balances_by_kind(&self) -> Vec<[Decimal; SlotKind::ALL.len()]> {
        let mut totals = vec![[Decimal::ZERO; SlotKind::ALL.len()]; self.flows.len()];
        for SlotEntry { balance, info } in &self.slots {
            totals[info.account.0 as usize][info.kind as usize] += balance;
        }
        totals
    }

    /// Moves everything a slot holds; returns the amount.
    pub fn transfer_all(&mut self, from: Slot, to: Slot, reason: Reason) -> Decimal {
        let amount = self.balance(from);
        self.transfer(from, to, amount, reason);
        amount
    }

    /// The sum moved for `reason` in `account` since it opened (the report's movement lines).
    pub fn flow(&self, account: AccountIx, reason: Reason) -> Decimal {
        let index = reason as usize;
        self.flows[account.0 as usize][index]
    }

    /// Every slot with its owner and balance, in slot order (for reports and checkers).
    pub fn slots(&self) -> impl Iterator<Item = (Slot, SlotInfo, Decimal)> + '_ {
        self.slots.iter().enumerate().map(|(i, entry)| (Slot(i as u32), entry.info, entry.balance))
    }

    /// Test and checker hook: overwrite a balance to prove the checkers fire.
    #[cfg(feature = "test-switches")]
    pub fn corrupt_for_test(&mut self, slot: Slot, balance: Decimal) {
        self.slots[slot.index()].balance = balance;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_balance_and_record_flows() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        ledger.transfer(slots.world, slots.reseller, Decimal::new(100, 0), Reason::TopUp);
        ledger.transfer(slots.reseller, slots.fees, Decimal::new(175, 2), Reason::ProvisioningFee);
        assert_eq!(ledger.balance(slots.world), Decimal::new(-100, 0));
        assert_eq!(ledger.balance(slots.reseller), Decimal::new(9825, 2));
        let sum: Decimal = ledger.slots().map(|(_, _, b)| b).sum();
        assert_eq!(sum, Decimal::ZERO);
        assert_eq!(ledger.flow(AccountIx(0), Reason::ProvisioningFee), Decimal::new(175, 2));
    }

    #[test]
    fn history_keeps_one_entry_per_day_and_explains_the_balances() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        ledger.set_day(10);
        ledger.transfer(slots.world, slots.reseller, Decimal::new(100, 0), Reason::TopUp);
        ledger.transfer(slots.reseller, slots.fees, Decimal::new(175, 2), Reason::ProvisioningFee);
        ledger.set_day(12);
        ledger.transfer(slots.reseller, slots.fees, Decimal::new(175, 2), Reason::ProvisioningFee);
        ledger.set_day(11); // days never go back
        ledger.transfer(slots.reseller, slots.fees, Decimal::new(1, 0), Reason::ProvisioningFee);
        let history = ledger.history(AccountIx(0));
        assert_eq!(history.iter().map(|d| d.day).collect::<Vec<_>>(), vec![10, 12]);
        assert_eq!(history[1].flows[Reason::ProvisioningFee as usize], Decimal::new(275, 2));
        assert_eq!(history[0].net[SlotKind::Reseller as usize], Decimal::new(9825, 2));
        let balances = ledger.balances_by_kind();
        for kind in SlotKind::ALL {
            let from_history: Decimal = history.iter().map(|d| d.net[kind as usize]).sum();
            assert_eq!(from_history, balances[0][kind as usize], "{kind:?}");
        }
    }

    #[test]
    fn a_snapshot_without_history_reads_as_everything_moved_on_day_zero() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        ledger.set_day(20_000);
        ledger.transfer(slots.world, slots.reseller, Decimal::new(100, 0), Reason::TopUp);
        ledger.transfer(slots.reseller, slots.fees, Decimal::new(175, 2), Reason::ProvisioningFee);
        let mut old = serde_json::to_value(&ledger).unwrap();
        let fields = old.as_object_mut().unwrap();
        fields.remove("history");
        fields.remove("day");
        let read: Ledger = serde_json::from_value(old).unwrap();
        assert_eq!(read.history(AccountIx(0)).len(), 1);
        let entry = &read.history(AccountIx(0))[0];
        assert_eq!(entry.day, 0);
        assert_eq!(entry.net, ledger.history(AccountIx(0))[0].net);
        assert_eq!(entry.flows, ledger.history(AccountIx(0))[0].flows);
        let again: Ledger = serde_json::from_value(serde_json::to_value(&ledger).unwrap()).unwrap();
        assert_eq!(again.history(AccountIx(0)), ledger.history(AccountIx(0)));
        assert_eq!(again.day(), 20_000);
    }

    #[test]
    fn a_ledger_is_written_as_two_columns_and_read_back_the_same() {
        let mut ledger = Ledger::default();
        let account = ledger.open_account(AccountIx(0));
        let wallet = ledger.open_esim_wallet(AccountIx(0));
        ledger.set_day(20_000);
        ledger.transfer(account.world, account.reseller, Decimal::new(100, 0), Reason::TopUp);
        ledger.transfer(account.reseller, wallet.credit, Decimal::new(1234, 2), Reason::EsimFund);
        /// The form the derived `Serialize` wrote when balances and owners were two arrays.
        #[derive(Serialize)]
        struct TwoArrays<'a> {
            balances: Vec<Decimal>,
            info: Vec<SlotInfo>,
            flows: &'a [[Decimal; Reason::ALL.len()]],
            history: &'a [Vec<DayMovements>],
            day: i64,
        }
        let before = TwoArrays {
            balances: ledger.slots().map(|(_, _, balance)| balance).collect(),
            info: ledger.slots().map(|(_, info, _)| info).collect(),
            flows: &ledger.flows,
            history: &ledger.history,
            day: ledger.day,
        };
        let written = serde_json::to_string(&ledger).unwrap();
        assert_eq!(written, serde_json::to_string(&before).unwrap());
        let read: Ledger = serde_json::from_str(&written).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), written);
        assert_eq!(read.balance(wallet.credit), Decimal::new(1234, 2));
        let mut short = serde_json::to_value(&ledger).unwrap();
        short["balances"].as_array_mut().unwrap().pop();
        let refused = serde_json::from_value::<Ledger>(short).unwrap_err().to_string();
        assert!(refused.contains("holds 8 balances for 9 slots"), "{refused}");
    }

    #[test]
    #[should_panic(expected = "overdraw")]
    fn overdraw_is_a_bug() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        ledger.transfer(slots.reseller, slots.fees, Decimal::ONE, Reason::ProvisioningFee);
    }
}
