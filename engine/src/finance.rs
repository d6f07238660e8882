//! The finance report: money in, where it is now, where it went, and the difference,
//! exactly 0, per account and in total, over a period of service days (UTC).
//!
//! It is built from the ledger alone: the balances now by [`SlotKind`] and the history
//! of each account's movements per day ([`DayMovements`]). A kind's balance at the start
//! of day D is its balance now minus the net changes of the days from D on, exactly, so
//! any period's opening and closing balances come without replaying anything.
//!
//! Renderings (JSON, CSV, Markdown, HTML) live in `finance_render` and `finance_html`.

use crate::engine::Engine;
use crate::ledger::{DayMovements, Reason, SlotKind};
use crate::state::AccountIx;
use crate::time::{day_to_date, parse_day, Millis};
use rust_decimal::Decimal;
use serde::Serialize;
use std::collections::BTreeMap;

/// Declares a group of report lines: the struct, its field names (the JSON keys and the
/// HTML `data-field` markers), human labels, and its values in order.
macro_rules! lines {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $label:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: Decimal,)*
        }

        impl $name {
            /// The field names (JSON keys), in order.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            /// What a reader calls each line, in the order of `FIELDS`.
            pub const LABELS: &'static [&'static str] = &[$($label),*];

            /// The values, in the order of `FIELDS`.
            pub fn values(&self) -> Vec<Decimal> {
                vec![$(self.$field),*]
            }

            fn values_mut(&mut self) -> Vec<&mut Decimal> {
                vec![$(&mut self.$field),*]
            }

            fn add(&mut self, other: &$name) {
                for (mine, theirs) in self.values_mut().into_iter().zip(other.values()) {
                    *mine += theirs;
                }
            }

            fn normalize(&mut self) {
                for value in self.values_mut() {
                    *value = value.normalize();
                }
            }
        }
    };
}

lines! {
    /// Money that came in from outside during the period.
    MoneyIn {
        /// Manual top-ups (admin API).
        top_ups_usd: "top-ups",
        /// Auto-refill card charges that settled.
        auto_refills_usd: "auto-refills",
        /// The two above.
        total_usd: "money in",
    }
}

lines! {
    /// Where the money is at one moment: what resellers can still spend or get back.
    Holdings {
        /// Reseller balances.
        reseller_balance_usd: "reseller balances",
        /// The exact credit of every eSIM wallet.
        esim_wallets_usd: "eSIM wallets",
        /// The exact credit of every group.
        group_balances_usd: "group balances",
        /// Balances on their way back to the reseller balance.
        returns_pending_usd: "returns on their way",
        /// The four above.
        total_usd: "held",
    }
}

lines! {
    /// Where the money went during the period: what left the resellers' hands for good.
    /// Each line is the change of its ledger balances over the period.
    Spent {
        /// Provisioning fees.
        provisioning_fees_usd: "provisioning fees",
        /// Data charged and reported by the upstream pipeline.
        data_charged_reported_usd: "data reported",
        /// Data charged and not yet reported (over a period: the change of that pile,
        /// below zero when reports caught up with usage of earlier days).
        data_charged_unreported_usd: "data not yet reported",
        /// Wallet credit forfeited by terminated eSIMs.
        forfeited_usd: "forfeited",
        /// Conversion dust and the sub-cent rests of returns and moves.
        dust_usd: "conversion dust",
        /// The five above.
        total_usd: "spent",
    }
}

lines! {
    /// Money that moved between an account's own pockets during a day (no effect on what
    /// it holds in total; shown so a day's balances can be followed).
    MovedInside {
        /// Reseller balance to eSIM wallets.
        esim_funds_usd: "eSIM funds",
        /// Reseller balance to groups.
        group_funds_usd: "group funds",
        /// Wallet credit sent back (defund, move, group defund).
        returns_requested_usd: "returns requested",
        /// Returns that reached the reseller balance.
        returns_settled_usd: "returns settled",
    }
}

