//! The conservation lines: per account and in total, every ledger flow and balance since
//! the start and the difference, which must be exactly 0 (docs/architecture.md, rule 6). The
//! simulation's checkers and scenario scripts (`expect report.ACCOUNT.LINE`) read these;
//! what finance reads is the [`crate::finance::FinanceReport`] built from the same ledger.

use crate::engine::Engine;
use crate::ledger::{Reason, SlotKind};
use crate::state::AccountIx;
use crate::time::Millis;
use rust_decimal::Decimal;
use serde::Serialize;
use std::fmt::Write;

/// One account's lines (or the total of all accounts).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AccountLines {
    /// The account's id, or `total`.
    pub account_id: String,
    // Money in from outside.
    /// Manual top-ups.
    pub top_ups_usd: Decimal,
    /// Auto-refill charges that settled.
    pub auto_refills_usd: Decimal,
    // Movements (what happened during the period).
    /// Provisioning fees paid.
    pub provisioning_fees_usd: Decimal,
    /// eSIM funds (their upstream credit).
    pub esim_funds_usd: Decimal,
    /// Group funds (their upstream credit).
    pub group_funds_usd: Decimal,
    /// Fund amounts under one retail cent, to dust.
    pub conversion_dust_usd: Decimal,
    /// Usage charged to wallets.
    pub data_charged_usd: Decimal,
    /// Balances sent back (defund, move, group defund).
    pub returns_requested_usd: Decimal,
    /// Returns settled to the reseller balance.
    pub returns_settled_usd: Decimal,
    /// Sub-cent rests of settled returns, to dust.
    pub return_dust_usd: Decimal,
    /// Sub-cent credits of eSIMs that joined a group, to dust.
    pub move_dust_usd: Decimal,
    /// Wallet credit forfeited by terminated eSIMs.
    pub forfeited_on_terminate_usd: Decimal,
    // Closing balances.
    /// The reseller balance now.
    pub reseller_balance_usd: Decimal,
    /// Exact credit of every eSIM wallet.
    #[serde(rename = "sim_wallets_usd")]
    pub esim_wallets_usd: Decimal,
    /// Exact credit of every group.
    pub group_balances_usd: Decimal,
    /// Returns on their way back.
    pub returns_pending_usd: Decimal,
    /// Provisioning fees earned.
    pub fees_earned_usd: Decimal,
    /// Usage charged, not yet reported.
    pub data_charged_unreported_usd: Decimal,
    /// Usage reported.
    pub data_charged_reported_usd: Decimal,
    /// Forfeited by terminated eSIMs.
    pub forfeited_usd: Decimal,
    /// Conversion dust and sub-cent rests.
    pub dust_usd: Decimal,
    /// top-ups + auto-refills - every closing balance: exactly 0 when money is conserved.
    pub difference_usd: Decimal,
}

impl AccountLines {
    fn add(&mut self, other: &AccountLines) {
        for (mine, theirs) in self.values_mut().into_iter().zip(other.values()) {
            *mine += theirs;
        }
    }

    fn values(&self) -> Vec<Decimal> {
        let mut copy = self.clone();
        copy.values_mut().into_iter().map(|v| *v).collect()
    }

    fn values_mut(&mut self) -> Vec<&mut Decimal> {
        vec![
            &mut self.top_ups_usd,
            &mut self.auto_refills_usd,
            &mut self.provisioning_fees_usd,
            &mut self.esim_funds_usd,
            &mut self.group_funds_usd,
            &mut self.conversion_dust_usd,
            &mut self.data_charged_usd,
            &mut self.returns_requested_usd,
            &mut self.returns_settled_usd,
            &mut self.return_dust_usd,
            &mut self.move_dust_usd,
            &mut self.forfeited_on_terminate_usd,
            &mut self.reseller_balance_usd,
            &mut self.esim_wallets_usd,
            &mut self.group_balances_usd,
            &mut self.returns_pending_usd,
            &mut self.fees_earned_usd,
            &mut self.data_charged_unreported_usd,
            &mut self.data_charged_reported_usd,
            &mut self.forfeited_usd,
            &mut self.dust_usd,
            &mut self.difference_usd,
        ]
    }

