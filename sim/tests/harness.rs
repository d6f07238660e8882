//! The harness end to end: a clean run finds nothing, a known engine bug is caught and
//! shrunk to a short trace that replays, and every seed is deterministic.

use esim_sim::runner::{self, RunConfig};
use esim_sim::{script, InjectedBug, SimOptions};

/// Longest acceptable shrunk trace for the injected bug (it needs an account, a top-up,
/// a provisioning, a fund, a defund and a wait: 6 steps).
const MAX_SHRUNK_STEPS: usize = 15;

#[test]
fn a_clean_engine_passes_every_checker() {
    let options = SimOptions { seeds: 0..200, steps: 200, jobs: 2, ..SimOptions::default() };
    let summary = esim_sim::run(&options);
    assert!(summary.ok(), "{}", summary.table());
    assert_eq!(summary.scenarios, 200);
    assert_eq!(summary.steps, 200 * 200);
    assert!(summary.conservation.conserved);
    assert!(summary.conservation.total.difference_usd.is_zero());
    // The worlds reach the interesting places.
    assert!(summary.rate_limited > 0, "some burst reached the rate limit");
    assert!(summary.deliveries_ok > 0 && summary.deliveries > summary.deliveries_ok, "receivers answer and fail");
    assert!(summary.conservation.total.returns_settled_usd > rust_decimal::Decimal::ZERO);
    assert!(summary.conservation.total.auto_refills_usd > rust_decimal::Decimal::ZERO);
    for verb in [
        "fund",
        "fundgroup",
        "defund",
        "defundgroup",
        "usage",
        "advance",
        "raw",
        "burst",
        "faults",
        "testwebhook",
        "crash",
        "failover",
        "zombie",
        "lost_commit",
        "stall",
        "standby_lag",
    ] {
        assert!(summary.commands.get(verb).copied().unwrap_or(0) > 0, "no {verb} in {:?}", summary.commands);
    }
    let table = summary.table();
    for line in ["scenarios", "steps", "commands by kind", "webhook deliveries", "money moved", "violations"] {
        assert!(table.contains(line), "{table}");
    }
}

