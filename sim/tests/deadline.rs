//! The append deadline in the simulation (decision 220): a stalled store costs a request
//! its deadline (503 with Retry-After), never a longer wait, and the `deadline_bounded`
//! checker catches a service that waits on.

use esim_sim::checkers::{Checker, Ctx, DeadlineBounded};
use esim_sim::op::Op;
use esim_sim::world::{Fact, World, APPEND_DEADLINE_MS};

fn run(world: &mut World, checker: &mut dyn Checker, lines: &[&str]) -> Result<(), String> {
    for line in lines {
        world.apply(&line.parse::<Op>().unwrap());
        checker.check(&Ctx { engine: world.engine(), log: world.log() })?;
    }
    Ok(())
}

fn balance(world: &mut World) -> String {
    world.read("alice").unwrap()["balance_usd"].to_string()
}

#[test]
fn a_stall_past_the_deadline_is_answered_503_and_the_change_still_commits() {
    let mut world = World::new(1, None);
    let mut checker = DeadlineBounded;
    run(&mut world, &mut checker, &["account alice", "topup alice 100"]).unwrap();
    let before = balance(&mut world);
    let sent = world.now();
    run(&mut world, &mut checker, &["stall 8s", "topup alice 10"]).unwrap();
    let late = &world.log().exchanges[0];
    assert_eq!(late.status, 503, "{late:?}");
    assert!(late.retry_after.is_some(), "{late:?}");
    assert_eq!(late.answered.0 - late.at.0, APPEND_DEADLINE_MS);
    assert!(world.log().facts.iter().any(|f| matches!(f, Fact::Stalled { stall_ms: 8_000, late: true, .. })));
    // The client waited: the clock moved on by the deadline.
    assert!(world.now().0 - sent.0 >= APPEND_DEADLINE_MS);
    // Unacknowledged, yet durable: the stall ended in a commit.
    assert_ne!(balance(&mut world), before);
}

#[test]
fn a_stall_within_the_deadline_delays_the_answer_only() {
    let mut world = World::new(1, None);
    let mut checker = DeadlineBounded;
    run(&mut world, &mut checker, &["account alice", "stall 1500ms", "topup alice 10"]).unwrap();
    let answer = &world.log().exchanges[0];
    assert_eq!(answer.status, 201, "{answer:?}");
    assert_eq!(answer.answered.0 - answer.at.0, 1_500);
}

#[test]
fn deadline_bounded_catches_a_service_that_waits_past_the_deadline() {
    let mut world = World::new(1, None);
    world.ignore_append_deadline_for_test();
    let mut checker = DeadlineBounded;
    let error = run(&mut world, &mut checker, &["account alice", "stall 8s", "topup alice 10"]).unwrap_err();
    assert!(error.contains("past the 5000 ms append deadline"), "{error}");
}

#[test]
fn stalls_are_drawn_checked_and_counted_on_every_seed_alike() {
    let options = esim_sim::SimOptions { seeds: 0..60, steps: 200, jobs: 2, ..esim_sim::SimOptions::default() };
    let first = esim_sim::run(&options);
    assert!(first.ok(), "{}", first.table());
    assert!(first.commands.get("stall").copied().unwrap_or(0) > 0, "{:?}", first.commands);
    assert!(first.coverage.count("checker", "deadline_bounded").unwrap() > 0);
    let again = esim_sim::run(&options);
    assert_eq!(first.coverage, again.coverage);
}
