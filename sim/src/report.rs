//! The summary of a simulation run, its table, and the report files.

use crate::coverage::Coverage;
use crate::runner::{SeedOutcome, Violation};
use crate::SimOptions;
use esim_engine::finance::FinanceReport;
use esim_engine::finance_render::count;
use esim_engine::report::{AccountLines, ConservationReport};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

/// What a run of many seeds did, and what went wrong.
#[derive(Clone, Debug)]
pub struct SimSummary {
    pub seeds: Range<u64>,
    pub steps_per_seed: usize,
    pub accounts: usize,
    pub faults: bool,
    pub scenarios: u64,
    pub steps: u64,
    /// Ops applied, by kind (the script verb).
    pub commands: BTreeMap<&'static str, u64>,
    pub requests: u64,
    pub rate_limited: u64,
    pub events: u64,
    pub deliveries: u64,
    pub deliveries_ok: u64,
    /// Per-scenario totals for the first seeds (account_id `seed-N`) and the sum of all
    /// scenarios (`TOTAL`); `conserved` holds for every scenario.
    pub conservation: ConservationReport,
    /// Sorted by seed.
    pub violations: Vec<Violation>,
    /// Seeds run twice and compared (with `determinism`), and the failures.
    pub determinism_checked: u64,
    pub determinism_failures: Vec<String>,
    pub elapsed: Duration,
    pub report_error: Option<String>,
    /// What the seeds reached, item by item (see [`crate::coverage`]).
    pub coverage: Coverage,
    /// Show the coverage table in [`SimSummary::table`].
    pub show_coverage: bool,
    /// Items reachable by design reached 0 times make the run fail ([`SimSummary::ok`]).
    pub require_coverage: bool,
    report_scenarios: usize,
    /// Every seed's finance report (its total and days; sorted by seed at the end): the
    /// rows of the report files.
    finance: Vec<(u64, FinanceReport)>,
}

/// Adds every line of `b` to `a`.
fn add_lines(a: &mut AccountLines, b: &AccountLines) {
    macro_rules! add {
        ($($field:ident),*) => { $( a.$field += b.$field; )* };
    }
    add!(
        top_ups_usd,
        auto_refills_usd,
        provisioning_fees_usd,
        esim_funds_usd,
        group_funds_usd,
        conversion_dust_usd,
        data_charged_usd,
        returns_requested_usd,
        returns_settled_usd,
        return_dust_usd,
        move_dust_usd,
        forfeited_on_terminate_usd,
        reseller_balance_usd,
        esim_wallets_usd,
        group_balances_usd,
        returns_pending_usd,
        fees_earned_usd,
        data_charged_unreported_usd,
        data_charged_reported_usd,
        forfeited_usd,
        dust_usd,
        difference_usd
    );
}

impl SimSummary {
    pub(crate) fn new(options: &SimOptions) -> SimSummary {
        SimSummary {
            seeds: options.seeds.clone(),
            steps_per_seed: options.steps,
            accounts: options.accounts,
            faults: options.faults,
            scenarios: 0,
            steps: 0,
            commands: BTreeMap::new(),
            requests: 0,
            rate_limited: 0,
            events: 0,
            deliveries: 0,
            deliveries_ok: 0,
            conservation: ConservationReport {
                generated_at: format!("simulation of seeds {}..{}", options.seeds.start, options.seeds.end),
                accounts: Vec::new(),
                total: AccountLines { account_id: "TOTAL".into(), ..AccountLines::default() },
                conserved: true,
            },
            violations: Vec::new(),
            determinism_checked: 0,
            determinism_failures: Vec::new(),
            elapsed: Duration::ZERO,
            report_error: None,
            coverage: Coverage::default(),
            show_coverage: options.coverage || options.require_coverage,
            require_coverage: options.require_coverage,
            report_scenarios: options.report_scenarios,
            finance: Vec::new(),
        }
    }