#[test]
fn an_injected_settlement_bug_is_caught_and_shrunk() {
    let options = SimOptions {
        seeds: 0..40,
        steps: 200,
        jobs: 2,
        accounts: 1,
        inject_bug: Some(InjectedBug::SettlementPaysOneCentMore),
        ..SimOptions::default()
    };
    let summary = esim_sim::run(&options);
    assert!(!summary.violations.is_empty(), "the bug went unnoticed:\n{}", summary.table());
    let violation = &summary.violations[0];
    assert!(matches!(violation.checker, "conservation" | "returns_exact"), "{violation}");
    assert!(violation.shrunk.len() <= MAX_SHRUNK_STEPS, "{violation}");
    assert!(violation.replay.starts_with(&format!(
        "esim sim --seed {} --steps {}",
        violation.seed,
        violation.step + 1
    )));
    assert!(violation.state_diff.contains("reseller"), "{}", violation.state_diff);
    // The shrunk trace replays to the same checker, and so does the replay command's prefix.
    let config = RunConfig {
        steps: violation.step + 1,
        accounts: 1,
        faults: true,
        bug: options.inject_bug,
        fingerprint: false,
        swarm: options.swarm,
        skip_verb: None,
    };
    let again = runner::replay(&violation.shrunk, violation.seed, options.inject_bug).expect("still fails");
    assert_eq!(again.checker, violation.checker);
    let rerun = runner::run_seed(violation.seed, &config);
    assert_eq!(rerun.found.map(|f| (f.step, f.checker)), Some((violation.step, violation.checker)));
    // The shrunk trace is a valid scenario script, and it passes without the bug.
    let clean = script::run_script(&violation.script());
    assert!(clean.failures.is_empty(), "{:?}", clean.failures);
    assert_eq!(clean.steps, violation.shrunk.len());
    // The report files are written.
    let dir = std::env::temp_dir().join(format!("esim-sim-report-{}", std::process::id()));
    summary.write_report(&dir).unwrap();
    for file in [
        "conservation.json",
        "conservation.csv",
        "conservation-days.csv",
        "conservation.md",
        "conservation.html",
        "summary.md",
    ] {
        assert!(dir.join(file).exists(), "{file}");
    }
    assert!(dir.join(format!("violation-seed-{}.scenario", violation.seed)).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_runs_of_a_seed_are_identical() {
    let config = RunConfig {
        steps: 300,
        accounts: 3,
        faults: true,
        bug: None,
        fingerprint: true,
        swarm: false,
        skip_verb: None,
    };
    for seed in 0..12 {
        runner::check_determinism(seed, &config).unwrap();
    }
    // And different seeds make different worlds.
    let a = runner::run_seed(1, &config).fingerprint;
    let b = runner::run_seed(2, &config).fingerprint;
    assert_ne!(a, b);
    let options = SimOptions { seeds: 100..110, steps: 150, jobs: 2, determinism: true, ..SimOptions::default() };
    let summary = esim_sim::run(&options);
    assert_eq!(summary.determinism_checked, 10);
    assert!(summary.ok(), "{}", summary.table());
}

#[test]
fn a_summary_does_not_depend_on_the_number_of_jobs() {
    let one = esim_sim::run(&SimOptions { seeds: 0..24, steps: 120, jobs: 1, ..SimOptions::default() });
    let three = esim_sim::run(&SimOptions { seeds: 0..24, steps: 120, jobs: 3, ..SimOptions::default() });
    assert_eq!(one.commands, three.commands);
    assert_eq!(one.requests, three.requests);
    assert_eq!(one.finance_report().to_csv(), three.finance_report().to_csv());
    assert_eq!(one.finance_report().days_to_csv(), three.finance_report().days_to_csv());
}

#[test]
fn the_report_has_a_row_per_seed_and_its_directory_is_checked_before_the_run() {
    let summary = esim_sim::run(&SimOptions { seeds: 5..17, steps: 80, jobs: 2, ..SimOptions::default() });
    let report = summary.finance_report();
    let rows: Vec<&str> = report.accounts.iter().map(|row| row.account_id.as_str()).collect();
    let expected: Vec<String> = (5..17).map(|seed| format!("seed-{seed}")).collect();
    assert_eq!(rows, expected, "every seed has its row, in order");
    assert!(report.conserved && report.scope.contains("one row per seed"), "{}", report.scope);
    let mut top_ups = rust_decimal::Decimal::ZERO;
    for row in &report.accounts {
        assert!(row.difference_usd.is_zero(), "{row:?}");
        top_ups += row.money_in.top_ups_usd;
    }
    assert_eq!(top_ups, report.total.money_in.top_ups_usd);
    assert_eq!(top_ups, summary.conservation.total.top_ups_usd.normalize(), "the same money as the summary table");
    let last_day = report.days.last().expect("days");
    assert_eq!(last_day.closing, report.total.closing, "every seed's balances at the end, summed");

    // A report directory that cannot be made is found before any seed runs.
    let file = std::env::temp_dir().join(format!("esim-sim-not-a-dir-{}", std::process::id()));
    std::fs::write(&file, b"a file").unwrap();
    let options =
        SimOptions { seeds: 0..50, steps: 50, jobs: 1, report: Some(file.join("report")), ..SimOptions::default() };
    let summary = esim_sim::run(&options);
    assert_eq!(summary.scenarios, 0, "nothing ran");
    assert!(
        summary.report_error.as_deref().is_some_and(|e| e.contains("cannot be written")),
        "{:?}",
        summary.report_error
    );
    let _ = std::fs::remove_file(&file);
}

#[test]
fn progress_reaches_the_total() {
    let seen = std::sync::Mutex::new(Vec::new());
    let options = SimOptions { seeds: 0..40, steps: 20, jobs: 2, ..SimOptions::default() };
    esim_sim::run_with_progress(&options, |done, total| seen.lock().unwrap().push((done, total)));
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.iter().map(|(done, _)| *done).max(), Some(40));
    assert!(seen.iter().all(|(_, total)| *total == 40));
}

#[test]
fn generated_worlds_reach_every_endpoint_the_simulation_names() {
    use esim_api::routes::{self, Endpoint, Match};
    use esim_sim::generate::Generator;
    use esim_sim::world::{reached_by, World};
    use std::collections::BTreeSet;
    let mut seen = BTreeSet::new();
    let mut succeeded = BTreeSet::new();
    for seed in 0..20 {
        let mut world = World::new(seed, None);
        let mut generator = Generator::new(seed, 2, true);
        let prelude = generator.prelude();
        for step in 0..200 {
            let op = prelude.get(step).cloned().unwrap_or_else(|| generator.next(&world));
            for exchange in &world.apply(&op).exchanges {
                let path = exchange.path.split('?').next().unwrap_or_default();
                if let Match::Found(endpoint, _) = routes::find(exchange.method.as_str(), path) {
                    seen.insert(endpoint);
                    if (200..300).contains(&exchange.status) {
                        succeeded.insert(endpoint);
                    }
                }
            }
        }
    }
    let missing: Vec<(Endpoint, &str)> = Endpoint::ALL
        .iter()
        .filter_map(|&endpoint| Some((endpoint, reached_by(endpoint)?)))
        .filter(|(endpoint, _)| !seen.contains(endpoint))
        .collect();
    assert!(missing.is_empty(), "endpoints the generated worlds never sent: {missing:?}");
    // The checkers of manual resends, delivery logs and rotations judge only what
    // succeeded: those must succeed, not only be refused.
    for endpoint in [Endpoint::ResendEvent, Endpoint::ListDeliveries, Endpoint::RotateWebhookSecret] {
        assert!(succeeded.contains(&endpoint), "{endpoint:?} never succeeded in the generated worlds");
    }
}
