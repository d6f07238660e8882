//! # esim-sim: the simulation harness
//!
//! Thousands of seeded worlds around the service, each driven through the same
//! in-memory HTTP layer as production (`esim_api::Service`) on a virtual clock:
//! resellers making valid and invalid calls of every endpoint, devices installing
//! profiles and using data in many countries, webhook receivers that answer, fail, time
//! out or go down for hours, the operator topping up, freezing and configuring cards,
//! upstream faults, and the clock jumping across sync cycles, pauses, settlements, card
//! settles and retries. After every step every invariant checker runs
//! ([`checkers::all`]); a violation is shrunk to a short trace and reported with the
//! seed, a state diff and the command that replays it.
//!
//! ## Entry points
//! - [`run`] / [`run_with_progress`]`(&SimOptions) -> SimSummary`: many seeds on
//!   `jobs` threads; [`SimSummary::table`] prints the summary, [`SimSummary::write_report`]
//!   writes the finance report (JSON, CSV, Markdown, HTML; a row per seed), `summary.md` and one
//!   `.scenario` script per shrunk violation.
//! - [`script::run_script`]: replays a scenario script of `scenarios/` (the format is in
//!   `scenarios/README.md`); a shrunk trace is such a script too.
//!
//! ## Checkers (after every step; see [`checkers`])
//! `conservation` (ledger sums to zero per account, world = minus top-ups, report
//! difference 0; at the end, the finance report cut at each day balances on both sides
//! and chains), `no_negative_slot`, `display` (exact - displayed in [0, 0.05), never
//! above, two decimals), `returns_exact` (defunds and moves return exactly the displayed
//! balance; the reseller balance moves by exactly the observed flows), `lifetime_counters`,
//! `legal_transitions` (status and euicc), `members_hold_no_wallet`,
//! `webhook_auto_disable`, `event_delivery` (each event to exactly the subscribed, active
//! webhooks; retries only to them; nothing dropped), `low_balance_once`, `rate_limit`,
//! `idempotent_replay`, `crash_recovery` (after a `crash`, the engine rebuilt from the
//! journal's bytes has the digest of the one that died; after a `failover`, the standby
//! that took over has the digest of the owner that paused), and three of the journal's
//! store (issue 17): `single_owner` (no two nodes acknowledge writes at one epoch, none
//! at an epoch older than the store's newest, and a fenced node acknowledges nothing
//! and knows it is fenced), `no_acknowledged_loss` (every acknowledged entry is in the
//! store exactly once, at its index, in order, with its bytes' CRC, and nothing else is;
//! a refused append of answered entries is a loss) and `standby_digest` (the standby at
//! the owner's head has the owner's state digest; every 32 steps and at each takeover).
//! Determinism (two runs of a seed, same responses, events and state
//! digest) is checked per seed with [`SimOptions::determinism`] and in the tests.
//!
//! ## Coverage and swarm runs
//! [`coverage`] counts what every run reached (each error code, event, eSIM and group
//! transition, fault, webhook outcome, checker evaluation): `--coverage` prints the
//! table, `--require-coverage` fails a run that left a required item at 0. With
//! `--mix swarm` (the default) each seed draws its own mix of ops and fault rates from the
//! seed alone ([`generate::Mix`]); `--mix uniform` gives every seed the fixed mix.
//!
//! ## The journal's store
//! The world's service is the owner node of an in-memory store
//! ([`esim_store::store_mem`], the PostgreSQL store's semantics) with a hot standby
//! following it: after every op its journal entries are appended through the owner's
//! `JournalSink`. With `--faults on` the generator also draws `failover` (the owner's
//! lease runs out, the standby takes over, catches up and serves; the old owner becomes
//! the zombie), `zombie` (it wakes and tries to append), `lost_commit` (a commit applied
//! with its outcome lost), `stall N` (the next change's append held N virtual ms: past
//! the append deadline its request is answered 503 with Retry-After and the batch still
//! commits; the `deadline_bounded` checker proves no answer comes later) and
//! `standby_lag N` (the standby left behind for N steps).
//!
//! ## Layout
//! `op` (the steps and their text form), `world` (the service and everything around
//! it, in parts: `request`, `oracle`, `observe`, `receiver`, `crash`, `store`, `json`), `generate`
//! (the seeded random world), `checkers` (the invariants), `shrink`,
//! `runner` (one seed: run, replay, violation reports), `script` (scenario scripts),
//! `report` (summary table and files).
#![forbid(unsafe_code)]

pub mod checkers;
pub mod cli;
pub mod coverage;
pub mod generate;
pub mod op;
pub mod report;
pub mod runner;
pub mod script;
pub mod shrink;
pub mod world;

#[cfg(feature = "test-switches")]
pub use esim_engine::InjectedBug;

/// Without the `test-switches` feature (the service binary's build) the engine has no bug
/// to switch on: this type has no value, so every `Option<InjectedBug>` of the harness is
/// `None` and the harness keeps one signature in both builds (decision 84).
#[cfg(not(feature = "test-switches"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {}
pub use report::{check_report_dir, SimSummary};
pub use runner::Violation;

