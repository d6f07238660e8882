//! Running one seed: generate ops, apply them, run every checker after every step; on a
//! violation, shrink the trace, diff the state around the failing step, and say how to
//! replay it. Replays rebuild everything from the seed, so nothing is saved along the way.

use crate::checkers::{self, Checker, Ctx};
use crate::coverage::{Coverage, Recorder};
use crate::generate::{Generator, Mix};
use crate::op::Op;
use crate::shrink;
use crate::world::{World, WorldStats};
use crate::InjectedBug;
use esim_engine::report::ConservationReport;
use esim_engine::Engine;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Most lines of a state diff.
const MAX_DIFF_LINES: usize = 60;

/// How one seed runs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub steps: usize,
    pub accounts: usize,
    pub faults: bool,
    pub bug: Option<InjectedBug>,
    /// Keep a digest of the run (state digest and a hash of every response).
    pub fingerprint: bool,
    /// Each seed draws its own mix of ops and faults ([`Mix::swarm`]); else [`Mix::uniform`].
    pub swarm: bool,
    /// Test-only: the generator never gives ops of this verb.
    pub skip_verb: Option<&'static str>,
}

impl RunConfig {
    /// The mix seed `seed` runs with.
    pub fn mix(&self, seed: u64) -> Mix {
        if self.swarm {
            Mix::swarm(seed)
        } else {
            Mix::uniform()
        }
    }
}

/// The first checker that fired.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub step: usize,
    pub checker: &'static str,
    pub message: String,
}

/// What running one seed gave.
pub struct SeedOutcome {
    pub seed: u64,
    pub trace: Vec<Op>,
    pub stats: WorldStats,
    pub report: Option<ConservationReport>,
    /// The seed's finance report over its whole run (all accounts).
    pub finance: Option<esim_engine::finance::FinanceReport>,
    pub found: Option<Found>,
    /// (state digest, hash of every response and event), when asked for.
    pub fingerprint: Option<(String, u64)>,
    /// What the seed reached (see [`crate::coverage`]).
    pub coverage: Coverage,
}

/// Runs every checker on the world's last step; the first failure wins. Each evaluation
/// is counted when a recorder is given.
fn check(
    checkers: &mut [Box<dyn Checker>],
    world: &World,
    step: usize,
    mut recorder: Option<&mut Recorder>,
) -> Option<Found> {
    let ctx = Ctx { engine: world.engine(), log: world.log() };
    for (index, checker) in checkers.iter_mut().enumerate() {
        if let Some(recorder) = recorder.as_deref_mut() {
            recorder.checked(index);
        }
        if let Err(message) = checker.check(&ctx) {
            return Some(Found { step, checker: checker.name(), message });
        }
    }
    None
}

fn finish(checkers: &mut [Box<dyn Checker>], engine: &Engine, step: usize) -> Option<Found> {
    for checker in checkers.iter_mut() {
        if let Err(message) = checker.finish(engine) {
            return Some(Found { step, checker: checker.name(), message });
        }
    }
    None
}

/// FNV-1a over bytes: a cheap, stable hash for the determinism fingerprint.
fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Runs one seed until the step count or the first violation.
pub fn run_seed(seed: u64, config: &RunConfig) -> SeedOutcome {
    let mut world = World::new(seed, config.bug);
    let mut generator = Generator::with_mix(seed, config.accounts, config.faults, config.mix(seed));
    if let Some(verb) = config.skip_verb {
        generator.skip_verb(verb);
    }
    let mut checkers = checkers::all();
    let mut recorder = Recorder::default();
    let prelude = generator.prelude();
    let mut trace = Vec::with_capacity(config.steps);
    let mut found = None;
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for step in 0..config.steps {
        let op = match prelude.get(step) {
            Some(op) => op.clone(),
            None => generator.next(&world),
        };
        if step + 1 == config.steps {
            world.compare_standby_next();
        }
        world.apply(&op);
        recorder.step(&op, world.engine(), world.log());
        trace.push(op);
        if config.fingerprint {
            let log = world.log();
            for exchange in &log.exchanges {
                hash = fnv(fnv(hash, &exchange.status.to_be_bytes()), &exchange.body);
            }
            for event in &log.events {
                hash = fnv(hash, event.id.as_bytes());
            }
        }
        found = check(&mut checkers, &world, step, Some(&mut recorder));
        if found.is_some() {
            break;
        }
    }
    if found.is_none() {
        found = finish(&mut checkers, world.engine(), trace.len());
    }
    SeedOutcome {
        seed,
        report: world.engine().conservation_report(None),
        finance: world.engine().finance_report(None, esim_engine::finance::Period::ALL),
        fingerprint: config.fingerprint.then(|| (world.engine().state_digest(), hash)),
        stats: world.stats().clone(),
        trace,
        found,
        coverage: recorder.coverage,
    }
}

/// Replays a trace from scratch; the first violation, if any.
pub fn replay(trace: &[Op], seed: u64, bug: Option<InjectedBug>) -> Option<Found> {
    let mut world = World::new(seed, bug);
    let mut checkers = checkers::all();
    for (step, op) in trace.iter().enumerate() {
        if step + 1 == trace.len() {
            world.compare_standby_next();
        }
        world.apply(op);
        if let Some(found) = check(&mut checkers, &world, step, None) {
            return Some(found);
        }
    }
    finish(&mut checkers, world.engine(), trace.len())
}

/// Two runs of one seed must agree on every response, every event and the final state.
pub fn check_determinism(seed: u64, config: &RunConfig) -> Result<(), String> {
    let config = RunConfig { fingerprint: true, ..config.clone() };
    let first = run_seed(seed, &config);
    let second = run_seed(seed, &config);
    if first.fingerprint != second.fingerprint || first.trace != second.trace {
        return Err(format!(
            "seed {seed}: two runs differ: {:?} vs {:?} ({} and {} steps)",
            first.fingerprint,
            second.fingerprint,
            first.trace.len(),
            second.trace.len()
        ));
    }
    Ok(())
}

