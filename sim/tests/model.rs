//! A state-machine property test: random op sequences go to the service (through the
//! simulation world, so through HTTP) and to a small reference model of the money, and
//! after every op the two must agree on the reseller balance, the lifetime counters,
//! every wallet's displayed balance and every eSIM's data charged.
//!
//! The model is written from the interface and docs/architecture.md alone (retail cents of 0.009 USD,
//! display rounded down, 15-minute settlements, cut-off at zero), not from the engine.

use esim_engine::rates::RateTable;
use esim_sim::op::Op;
use esim_sim::world::World;
use proptest::prelude::*;
use rust_decimal::Decimal;

const FEE_CENTS: i64 = 175;
const SETTLE_MS: i64 = 15 * 60_000;
/// Reporting pause after a fund, and the sync cycle reports move on.
const PAUSE_MS: i64 = 15 * 60_000;
const SYNC_MS: i64 = 60_000;

/// The first sync boundary after `at` (the virtual epoch is on a boundary).
fn next_sync(at: i64) -> i64 {
    (at.div_euclid(SYNC_MS) + 1) * SYNC_MS
}

/// What the model can do (indexes pick among the eSIMs that exist).
#[derive(Clone, Debug)]
enum Step {
    TopUp { dollars: u32 },
    Provision,
    Install { sim: u8 },
    Fund { sim: u8, cents: u32 },
    Usage { sim: u8, mb: u32 },
    Defund { sim: u8 },
    Terminate { sim: u8 },
    Advance { seconds: u32 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (10u32..200).prop_map(|dollars| Step::TopUp { dollars }),
        2 => Just(Step::Provision),
        2 => any::<u8>().prop_map(|sim| Step::Install { sim }),
        4 => (any::<u8>(), 1u32..5_000).prop_map(|(sim, cents)| Step::Fund { sim, cents }),
        4 => (any::<u8>(), 1u32..3_000).prop_map(|(sim, mb)| Step::Usage { sim, mb }),
        2 => any::<u8>().prop_map(|sim| Step::Defund { sim }),
        1 => any::<u8>().prop_map(|sim| Step::Terminate { sim }),
        3 => (1u32..2_000).prop_map(|seconds| Step::Advance { seconds }),
    ]
}

#[derive(Clone, Debug, Default)]
struct Sim {
    installed: bool,
    terminated: bool,
    funded: bool,
    credit: Decimal,
    /// A return on its way: (exact amount, settles at).
    pending: Option<(Decimal, i64)>,
    charged: Decimal,
    /// The reporting pause of the last fund ends at this time.
    paused_until: i64,
    /// Unreported usage reports at this time (docs/architecture.md, rule 5: a return settles only
    /// once usage has reported).
    report_due: Option<i64>,
}

#[derive(Debug, Default)]
struct Model {
    now: i64,
    balance: Decimal,
    lifetime_topup: Decimal,
    lifetime_usage: Decimal,
    sims: Vec<Sim>,
}

/// docs/architecture.md, rule 1: `floor(a / 0.009)` retail cents of 0.009 USD.
fn credit_of(cents: i64) -> Decimal {
    Decimal::new(cents * 10 / 9 * 9, 3)
}

/// Rule 2: rounded down to the cent.
fn shown(exact: Decimal) -> Decimal {
    (exact * Decimal::ONE_HUNDRED).floor() / Decimal::ONE_HUNDRED
}

impl Model {
    fn pick(&self, index: u8) -> Option<usize> {
        (!self.sims.is_empty()).then(|| index as usize % self.sims.len())
    }

    /// Fires, in time order, what is due by now: reports of usage (again after a pause
    /// that is not over), and settlements (deferred to the report when usage is still
    /// unreported at the settlement time).
    fn settle(&mut self) {
        for sim in &mut self.sims {
            loop {
                let report = sim.report_due.filter(|&due| due <= self.now);
                match (report, sim.pending) {
                    (Some(due), pending) if pending.is_none_or(|(_, at)| due <= at) => {
                        sim.report_due = (due < sim.paused_until).then(|| next_sync(due.max(sim.paused_until)));
                    }
                    (_, Some((amount, at))) if at <= self.now => {
                        if sim.report_due.is_some() {
                            sim.pending = Some((amount, next_sync(at.max(sim.paused_until))));
                        } else {
                            self.balance += shown(amount);
                            sim.pending = None;
                        }
                    }
                    _ => break,
                }
            }
        }
    }