/// One account over the period (or the total of every account in the report).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AccountReport {
    /// The account's id (`TOTAL` for the total row; `seed-N` in a simulation report).
    pub account_id: String,
    /// Its company name, when it has one.
    pub company_name: Option<String>,
    /// Held at the start of the period (0 when the period starts at the first movement).
    pub opening: Holdings,
    /// Came in during the period.
    pub money_in: MoneyIn,
    /// Held at the end of the period: where the money is now.
    pub closing: Holdings,
    /// Left for good during the period: where it went.
    pub spent: Spent,
    /// opening + money in - closing - spent: exactly 0 when money is conserved.
    pub difference_usd: Decimal,
}

impl AccountReport {
    fn add(&mut self, other: &AccountReport) {
        self.opening.add(&other.opening);
        self.money_in.add(&other.money_in);
        self.closing.add(&other.closing);
        self.spent.add(&other.spent);
        self.difference_usd += other.difference_usd;
    }

    fn normalize(&mut self) {
        self.opening.normalize();
        self.money_in.normalize();
        self.closing.normalize();
        self.spent.normalize();
        self.difference_usd = self.difference_usd.normalize();
    }

    /// Every figure as (`section.field`, value), in report order: the CSV columns and the
    /// HTML `data-field` markers.
    pub fn figures(&self) -> Vec<(String, Decimal)> {
        let mut out = Vec::new();
        let mut section = |name: &str, fields: &[&str], values: Vec<Decimal>| {
            for (field, value) in fields.iter().zip(values) {
                out.push((format!("{name}.{field}"), value));
            }
        };
        section("opening", Holdings::FIELDS, self.opening.values());
        section("money_in", MoneyIn::FIELDS, self.money_in.values());
        section("closing", Holdings::FIELDS, self.closing.values());
        section("spent", Spent::FIELDS, self.spent.values());
        out.push(("difference_usd".into(), self.difference_usd));
        out
    }
}

/// One service day of the accounts in the report, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DayRow {
    /// The UTC date, `2026-01-31`.
    pub date: String,
    /// Came in that day.
    pub money_in: MoneyIn,
    /// Moved between the accounts' own pockets that day.
    pub moved_inside: MovedInside,
    /// Left for good that day.
    pub spent: Spent,
    /// Held at the end of the day.
    pub closing: Holdings,
}

impl DayRow {
    fn add_movements(&mut self, other: &DayRow) {
        self.money_in.add(&other.money_in);
        self.moved_inside.add(&other.moved_inside);
        self.spent.add(&other.spent);
    }

    fn normalize(&mut self) {
        self.money_in.normalize();
        self.moved_inside.normalize();
        self.spent.normalize();
        self.closing.normalize();
    }

    /// Every figure as (`section.field`, value), in table order.
    pub fn figures(&self) -> Vec<(String, Decimal)> {
        let mut out = Vec::new();
        let mut section = |name: &str, fields: &[&str], values: Vec<Decimal>| {
            for (field, value) in fields.iter().zip(values) {
                out.push((format!("{name}.{field}"), value));
            }
        };
        section("money_in", MoneyIn::FIELDS, self.money_in.values());
        section("moved_inside", MovedInside::FIELDS, self.moved_inside.values());
        section("spent", Spent::FIELDS, self.spent.values());
        section("closing", Holdings::FIELDS, self.closing.values());
        out
    }
}

/// A report period at day granularity (decision 107): `from` is the first day counted,
/// `until` the first day not counted (half-open, so consecutive periods tile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Period {
    /// First day counted (days since 1970-01-01, UTC); `None`: from the first movement.
    pub from_day: Option<i64>,
    /// First day not counted; `None`: up to now.
    pub until_day: Option<i64>,
}

impl Period {
    /// Everything, from the first movement to now.
    pub const ALL: Period = Period { from_day: None, until_day: None };