    /// Column names, in the order of [`AccountLines::values`].
    pub const COLUMNS: [&'static str; 23] = [
        "account_id",
        "top_ups_usd",
        "auto_refills_usd",
        "provisioning_fees_usd",
        "esim_funds_usd",
        "group_funds_usd",
        "conversion_dust_usd",
        "data_charged_usd",
        "returns_requested_usd",
        "returns_settled_usd",
        "return_dust_usd",
        "move_dust_usd",
        "forfeited_on_terminate_usd",
        "reseller_balance_usd",
        "sim_wallets_usd",
        "group_balances_usd",
        "returns_pending_usd",
        "fees_earned_usd",
        "data_charged_unreported_usd",
        "data_charged_reported_usd",
        "forfeited_usd",
        "dust_usd",
        "difference_usd",
    ];

    fn cells(&self) -> Vec<String> {
        std::iter::once(self.account_id.clone())
            .chain(self.values().into_iter().map(|v| v.normalize().to_string()))
            .collect()
    }
}

/// Money conservation per account and in total since the start: what the
/// simulation requires to be exactly 0 (docs/architecture.md, rule 6).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConservationReport {
    /// The service time it was made at (RFC 3339).
    pub generated_at: String,
    /// One column of lines per account.
    pub accounts: Vec<AccountLines>,
    /// All accounts summed.
    pub total: AccountLines,
    /// True when every difference is exactly zero.
    pub conserved: bool,
}

impl Engine {
    /// The report for one account (by id) or all accounts.
    pub fn conservation_report(&self, account_id: Option<&str>) -> Option<ConservationReport> {
        let indexes: Vec<AccountIx> = match account_id {
            Some(id) => vec![*self.account_index.get(id)?],
            None => (0..self.accounts.len() as u32).map(AccountIx).collect(),
        };
        // One pass over the ledger's slots for every account (a pass per account made a
        // report of 10,000 accounts at 1 M eSIMs take 20 s).
        let balances = self.ledger.balances_by_kind();
        let accounts: Vec<AccountLines> =
            indexes.into_iter().map(|a| self.account_lines(a, &balances[a.0 as usize])).collect();
        let mut total = AccountLines { account_id: "TOTAL".into(), ..Default::default() };
        for lines in &accounts {
            total.add(lines);
        }
        let conserved = accounts.iter().all(|a| a.difference_usd.is_zero()) && total.difference_usd.is_zero();
        Some(ConservationReport { generated_at: Millis::to_rfc3339(self.now), accounts, total, conserved })
    }

    /// An account's lines, from its flows and its balances summed by slot kind
    /// (indexed like [`SlotKind::ALL`]).
    fn account_lines(&self, account: AccountIx, balances: &[Decimal; SlotKind::ALL.len()]) -> AccountLines {
        let flow = |reason| self.ledger.flow(account, reason);
        let mut lines = AccountLines {
            account_id: self.accounts[account].id.clone(),
            top_ups_usd: flow(Reason::TopUp),
            auto_refills_usd: flow(Reason::AutoRefill),
            provisioning_fees_usd: flow(Reason::ProvisioningFee),
            esim_funds_usd: flow(Reason::EsimFund),
            group_funds_usd: flow(Reason::GroupFund),
            conversion_dust_usd: flow(Reason::ConversionDust),
            data_charged_usd: flow(Reason::DataCharge),
            returns_requested_usd: flow(Reason::ReturnRequested),
            returns_settled_usd: flow(Reason::ReturnSettled),
            return_dust_usd: flow(Reason::ReturnDust),
            move_dust_usd: flow(Reason::MoveDust),
            forfeited_on_terminate_usd: flow(Reason::Forfeit),
            ..Default::default()
        };
        for (kind, &balance) in SlotKind::ALL.iter().zip(balances) {
            let line = match kind {
                SlotKind::World => continue,
                SlotKind::Reseller => &mut lines.reseller_balance_usd,
                SlotKind::ReturnsPending => &mut lines.returns_pending_usd,
                SlotKind::Fees => &mut lines.fees_earned_usd,
                SlotKind::Forfeited => &mut lines.forfeited_usd,
                SlotKind::Dust => &mut lines.dust_usd,
                SlotKind::EsimCredit => &mut lines.esim_wallets_usd,
                SlotKind::GroupCredit => &mut lines.group_balances_usd,
                SlotKind::EsimUnreported | SlotKind::GroupUnreported => &mut lines.data_charged_unreported_usd,
                SlotKind::EsimReported | SlotKind::GroupReported => &mut lines.data_charged_reported_usd,
            };
            *line += balance;
        }
        let closing = lines.reseller_balance_usd
            + lines.esim_wallets_usd
            + lines.group_balances_usd
            + lines.returns_pending_usd
            + lines.fees_earned_usd
            + lines.data_charged_unreported_usd
            + lines.data_charged_reported_usd
            + lines.forfeited_usd
            + lines.dust_usd;
        lines.difference_usd = lines.top_ups_usd + lines.auto_refills_usd - closing;
        lines
    }
}

