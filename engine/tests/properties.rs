//! Determinism and conservation under random command sequences.

mod common;
use common::actions::{action, Action, World};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// What a run shows: every response (status, body), the events, the digest, the effects.
type RunOutputs = (Vec<(u16, Vec<u8>)>, Vec<String>, String, usize);

/// 10,000 mixed commands from one seed, run twice: every response, event, effect and
/// the state digest are identical.
#[test]
fn ten_thousand_commands_twice_give_identical_outputs() {
    fn run(seed: u64) -> RunOutputs {
        let mut runner =
            TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)));
        let mut world = World::new(seed);
        let strategy = action();
        for _ in 0..10_000 {
            let action = strategy.new_tree(&mut runner).unwrap().current();
            world.apply(&action);
        }
        let events: Vec<String> = world.h.events.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        let effects = world.h.effects.len();
        (world.transcript, events, world.h.engine.state_digest(), effects)
    }
    fn seed_bytes(seed: u64) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes
    }
    let (first, first_events, first_digest, first_effects) = run(42);
    let (second, second_events, second_digest, second_effects) = run(42);
    assert!(first.len() > 5_000, "most actions produce a response ({})", first.len());
    assert!(first_events.len() > 500, "events flowed ({})", first_events.len());
    assert_eq!(first, second);
    assert_eq!(first_events, second_events);
    assert_eq!(first_effects, second_effects);
    assert_eq!(first_digest, second_digest);
    let (_, _, other_digest, _) = run(43);
    assert_ne!(first_digest, other_digest, "the digest depends on the run");
}

proptest! {
    #![proptest_config(Config { cases: 64, max_shrink_iters: 2_000, ..Config::default() })]

    /// docs/architecture.md, rule 6 holds exactly after every command of any sequence, including
    /// groups, moves and group defunds; a failure shrinks to a minimal sequence.
    #[test]
    fn conservation_holds_after_every_command(actions in proptest::collection::vec(action(), 1..200)) {
        let mut world = World::new(9);
        for (step, action) in actions.iter().enumerate() {
            world.apply(action);
            let violations = world.h.engine.money_violations();
            prop_assert!(violations.is_empty(), "after step {step} ({action:?}): {violations:?}");
        }
        let report = world.h.engine.conservation_report(None).unwrap();
        prop_assert!(report.conserved);
    }
}

#[test]
fn a_corrupted_ledger_is_detected() {
    let mut world = World::new(1);
    world.apply(&Action::Provision { account: 0, group: None });
    world.apply(&Action::Fund { esim: 0, cents: 1_000 });
    assert!(world.h.engine.money_violations().is_empty());
    let slot = world
        .h
        .engine
        .ledger()
        .slots()
        .find(|(_, i, _)| i.kind == esim_engine::ledger::SlotKind::EsimCredit)
        .unwrap()
        .0;
    world.h.engine.ledger_mut_for_test().corrupt_for_test(slot, rust_decimal::Decimal::new(1, 2));
    assert!(!world.h.engine.money_violations().is_empty());
    assert!(!world.h.engine.conservation_report(None).unwrap().conserved);
}