    /// Parses `from` and `until` (a date `2026-01-31` or an RFC 3339 instant, which counts
    /// as the UTC day holding it). The message names the bad parameter.
    pub fn parse(from: Option<&str>, until: Option<&str>) -> Result<Period, String> {
        let day = |name: &str, text: Option<&str>| -> Result<Option<i64>, String> {
            text.filter(|t| !t.trim().is_empty())
                .map(|t| {
                    parse_day(t).ok_or_else(|| {
                        format!(
                            "{name} must be a date (2026-01-31) or an RFC 3339 time (2026-01-31T00:00:00Z); got {t:?}"
                        )
                    })
                })
                .transpose()
        };
        let period = Period { from_day: day("from", from)?, until_day: day("until", until)? };
        if let (Some(from), Some(until)) = (period.from_day, period.until_day) {
            if until < from {
                return Err(format!(
                    "until ({}) is before from ({}); until is the first day not counted",
                    day_to_date(until),
                    day_to_date(from)
                ));
            }
        }
        Ok(period)
    }

    fn contains(&self, day: i64) -> bool {
        self.from_day.is_none_or(|from| day >= from) && self.until_day.is_none_or(|until| day < until)
    }
}

/// The period as the report states it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PeriodText {
    /// First day counted, or `null`: from the first movement.
    pub from: Option<String>,
    /// First day not counted, or `null`: up to the time the report was made.
    pub until: Option<String>,
}

/// The finance report (issue 16): per account and in total, money in, where it is now,
/// where it went and the difference, over a period, with a per-day movements table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinanceReport {
    /// The service time it was made at (RFC 3339), or what a simulation report covers.
    pub generated_at: String,
    /// What the rows are and what is summed, in plain words.
    pub scope: String,
    /// The period.
    pub period: PeriodText,
    /// One row per account.
    pub accounts: Vec<AccountReport>,
    /// Every account summed.
    pub total: AccountReport,
    /// The accounts' days with at least one movement in the period, oldest first.
    pub days: Vec<DayRow>,
    /// True when every difference is exactly 0 and every account's history explains its
    /// balances now (the sum of its daily net changes is its balance, kind by kind).
    pub conserved: bool,
}

/// Balances by kind, indexed like [`SlotKind::ALL`].
type Kinds = [Decimal; SlotKind::ALL.len()];

fn holdings(kinds: &Kinds) -> Holdings {
    let k = |kind: SlotKind| kinds[kind as usize];
    let mut h = Holdings {
        reseller_balance_usd: k(SlotKind::Reseller),
        esim_wallets_usd: k(SlotKind::EsimCredit),
        group_balances_usd: k(SlotKind::GroupCredit),
        returns_pending_usd: k(SlotKind::ReturnsPending),
        total_usd: Decimal::ZERO,
    };
    h.total_usd = h.reseller_balance_usd + h.esim_wallets_usd + h.group_balances_usd + h.returns_pending_usd;
    h
}

/// The spent lines of a change of balances (`kinds` = closing minus opening).
fn spent(kinds: &Kinds) -> Spent {
    let k = |kind: SlotKind| kinds[kind as usize];
    let mut s = Spent {
        provisioning_fees_usd: k(SlotKind::Fees),
        data_charged_reported_usd: k(SlotKind::EsimReported) + k(SlotKind::GroupReported),
        data_charged_unreported_usd: k(SlotKind::EsimUnreported) + k(SlotKind::GroupUnreported),
        forfeited_usd: k(SlotKind::Forfeited),
        dust_usd: k(SlotKind::Dust),
        total_usd: Decimal::ZERO,
    };
    s.total_usd = s.provisioning_fees_usd
        + s.data_charged_reported_usd
        + s.data_charged_unreported_usd
        + s.forfeited_usd
        + s.dust_usd;
    s
}