use runner::RunConfig;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Seeds handed to a worker at a time (small enough to balance, large enough to not
/// contend on the counter).
const SEEDS_PER_CLAIM: u64 = 16;
/// Violations shrunk per run; later ones are reported unshrunk (a real bug fires on
/// most seeds, and each shrink replays the trace hundreds of times).
pub const MAX_SHRUNK_VIOLATIONS: usize = 8;

/// What `esim sim` runs.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// `--seeds A..B`, or `--seed S` as `S..S+1`.
    pub seeds: Range<u64>,
    /// `--steps N`: ops per seed, the prelude (accounts, top-ups, webhooks) included.
    pub steps: usize,
    /// `--accounts K`: reseller accounts created at the start (1 to 4).
    pub accounts: usize,
    /// `--faults on|off`: upstream faults through the sandbox.
    pub faults: bool,
    /// `--jobs N`: worker threads.
    pub jobs: usize,
    /// `--report DIR`: write conservation reports and the summary there.
    pub report: Option<PathBuf>,
    /// Run every seed twice and compare digests (twice the time).
    pub determinism: bool,
    /// Shrink violations (on by default).
    pub shrink: bool,
    /// Per-scenario conservation lines for the first this-many seeds in the report.
    pub report_scenarios: usize,
    /// `--coverage`: the summary table lists what the run reached (see [`coverage`]).
    pub coverage: bool,
    /// `--require-coverage`: the run fails when an item reachable by design was reached
    /// 0 times (implies `coverage`).
    pub require_coverage: bool,
    /// `--mix swarm`: each seed draws its own mix of ops and faults
    /// ([`generate::Mix::swarm`]); `--mix uniform`: every seed the fixed one.
    pub swarm: bool,
    /// Test-only: switch on a known engine bug to prove the harness catches it.
    #[doc(hidden)]
    pub inject_bug: Option<InjectedBug>,
    /// Test-only: the generator never gives ops of this verb.
    #[doc(hidden)]
    pub skip_verb: Option<&'static str>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seeds: 0..100,
            steps: 200,
            accounts: 2,
            faults: true,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            report: None,
            determinism: false,
            shrink: true,
            report_scenarios: 20,
            coverage: false,
            require_coverage: false,
            swarm: true,
            inject_bug: None,
            skip_verb: None,
        }
    }
}

impl SimOptions {
    fn run_config(&self) -> RunConfig {
        RunConfig {
            steps: self.steps,
            accounts: self.accounts,
            faults: self.faults,
            bug: self.inject_bug,
            fingerprint: false,
            swarm: self.swarm,
            skip_verb: self.skip_verb,
        }
    }
}

/// Runs every seed; see [`run_with_progress`].
pub fn run(options: &SimOptions) -> SimSummary {
    run_with_progress(options, |_, _| {})
}

/// Runs every seed on `options.jobs` threads, calling `progress(done, total)` as seeds
/// finish (from worker threads). Writes the report when `options.report` is set (a
/// failure to write is in [`SimSummary::report_error`]; a directory that cannot be
/// written is found before any seed runs, and then none does).
pub fn run_with_progress(options: &SimOptions, progress: impl Fn(u64, u64) + Sync) -> SimSummary {
    let started = Instant::now();
    if let Some(dir) = &options.report {
        // Checked before the run, not after it: nothing runs when the report has nowhere to go.
        if let Err(error) = report::check_report_dir(dir) {
            let mut summary = SimSummary::new(options);
            summary.report_error = Some(error);
            return summary;
        }
    }
    let config = options.run_config();
    let total = options.seeds.end.saturating_sub(options.seeds.start);
    let next = AtomicU64::new(options.seeds.start);
    let done = AtomicU64::new(0);
    let shrunk = AtomicUsize::new(0);
    let merged = Mutex::new(SimSummary::new(options));
    let jobs = options.jobs.clamp(1, 256);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                let mut partial = SimSummary::new(options);
                loop {
                    let first = next.fetch_add(SEEDS_PER_CLAIM, Ordering::Relaxed);
                    if first >= options.seeds.end {
                        break;
                    }
                    let last = (first + SEEDS_PER_CLAIM).min(options.seeds.end);
                    for seed in first..last {
                        let outcome = runner::run_seed(seed, &config);
                        let mut violation = None;
                        if outcome.found.is_some() {
                            let shrink_it =
                                options.shrink && shrunk.fetch_add(1, Ordering::Relaxed) < MAX_SHRUNK_VIOLATIONS;
                            violation = runner::violation(&outcome, &config, shrink_it);
                        }
                        let determinism = options.determinism.then(|| runner::check_determinism(seed, &config));
                        partial.add_seed(&outcome, violation, determinism);
                    }
                    let finished = done.fetch_add(last - first, Ordering::Relaxed) + (last - first);
                    progress(finished, total);
                }
                merged.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).merge(partial);
            });
        }
    });
    let mut summary = merged.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    summary.finish(started.elapsed());
    if let Some(dir) = &options.report {
        if let Err(error) = summary.write_report(dir) {
            summary.report_error = Some(format!("writing the report to {}: {error}", dir.display()));
        }
    }
    summary
}
