//! Replays every script of `scenarios/`: each must pass its own `expect` lines and every
//! invariant checker after every step, and its transcript (requests, responses, events,
//! deliveries) must match its insta snapshot. Update snapshots after an intended change
//! with `INSTA_UPDATE=always cargo test -p esim-sim --release --test scenarios` and review.

use esim_sim::script::{self, run_script};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The spec asks for at least this many scenario scripts.
const MIN_SCENARIOS: usize = 25;

fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// (file stem, text) of every scenario, in name order.
fn scenarios() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = std::fs::read_dir(scenarios_dir())
        .expect("the scenarios directory exists")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "scenario"))
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).expect("readable scenario"))
        })
        .collect();
    all.sort();
    all
}

#[test]
fn every_scenario_passes_and_matches_its_snapshot() {
    let all = scenarios();
    assert!(all.len() >= MIN_SCENARIOS, "only {} scenarios", all.len());
    let mut failures = Vec::new();
    for (name, text) in &all {
        let run = run_script(text);
        failures.extend(run.failures.iter().map(|f| format!("{name}: {f}")));
        insta::with_settings!({ prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(name.as_str(), run.transcript);
        });
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_scenarios_emit_every_event() {
    let mut seen = BTreeSet::new();
    for (_, text) in scenarios() {
        for line in run_script(&text).transcript.lines() {
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("event ").or_else(|| line.strip_prefix("deliver ")) {
                // `event NAME {...}` or `deliver W NAME #n -> ...`
                let words: Vec<&str> = rest.split_whitespace().collect();
                let name = if line.starts_with("event") { words[0] } else { words.get(1).copied().unwrap_or("") };
                seen.insert(name.to_string());
            }
        }
    }
    let missing: Vec<&str> = script::event_names().into_iter().filter(|e| !seen.contains(*e)).collect();
    assert!(missing.is_empty(), "no scenario shows {missing:?}");
}

#[test]
fn the_readme_lists_every_scenario() {
    let readme = std::fs::read_to_string(scenarios_dir().join("README.md")).unwrap();
    for (name, _) in scenarios() {
        assert!(readme.contains(&format!("`{name}`")), "README.md does not list {name}");
    }
}

#[test]
fn a_failed_expectation_or_a_bad_line_is_reported_with_its_line() {
    let run = run_script("account alice\ntopup alice 100\nexpect alice.balance_usd 99\n");
    assert_eq!(run.failures.len(), 1);
    assert!(run.failures[0].starts_with("line 3:"), "{:?}", run.failures);
    let run = run_script("account alice\nfrobnicate alice\n");
    assert!(run.failures[0].starts_with("line 2:"), "{:?}", run.failures);
    let run = run_script("expect nothing-here 1\n");
    assert!(!run.failures.is_empty());
}