fn money_in(flows: &[Decimal; Reason::ALL.len()]) -> MoneyIn {
    let (top_ups_usd, auto_refills_usd) = (flows[Reason::TopUp as usize], flows[Reason::AutoRefill as usize]);
    MoneyIn { top_ups_usd, auto_refills_usd, total_usd: top_ups_usd + auto_refills_usd }
}

fn moved_inside(flows: &[Decimal; Reason::ALL.len()]) -> MovedInside {
    MovedInside {
        esim_funds_usd: flows[Reason::EsimFund as usize],
        group_funds_usd: flows[Reason::GroupFund as usize],
        returns_requested_usd: flows[Reason::ReturnRequested as usize],
        returns_settled_usd: flows[Reason::ReturnSettled as usize],
    }
}

fn minus(a: &Kinds, b: &Kinds) -> Kinds {
    std::array::from_fn(|i| a[i] - b[i])
}

/// Balances at the start of `day`: `now` minus the net changes of the days from `day` on.
fn balances_at(now: &Kinds, history: &[DayMovements], day: i64) -> Kinds {
    let mut kinds = *now;
    for entry in history.iter().rev().take_while(|entry| entry.day >= day) {
        for (balance, net) in kinds.iter_mut().zip(&entry.net) {
            *balance -= net;
        }
    }
    kinds
}

/// One account (or any series of days with its balances now) over `period`; the bool
/// says whether the history explains the balances now.
fn account_report(now: &Kinds, history: &[DayMovements], period: Period) -> (AccountReport, bool) {
    let explained = balances_at(now, history, i64::MIN).iter().all(Decimal::is_zero);
    // From the first movement: the opening is 0 by definition, not derived, so a balance
    // the history does not explain shows as a difference.
    let opening = period.from_day.map_or([Decimal::ZERO; SlotKind::ALL.len()], |day| balances_at(now, history, day));
    let closing = period.until_day.map_or(*now, |day| balances_at(now, history, day));
    let mut flows = [Decimal::ZERO; Reason::ALL.len()];
    for entry in history.iter().filter(|entry| period.contains(entry.day)) {
        for (sum, flow) in flows.iter_mut().zip(&entry.flows) {
            *sum += flow;
        }
    }
    let mut report = AccountReport {
        opening: holdings(&opening),
        money_in: money_in(&flows),
        closing: holdings(&closing),
        spent: spent(&minus(&closing, &opening)),
        ..AccountReport::default()
    };
    report.difference_usd =
        report.opening.total_usd + report.money_in.total_usd - report.closing.total_usd - report.spent.total_usd;
    (report, explained)
}

/// The per-day table of several accounts' histories summed, over `period`.
fn day_rows(now: &Kinds, history: &[DayMovements], period: Period) -> Vec<DayRow> {
    let mut rows = Vec::new();
    // Walk back from now: the closing of day D is now minus the nets of the days after D.
    let mut after = *now;
    for entry in history.iter().rev() {
        if period.contains(entry.day) {
            rows.push(DayRow {
                date: day_to_date(entry.day),
                money_in: money_in(&entry.flows),
                moved_inside: moved_inside(&entry.flows),
                spent: spent(&entry.net),
                closing: holdings(&after),
            });
        }
        after = minus(&after, &entry.net);
    }
    rows.reverse();
    rows
}

/// Several accounts' histories as one, summed by day.
fn merge_histories<'a>(histories: impl Iterator<Item = &'a [DayMovements]>) -> Vec<DayMovements> {
    let mut days: BTreeMap<i64, DayMovements> = BTreeMap::new();
    for history in histories {
        for entry in history {
            let sum = days.entry(entry.day).or_insert_with(|| DayMovements {
                day: entry.day,
                flows: [Decimal::ZERO; Reason::ALL.len()],
                net: [Decimal::ZERO; SlotKind::ALL.len()],
            });
            for (a, b) in sum.flows.iter_mut().zip(&entry.flows) {
                *a += b;
            }
            for (a, b) in sum.net.iter_mut().zip(&entry.net) {
                *a += b;
            }
        }
    }
    days.into_values().collect()
}