    /// Applies a step; returns the op to send to the world (None: nothing to send).
    fn apply(&mut self, step: &Step, per_mb: Decimal) -> Option<Op> {
        let name = |i: usize| format!("s{i}");
        let op = match *step {
            Step::TopUp { dollars } => {
                self.balance += Decimal::from(dollars);
                self.lifetime_topup += Decimal::from(dollars);
                format!("topup a {dollars}")
            }
            Step::Provision => {
                let fee = Decimal::new(FEE_CENTS, 2);
                if self.balance >= fee {
                    self.balance -= fee;
                    self.lifetime_usage += fee;
                }
                format!("provision a as s{}", self.sims.len())
            }
            Step::Install { sim } => {
                let i = self.pick(sim)?;
                if !self.sims[i].terminated {
                    self.sims[i].installed = true;
                }
                format!("install {}", name(i))
            }
            Step::Fund { sim, cents } => {
                let i = self.pick(sim)?;
                let amount = Decimal::new(cents.into(), 2);
                let s = &mut self.sims[i];
                if !s.terminated && s.pending.is_none() && self.balance >= amount {
                    self.balance -= amount;
                    self.lifetime_usage += amount;
                    s.credit += credit_of(cents.into());
                    s.funded = true;
                    s.paused_until = self.now + PAUSE_MS;
                }
                format!("fund a {} {amount}", name(i))
            }
            Step::Usage { sim, mb } => {
                let i = self.pick(sim)?;
                let s = &mut self.sims[i];
                if s.installed && !s.terminated && s.pending.is_none() && s.credit > Decimal::ZERO {
                    let charge = (Decimal::from(mb) * per_mb).min(s.credit);
                    s.credit -= charge;
                    s.charged += charge;
                    if s.report_due.is_none() {
                        s.report_due = Some(next_sync(self.now.max(s.paused_until)));
                    }
                }
                format!("usage {} {mb} DE", name(i))
            }
            Step::Defund { sim } => {
                let i = self.pick(sim)?;
                let s = &mut self.sims[i];
                if !s.terminated && s.funded && s.pending.is_none() && shown(s.credit) > Decimal::ZERO {
                    s.pending = Some((s.credit, self.now + SETTLE_MS));
                    s.credit = Decimal::ZERO;
                }
                format!("defund a {}", name(i))
            }
            Step::Terminate { sim } => {
                let i = self.pick(sim)?;
                let s = &mut self.sims[i];
                s.terminated = true;
                s.credit = Decimal::ZERO;
                format!("terminate a {}", name(i))
            }
            Step::Advance { seconds } => {
                self.now += i64::from(seconds) * 1_000;
                self.settle();
                format!("advance {seconds}s")
            }
        };
        Some(op.parse().expect("model ops parse"))
    }
}

/// Compares the engine with the model; the first difference, if any.
fn compare(world: &World, model: &Model) -> Result<(), String> {
    let engine = world.engine();
    let account = &engine.accounts()[0];
    let balance = engine.ledger().balance(account.slots.reseller);
    if balance != model.balance {
        return Err(format!("reseller balance {balance}, model {}", model.balance));
    }
    if account.lifetime_usage != model.lifetime_usage || account.lifetime_topup != model.lifetime_topup {
        return Err(format!(
            "lifetime usage/top-up {}/{}, model {}/{}",
            account.lifetime_usage, account.lifetime_topup, model.lifetime_usage, model.lifetime_topup
        ));
    }
    if engine.esims().len() != model.sims.len() {
        return Err(format!("{} eSIMs, model {}", engine.esims().len(), model.sims.len()));
    }
    for (index, sim) in model.sims.iter().enumerate() {
        let esim = &engine.esims()[index];
        let expected = shown(sim.credit + sim.pending.map_or(Decimal::ZERO, |(amount, _)| amount));
        let displayed = engine.esim_displayed_balance(esim_engine::state::EsimIx(index as u32));
        if displayed != expected {
            return Err(format!("s{index} displays {displayed}, model {expected} ({sim:?})"));
        }
        let charged =
            engine.ledger().balance(esim.wallet.slots.unreported) + engine.ledger().balance(esim.wallet.slots.reported);
        if charged != sim.charged {
            return Err(format!("s{index} data charged {charged}, model {}", sim.charged));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_engine_agrees_with_the_money_model(steps in proptest::collection::vec(step(), 1..80)) {
        let table = RateTable::builtin();
        let per_mb = table.network("DE", None).expect("DE has networks").per_mb_usd;
        let mut world = World::new(11, None);
        let mut model = Model::default();
        world.apply(&"account a".parse().unwrap());
        for step in &steps {
            if let Some(op) = model.apply(step, per_mb) {
                world.apply(&op);
                if matches!(step, Step::Provision) && world.engine().esims().len() > model.sims.len() {
                    model.sims.push(Sim::default());
                }
                prop_assert!(compare(&world, &model).is_ok(), "after {op}: {}", compare(&world, &model).unwrap_err());
            }
        }
    }
}

#[test]
fn the_model_knows_the_spec_examples() {
    assert_eq!(shown(credit_of(2_000)), Decimal::new(1999, 2));
    for dollars in [9, 18, 27] {
        assert_eq!(credit_of(dollars * 100), Decimal::from(dollars));
    }
    let per_mb = RateTable::builtin().network("DE", None).unwrap().per_mb_usd;
    assert_eq!(per_mb, Decimal::new(432, 5));
}