    pub(crate) fn add_seed(
        &mut self,
        outcome: &SeedOutcome,
        violation: Option<Violation>,
        determinism: Option<Result<(), String>>,
    ) {
        self.scenarios += 1;
        self.steps += outcome.trace.len() as u64;
        for op in &outcome.trace {
            *self.commands.entry(op.verb()).or_default() += 1;
        }
        self.requests += outcome.stats.requests;
        self.rate_limited += outcome.stats.rate_limited;
        self.events += outcome.stats.events;
        self.deliveries += outcome.stats.deliveries;
        self.deliveries_ok += outcome.stats.deliveries_ok;
        self.coverage.add(&outcome.coverage);
        if let Some(report) = &outcome.report {
            add_lines(&mut self.conservation.total, &report.total);
            self.conservation.conserved &= report.conserved;
            if outcome.seed < self.seeds.start + self.report_scenarios as u64 {
                let mut lines = report.total.clone();
                lines.account_id = format!("seed-{}", outcome.seed);
                self.conservation.accounts.push(lines);
            }
        }
        if let Some(finance) = &outcome.finance {
            self.conservation.conserved &= finance.conserved;
            // The seed's total is its row: its accounts are not kept (thousands of seeds).
            self.finance.push((outcome.seed, FinanceReport { accounts: Vec::new(), ..finance.clone() }));
        }
        self.violations.extend(violation);
        if let Some(result) = determinism {
            self.determinism_checked += 1;
            if let Err(error) = result {
                self.determinism_failures.push(error);
            }
        }
    }

    pub(crate) fn merge(&mut self, other: SimSummary) {
        self.scenarios += other.scenarios;
        self.steps += other.steps;
        for (verb, count) in other.commands {
            *self.commands.entry(verb).or_default() += count;
        }
        self.requests += other.requests;
        self.rate_limited += other.rate_limited;
        self.events += other.events;
        self.deliveries += other.deliveries;
        self.deliveries_ok += other.deliveries_ok;
        self.coverage.add(&other.coverage);
        add_lines(&mut self.conservation.total, &other.conservation.total);
        self.conservation.conserved &= other.conservation.conserved;
        self.conservation.accounts.extend(other.conservation.accounts);
        self.violations.extend(other.violations);
        self.finance.extend(other.finance);
        self.determinism_checked += other.determinism_checked;
        self.determinism_failures.extend(other.determinism_failures);
    }

    /// Orders what threads gathered, so a summary is the same whatever `--jobs`.
    pub(crate) fn finish(&mut self, elapsed: Duration) {
        self.elapsed = elapsed;
        self.conservation
            .accounts
            .sort_by_key(|l| l.account_id.trim_start_matches("seed-").parse::<u64>().unwrap_or(0));
        self.violations.sort_by_key(|v| v.seed);
        self.finance.sort_by_key(|(seed, _)| *seed);
        self.determinism_failures.sort();
    }