impl FinanceReport {
    fn finish(mut self) -> FinanceReport {
        self.total = AccountReport { account_id: "TOTAL".into(), ..AccountReport::default() };
        for row in &self.accounts {
            self.total.add(row);
        }
        self.conserved &=
            self.accounts.iter().all(|a| a.difference_usd.is_zero()) && self.total.difference_usd.is_zero();
        for row in self.accounts.iter_mut().chain([&mut self.total]) {
            row.normalize();
        }
        for day in &mut self.days {
            day.normalize();
        }
        self
    }

    /// A report whose rows are other reports' totals (one per simulated seed), with the
    /// days summed by date; a report without a row on a date still holds its closing
    /// balance of its last earlier day (or nothing, before its first).
    pub fn combine(
        generated_at: String,
        scope: String,
        parts: Vec<(String, Option<String>, FinanceReport)>,
    ) -> FinanceReport {
        let mut dates: BTreeMap<String, DayRow> = BTreeMap::new();
        for (_, _, part) in &parts {
            for day in &part.days {
                dates.entry(day.date.clone()).or_insert_with(|| DayRow { date: day.date.clone(), ..DayRow::default() });
            }
        }
        for (_, _, part) in &parts {
            let mut own = part.days.iter().peekable();
            let mut held = part.total.opening.clone();
            for (date, row) in dates.iter_mut() {
                if let Some(day) = own.next_if(|day| &day.date == date) {
                    row.add_movements(day);
                    held = day.closing.clone();
                }
                row.closing.add(&held);
            }
        }
        let conserved = parts.iter().all(|(_, _, part)| part.conserved);
        let period = parts.first().map(|(_, _, part)| part.period.clone()).unwrap_or_default();
        let accounts = parts
            .into_iter()
            .map(|(account_id, company_name, part)| AccountReport { account_id, company_name, ..part.total })
            .collect();
        FinanceReport {
            generated_at,
            scope,
            period,
            accounts,
            total: AccountReport::default(),
            days: dates.into_values().collect(),
            conserved,
        }
        .finish()
    }
}

impl Engine {
    /// The finance report of one account (by id) or every account over `period`; `None`
    /// for an unknown account.
    pub fn finance_report(&self, account_id: Option<&str>, period: Period) -> Option<FinanceReport> {
        let indexes: Vec<AccountIx> = match account_id {
            Some(id) => vec![*self.account_index.get(id)?],
            None => (0..self.accounts.len() as u32).map(AccountIx).collect(),
        };
        let now = self.ledger.balances_by_kind();
        let mut conserved = true;
        let mut accounts = Vec::with_capacity(indexes.len());
        let mut now_in_scope = [Decimal::ZERO; SlotKind::ALL.len()];
        for &account in &indexes {
            let balances = &now[account.0 as usize];
            let (mut row, explained) = account_report(balances, self.ledger.history(account), period);
            conserved &= explained;
            row.account_id = self.accounts[account].id.clone();
            row.company_name = self.accounts[account].company_name.clone();
            accounts.push(row);
            for (sum, balance) in now_in_scope.iter_mut().zip(balances) {
                *sum += balance;
            }
        }
        let history = merge_histories(indexes.iter().map(|&a| self.ledger.history(a)));
        let scope = match account_id {
            Some(id) => format!("account {id}"),
            None => every_account_scope(indexes.len()),
        };
        Some(
            FinanceReport {
                generated_at: Millis::to_rfc3339(self.now),
                scope,
                period: PeriodText { from: period.from_day.map(day_to_date), until: period.until_day.map(day_to_date) },
                accounts,
                total: AccountReport::default(),
                days: day_rows(&now_in_scope, &history, period),
                conserved,
            }
            .finish(),
        )
    }
}