impl ConservationReport {
    /// JSON with every amount in its shortest exact form (`120.22`, `0`, `0.008`): the
    /// same figures as CSV and Markdown, no trailing zeros.
    pub fn to_json(&self) -> String {
        let mut copy = self.clone();
        for lines in copy.accounts.iter_mut().chain(std::iter::once(&mut copy.total)) {
            for value in lines.values_mut() {
                *value = value.normalize();
            }
        }
        serde_json::to_string_pretty(&copy).expect("reports serialize")
    }

    /// A Markdown table, one column per account (readable however many lines).
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Conservation report\n\nGenerated at {} (service time). Conserved: **{}**.\n",
            self.generated_at,
            if self.conserved { "yes, every difference is exactly 0" } else { "NO" }
        );
        // Transposed: one row per line, one column per account, so wide tables stay readable.
        let mut columns: Vec<&AccountLines> = self.accounts.iter().collect();
        columns.push(&self.total);
        let _ = writeln!(
            out,
            "| line | {} |",
            columns.iter().map(|c| c.account_id.as_str()).collect::<Vec<_>>().join(" | ")
        );
        let _ = writeln!(out, "|---|{}", "---:|".repeat(columns.len()));
        let cells: Vec<Vec<String>> = columns.iter().map(|c| c.cells()).collect();
        for (row, name) in AccountLines::COLUMNS.iter().enumerate().skip(1) {
            let values: Vec<&str> = cells.iter().map(|c| c[row].as_str()).collect();
            let _ = writeln!(out, "| {name} | {} |", values.join(" | "));
        }
        out
    }
}

impl Engine {
    /// The money invariants (docs/architecture.md, rules 2, 3 and 6), checked cheaply: per account
    /// the ledger sums to exactly zero (the outside world's slot is minus every top-up),
    /// no slot but `World` is negative. Returns one line per violation.
    pub fn money_violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        let mut sums = vec![Decimal::ZERO; self.accounts.len()];
        for (slot, info, balance) in self.ledger.slots() {
            sums[info.account.0 as usize] += balance;
            if info.kind != SlotKind::World && balance < Decimal::ZERO {
                violations
                    .push(format!("slot {slot} ({:?} of account {}) is negative: {balance}", info.kind, info.account));
            }
        }
        for (account, sum) in sums.iter().enumerate() {
            if !sum.is_zero() {
                violations.push(format!("account {account}: ledger sums to {sum}, not 0"));
            }
            let slots = self.accounts[account].slots;
            let topups = self.ledger.flow(AccountIx(account as u32), Reason::TopUp)
                + self.ledger.flow(AccountIx(account as u32), Reason::AutoRefill);
            if self.ledger.balance(slots.world) != -topups {
                violations.push(format!(
                    "account {account}: outside world holds {} but top-ups total {topups}",
                    self.ledger.balance(slots.world)
                ));
            }
        }
        violations
    }
}