/// A violation, reported: where, which checker, the shrunk trace and how to replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub checker: &'static str,
    /// Index of the failing step in the seed's trace (0-based).
    pub step: usize,
    pub message: String,
    /// The shrunk trace (a scenario script: one op per line); the last op fails.
    pub shrunk: Vec<Op>,
    /// The message of the checker on the shrunk trace.
    pub shrunk_message: String,
    /// Changed fields around the failing step of the shrunk trace.
    pub state_diff: String,
    /// The command that reproduces the original failure.
    pub replay: String,
    /// The seed's mix of ops and faults ([`Mix::describe`]), printed with the replay.
    pub mix: String,
}

impl Violation {
    /// The shrunk trace as a scenario script.
    pub fn script(&self) -> String {
        let mut out = format!(
            "# seed {}: checker {} fired at the last step\n# {}\n# replay: {}\n# mix: {}\n",
            self.seed, self.checker, self.shrunk_message, self.replay, self.mix
        );
        for op in &self.shrunk {
            let _ = writeln!(out, "{op}");
        }
        out
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "VIOLATION seed {} step {}: checker {}", self.seed, self.step, self.checker)?;
        writeln!(f, "  {}", self.message)?;
        writeln!(f, "  replay: {}", self.replay)?;
        writeln!(f, "  mix: {}", self.mix)?;
        writeln!(f, "  shrunk trace ({} steps):", self.shrunk.len())?;
        for op in &self.shrunk {
            writeln!(f, "    {op}")?;
        }
        writeln!(f, "  on the shrunk trace: {}", self.shrunk_message)?;
        writeln!(f, "  state diff at the failing step:")?;
        for line in self.state_diff.lines() {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// The command that replays a seed up to its failing step.
pub fn replay_command(seed: u64, steps: usize, config: &RunConfig) -> String {
    format!(
        "esim sim --seed {seed} --steps {steps} --accounts {} --faults {} --mix {}",
        config.accounts,
        if config.faults { "on" } else { "off" },
        if config.swarm { "swarm" } else { "uniform" }
    )
}

/// Builds the report of a violation found in `outcome`, shrinking it when asked.
pub fn violation(outcome: &SeedOutcome, config: &RunConfig, shrink_it: bool) -> Option<Violation> {
    let found = outcome.found.as_ref()?;
    let prefix = &outcome.trace[..(found.step + 1).min(outcome.trace.len())];
    let seed = outcome.seed;
    let shrunk = if shrink_it {
        shrink::shrink(prefix, |candidate| {
            replay(candidate, seed, config.bug).is_some_and(|f| f.checker == found.checker)
        })
    } else {
        prefix.to_vec()
    };
    let again = replay(&shrunk, seed, config.bug);
    let (shrunk, again) = match again {
        Some(again) if again.checker == found.checker => (shrunk, again),
        // Cannot happen (the shrinker only keeps failing traces); fall back to the prefix.
        _ => (prefix.to_vec(), found.clone()),
    };
    Some(Violation {
        seed,
        checker: found.checker,
        step: found.step,
        message: found.message.clone(),
        state_diff: state_diff(&shrunk[..(again.step + 1).min(shrunk.len())], seed, config.bug),
        shrunk_message: again.message,
        shrunk,
        replay: replay_command(seed, found.step + 1, config),
        mix: config.mix(seed).describe(),
    })
}

/// The fields that changed in the last step of `trace`: conservation report lines and
/// the records of accounts, eSIMs, groups and webhooks.
pub fn state_diff(trace: &[Op], seed: u64, bug: Option<InjectedBug>) -> String {
    let Some((last, before_ops)) = trace.split_last() else { return String::new() };
    let mut world = World::new(seed, bug);
    for op in before_ops {
        world.apply(op);
    }
    let before = snapshot(world.engine());
    world.apply(last);
    let after = snapshot(world.engine());
    let mut out = String::new();
    let mut lines = 0;
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for key in keys {
        let (old, new) = (before.get(key), after.get(key));
        if old != new {
            lines += 1;
            if lines > MAX_DIFF_LINES {
                out.push_str("...\n");
                break;
            }
            let show = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(none)".to_string());
            let _ = writeln!(out, "{key}: {} -> {}", show(old), show(new));
        }
    }
    if out.is_empty() {
        out.push_str("(no recorded field changed)\n");
    }
    out
}

/// The state a diff compares, flattened to `path = value`.
fn snapshot(engine: &Engine) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(report) = engine.conservation_report(None) {
        for lines in &report.accounts {
            if let Ok(value) = serde_json::to_value(lines) {
                flatten(&format!("report.{}", lines.account_id), &value, &mut out);
            }
        }
    }
    let parts = [
        ("account", serde_json::to_value(engine.accounts())),
        ("esim", serde_json::to_value(engine.esims())),
        ("group", serde_json::to_value(engine.groups())),
        ("webhook", serde_json::to_value(engine.webhooks())),
    ];
    for (name, value) in parts {
        if let Ok(value) = value {
            flatten(name, &value, &mut out);
        }
    }
    out
}

fn flatten(path: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(fields) => {
            for (key, value) in fields {
                flatten(&format!("{path}.{key}"), value, out);
            }
        }
        Value::Array(items) => {
            for (index, value) in items.iter().enumerate() {
                flatten(&format!("{path}[{index}]"), value, out);
            }
        }
        leaf => {
            out.insert(path.to_string(), leaf.to_string());
        }
    }
}