/// What the rows of an every-account report are, in words: `the 1 account, one row`,
/// `all 3 accounts, one row each`, `no account yet`.
pub fn every_account_scope(n: usize) -> String {
    match n {
        0 => "no account yet".to_string(),
        1 => "the 1 account, one row".to_string(),
        _ => format!("all {n} accounts, one row each"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;

    fn d(text: &str) -> Decimal {
        text.parse().unwrap()
    }

    /// A ledger with movements on days 10, 11 and 13, and each period's identity.
    #[test]
    fn every_period_opens_with_the_previous_close_and_balances_exactly() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        let esim = ledger.open_esim_wallet(AccountIx(0));
        ledger.set_day(10);
        ledger.transfer(slots.world, slots.reseller, d("100"), Reason::TopUp);
        ledger.transfer(slots.reseller, slots.fees, d("1.75"), Reason::ProvisioningFee);
        ledger.set_day(11);
        ledger.transfer(slots.reseller, esim.credit, d("20"), Reason::EsimFund);
        ledger.transfer(esim.credit, esim.unreported, d("3.333"), Reason::DataCharge);
        ledger.set_day(13);
        ledger.transfer(esim.unreported, esim.reported, d("3.333"), Reason::DataReport);
        ledger.transfer(slots.world, slots.reseller, d("50"), Reason::AutoRefill);
        let now = ledger.balances_by_kind()[0];
        let history = ledger.history(AccountIx(0));
        let mut previous_closing = None;
        for (from, until) in [(None, Some(11)), (Some(11), Some(12)), (Some(12), Some(14)), (Some(14), None)] {
            let period = Period { from_day: from, until_day: until };
            let (row, explained) = account_report(&now, history, period);
            assert!(explained);
            assert!(row.difference_usd.is_zero(), "{period:?}: {row:?}");
            if let Some(closing) = previous_closing.replace(row.closing.clone()) {
                assert_eq!(row.opening, closing, "{period:?}");
            }
        }
        let (whole, _) = account_report(&now, history, Period::ALL);
        assert_eq!(whole.money_in.total_usd, d("150"));
        assert_eq!(whole.closing.total_usd, d("150") - d("1.75") - d("3.333"));
        let (middle, _) = account_report(&now, history, Period { from_day: Some(11), until_day: Some(13) });
        assert_eq!(middle.spent.data_charged_unreported_usd, d("3.333"));
        assert_eq!(middle.money_in.total_usd, Decimal::ZERO);
        let days = day_rows(&now, history, Period::ALL);
        assert_eq!(
            days.iter().map(|r| r.date.as_str()).collect::<Vec<_>>(),
            ["1970-01-11", "1970-01-12", "1970-01-14"]
        );
        assert_eq!(days[2].spent.data_charged_unreported_usd, d("-3.333"));
        assert_eq!(days[2].closing, whole.closing);
    }

    #[test]
    fn an_unexplained_balance_is_not_conserved() {
        let mut ledger = Ledger::default();
        let slots = ledger.open_account(AccountIx(0));
        ledger.transfer(slots.world, slots.reseller, d("100"), Reason::TopUp);
        let mut now = ledger.balances_by_kind()[0];
        now[SlotKind::Reseller as usize] += d("0.01");
        let (row, explained) = account_report(&now, ledger.history(AccountIx(0)), Period::ALL);
        assert!(!explained);
        assert_eq!(row.difference_usd, d("-0.01"));
    }

    #[test]
    fn periods_parse_dates_and_refuse_reversed_bounds() {
        let period = Period::parse(Some("2026-01-02"), Some("2026-01-03T12:00:00Z")).unwrap();
        assert_eq!(period.until_day.unwrap() - period.from_day.unwrap(), 1);
        assert_eq!(Period::parse(None, Some("")).unwrap(), Period::ALL);
        assert!(Period::parse(Some("2026-01-03"), Some("2026-01-02")).unwrap_err().contains("before"));
        assert!(Period::parse(Some("2026-02-30"), None).unwrap_err().starts_with("from must be"));
    }
}