    /// True when nothing went wrong: no violation, every run deterministic, conserved,
    /// and (with `require_coverage`) every item reachable by design reached.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
            && self.determinism_failures.is_empty()
            && self.conservation.conserved
            && (!self.require_coverage || self.coverage.missing().is_empty())
    }

    /// The table printed at the end of `esim sim`.
    pub fn table(&self) -> String {
        self.table_with(self.show_coverage)
    }

    fn table_with(&self, show_coverage: bool) -> String {
        let total = &self.conservation.total;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Simulation of seeds {}..{}: {} steps each, {}, faults {}",
            self.seeds.start,
            self.seeds.end,
            self.steps_per_seed,
            count(self.accounts, "account", "accounts"),
            if self.faults { "on" } else { "off" }
        );
        let row = |out: &mut String, name: &str, value: String| {
            let _ = writeln!(out, "  {name:<28} {value:>16}");
        };
        row(&mut out, "scenarios", self.scenarios.to_string());
        row(&mut out, "steps", self.steps.to_string());
        row(&mut out, "HTTP requests", self.requests.to_string());
        row(&mut out, "  of which rate limited (429)", self.rate_limited.to_string());
        row(&mut out, "events emitted", self.events.to_string());
        row(&mut out, "webhook deliveries", self.deliveries.to_string());
        row(&mut out, "  answered 2xx", self.deliveries_ok.to_string());
        let _ = writeln!(out, "money moved (USD)");
        let money = |v: rust_decimal::Decimal| v.normalize().to_string();
        row(&mut out, "top-ups", money(total.top_ups_usd));
        row(&mut out, "auto-refills", money(total.auto_refills_usd));
        row(&mut out, "provisioning fees", money(total.provisioning_fees_usd));
        row(&mut out, "eSIM funds (credit)", money(total.esim_funds_usd));
        row(&mut out, "group funds (credit)", money(total.group_funds_usd));
        row(&mut out, "conversion dust", money(total.conversion_dust_usd));
        row(&mut out, "data charged", money(total.data_charged_usd));
        row(&mut out, "returns settled", money(total.returns_settled_usd));
        row(&mut out, "forfeited on terminate", money(total.forfeited_on_terminate_usd));
        row(&mut out, "conservation difference", money(total.difference_usd));
        let _ = writeln!(out, "commands by kind");
        for (verb, count) in &self.commands {
            row(&mut out, verb, count.to_string());
        }
        if self.determinism_checked > 0 {
            row(&mut out, "determinism: seeds run twice", self.determinism_checked.to_string());
            row(&mut out, "determinism failures", self.determinism_failures.len().to_string());
        }
        if show_coverage {
            out.push_str(&self.coverage.table());
        }
        if self.require_coverage {
            let missing = self.coverage.missing();
            row(&mut out, "coverage: items not reached", missing.len().to_string());
        }
        row(&mut out, "violations", self.violations.len().to_string());
        row(&mut out, "elapsed", format!("{:.2} s", self.elapsed.as_secs_f64()));
        for violation in &self.violations {
            let _ = write!(out, "\n{violation}");
        }
        for failure in &self.determinism_failures {
            let _ = writeln!(out, "\nNOT DETERMINISTIC: {failure}");
        }
        out
    }

    /// The finance report of the run: one row per seed (that seed's accounts summed over
    /// its whole run) and the total; the days of every seed summed by date.
    pub fn finance_report(&self) -> FinanceReport {
        let parts = self.finance.iter().map(|(seed, report)| (format!("seed-{seed}"), None, report.clone())).collect();
        FinanceReport::combine(
            format!("the end of each seed's run (seeds {}..{})", self.seeds.start, self.seeds.end),
            format!(
                "one row per seed ({}): each seed's {} summed over its whole run; the per-day table sums every seed's day by date (every seed starts on the same virtual day)",
                count(self.finance.len(), "seed", "seeds"),
                count(self.accounts, "account", "accounts")
            ),
            parts,
        )
    }

    /// Writes into `dir` the finance report of the run (`conservation.json`, `.csv`, `.md`,
    /// `.html`, see [`SimSummary::finance_report`]), `conservation-days.csv` (the per-day
    /// table), `summary.md`, and for each violation a replayable
    /// `violation-seed-N.scenario` with its shrunk trace.
    pub fn write_report(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let finance = self.finance_report();
        std::fs::write(dir.join("conservation.json"), finance.to_json())?;
        std::fs::write(dir.join("conservation.csv"), finance.to_csv())?;
        std::fs::write(dir.join("conservation-days.csv"), finance.days_to_csv())?;
        std::fs::write(dir.join("conservation.md"), finance.to_markdown())?;
        std::fs::write(dir.join("conservation.html"), finance.to_html())?;
        // The report carries the coverage table whether or not the terminal showed it.
        let table = self.table_with(true);
        let summary = format!("# Simulation summary\n\n```text\n{table}```\n");
        std::fs::write(dir.join("summary.md"), summary)?;
        for violation in &self.violations {
            std::fs::write(dir.join(format!("violation-seed-{}.scenario", violation.seed)), violation.script())?;
        }
        Ok(())
    }
}

/// Checks before a run that the report directory can be written (creating it when
/// missing), so a long run does not end with nowhere to put its report.
pub fn check_report_dir(dir: &Path) -> Result<(), String> {
    let fail = |error: std::io::Error| format!("the report directory {} cannot be written: {error}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".esim-write-check");
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}
