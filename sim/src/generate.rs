//! The random world: a seeded generator of ops.
//!
//! All randomness comes from one ChaCha RNG seeded by the scenario seed. The generator
//! looks at the world (what exists, who owns it) to make mostly meaningful calls, and
//! mixes in invalid ones on purpose: bad JSON, out-of-range amounts, unknown ids, other
//! accounts' ICCIDs, idempotent retries, bursts past the rate limit. Generation is
//! sequential, so the first N ops of a seed are the same whatever the step count: a
//! violation at step N replays with `--steps N+1`.

use crate::op::{Call, Op, Receiver};
use crate::world::World;
use esim_engine::rates::RateTable;
use esim_engine::{CardBehavior, EventName};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use rust_decimal::Decimal;

/// Small worlds keep every step cheap: at most this many eSIMs and accounts.
const MAX_SIMS: usize = 32;
const MAX_ACCOUNTS: usize = 4;
/// An ICCID no account owns.
const UNKNOWN_ICCID: &str = "8944100000000000000";
const UNKNOWN_UUID: &str = "00000000-0000-4000-8000-000000000000";
/// Countries devices roam in most (all sell data); others come from the whole table.
const COMMON_COUNTRIES: [&str; 10] = ["DE", "FR", "US", "JP", "GB", "ES", "IT", "TH", "BR", "AU"];

/// What the next op is about, with its weight in [`WEIGHTS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Advance,
    Usage,
    Install,
    Fund,
    Provision,
    Defund,
    Toggle,
    Terminate,
    Throttle,
    Read,
    CreateGroup,
    FundGroup,
    DefundGroup,
    AddMember,
    RemoveMember,
    PatchGroup,
    CreateWebhook,
    PutWebhook,
    DeleteWebhook,
    TestWebhook,
    RotateSecret,
    Deliveries,
    Resend,
    ReceiverMode,
    TopUp,
    Freeze,
    AutoRefill,
    Limits,
    Inventory,
    Keys,
    NewAccount,
    Malformed,
    Burst,
    Retry,
    Faults,
}

const WEIGHTS: [(u32, What); 35] = [
    (120, What::Advance),
    (140, What::Usage),
    (45, What::Install),
    (100, What::Fund),
    (55, What::Provision),
    (30, What::Defund),
    (30, What::Toggle),
    (12, What::Terminate),
    (10, What::Throttle),
    (70, What::Read),
    (15, What::CreateGroup),
    (45, What::FundGroup),
    (14, What::DefundGroup),
    (30, What::AddMember),
    (12, What::RemoveMember),
    (8, What::PatchGroup),
    (8, What::CreateWebhook),
    (12, What::PutWebhook),
    (3, What::DeleteWebhook),
    (8, What::TestWebhook),
    (3, What::RotateSecret),
    (4, What::Deliveries),
    (8, What::Resend),
    (20, What::ReceiverMode),
    (25, What::TopUp),
    (10, What::Freeze),
    (12, What::AutoRefill),
    (4, What::Limits),
    (4, What::Inventory),
    (5, What::Keys),
    (4, What::NewAccount),
    (25, What::Malformed),
    (5, What::Burst),
    (25, What::Retry),
    (15, What::Faults),
];

/// Kinds of op a swarm mix never switches off: without them a world does nothing.
const CORE: [What; 5] = [What::Advance, What::Usage, What::Install, What::Fund, What::Provision];

/// Factors (numerator, denominator) a swarm mix scales a weight by.
const SWARM_FACTORS: [(u32, u32); 6] = [(1, 4), (1, 2), (1, 1), (2, 1), (4, 1), (8, 1)];

/// Percent of a swarm mix's kinds of op (not [`CORE`]) switched off.
const SWARM_OFF_PERCENT: u64 = 20;

/// The mix of one seed: how often each kind of op is drawn, and how the fault draws
/// split (decision 241). [`Mix::uniform`] is the fixed mix; [`Mix::swarm`] draws one per
/// seed from the seed alone (its own ChaCha stream, so the ops' stream is untouched),
/// as FoundationDB's and TigerBeetle's swarm runs do: some kinds of op switched off,
/// others several times as frequent, the faults split another way. Rare states (a full
/// group, the group limit, auto-refill's daily limit, a crash during a snapshot) come
/// from seeds whose mix leans their way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; WEIGHTS.len()],
    total: u32,
    /// Of the fault draws, percent that crash the service, and that fault the store (the
    /// rest switch upstream faults).
    crash_percent: u64,
    store_percent: u64,
    /// Percent of `limits` ops that set tight limits (1 to 3 groups of 1 to 4 eSIMs).
    tight_limits_percent: u64,
    /// Percent of receiver modes that answer 410 Gone.
    gone_percent: u64,
    swarm: bool,
}

impl Mix {
    /// The fixed weights of [`WEIGHTS`] and the fixed fault split.
    pub fn uniform() -> Mix {
        let mut weights = [0; WEIGHTS.len()];
        for (slot, (weight, _)) in weights.iter_mut().zip(WEIGHTS) {
            *slot = weight;
        }
        Mix::with(weights, 25, 15, 50, 8, false)
    }

    /// The seed's own mix, drawn from the seed alone.
    pub fn swarm(seed: u64) -> Mix {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(1);
        let mut roll = |n: u64| rng.next_u64() % n;
        let mut weights = [0; WEIGHTS.len()];
        for (slot, (weight, what)) in weights.iter_mut().zip(WEIGHTS) {
            let off = roll(100) < SWARM_OFF_PERCENT;
            let (num, den) = SWARM_FACTORS[roll(SWARM_FACTORS.len() as u64) as usize];
            *slot = match (off, CORE.contains(&what)) {
                (true, false) => 0,
                // The core stays between half and twice its weight.
                (_, true) => (weight * num.clamp(1, 2) / den.clamp(1, 2)).max(1),
                (false, false) => (weight * num / den).max(1),
            };
        }
        let crash = [10, 25, 40][roll(3) as usize];
        let store = [5, 15, 30, 45][roll(4) as usize];
        let tight = [20, 50, 90][roll(3) as usize];
        let gone = [0, 8, 25][roll(3) as usize];
        Mix::with(weights, crash, store, tight, gone, true)
    }

    fn with(weights: [u32; WEIGHTS.len()], crash: u64, store: u64, tight: u64, gone: u64, swarm: bool) -> Mix {
        let total = weights.iter().sum();
        assert!(total > 0 && crash + store <= 100, "a mix draws something");
        Mix {
            weights,
            total,
            crash_percent: crash,
            store_percent: store,
            tight_limits_percent: tight,
            gone_percent: gone,
            swarm,
        }
    }

    /// The kind of op a roll below the total weight stands for.
    fn pick(&self, mut roll: u32) -> What {
        for (weight, (_, what)) in self.weights.iter().zip(WEIGHTS) {
            if roll < *weight {
                return what;
            }
            roll -= weight;
        }
        What::Advance
    }

    /// One line for a repro: the kinds switched off and scaled, and the fault split.
    pub fn describe(&self) -> String {
        if !self.swarm {
            return "uniform".to_string();
        }
        let mut off = Vec::new();
        let mut scaled = Vec::new();
        for (weight, (base, what)) in self.weights.iter().zip(WEIGHTS) {
            match *weight {
                0 => off.push(format!("{what:?}")),
                w if w != base => scaled.push(format!("{what:?}={w}/{base}")),
                _ => {}
            }
        }
        format!(
            "swarm: off [{}]; scaled [{}]; faults crash {}% store {}%; tight limits {}%; gone {}%",
            off.join(" "),
            scaled.join(" "),
            self.crash_percent,
            self.store_percent,
            self.tight_limits_percent,
            self.gone_percent
        )
    }
}

/// Draws of an op whose verb is skipped before the generator gives up and waits.
const MAX_REDRAWS: usize = 64;

pub struct Generator {
    rng: ChaCha8Rng,
    accounts: usize,
    faults: bool,
    faults_active: bool,
    next_sim: usize,
    next_group: usize,
    next_webhook: usize,
    next_key: usize,
    /// A burst of usage on one eSIM: (eSIM, ops left).
    usage_burst: Option<(String, u32)>,
    /// The last call sent with an Idempotency-Key (retried later).
    last_idempotent: Option<Op>,
    /// Steps until the zombie of the last failover tries to append, when drawn.
    zombie_wakes_in: Option<u32>,
    mix: Mix,
    /// Test-only: ops of this verb are drawn again (`--require-coverage` must then fail).
    skip_verb: Option<&'static str>,
}

impl Generator {
    pub fn new(seed: u64, accounts: usize, faults: bool) -> Generator {
        Generator::with_mix(seed, accounts, faults, Mix::uniform())
    }

    /// A generator with the mix `mix` (see [`Mix`]).
    pub fn with_mix(seed: u64, accounts: usize, faults: bool, mix: Mix) -> Generator {
        Generator {
            mix,
            skip_verb: None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            accounts: accounts.clamp(1, MAX_ACCOUNTS),
            faults,
            faults_active: false,
            next_sim: 0,
            next_group: 0,
            next_webhook: 0,
            next_key: 0,
            usage_burst: None,
            last_idempotent: None,
            zombie_wakes_in: None,
        }
    }

    /// Never gives ops of this verb (a test's way to make coverage fall short).
    pub fn skip_verb(&mut self, verb: &'static str) {
        self.skip_verb = Some(verb);
    }

    // ----- randomness -----

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.rng.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.rng.next_u64() % 100 < percent
    }

    fn range(&mut self, low: i64, high: i64) -> i64 {
        low + self.below((high - low + 1) as usize) as i64
    }

    /// One of a fixed list (never empty: checked when compiled).
    fn one_of<T: Copy, const N: usize>(&mut self, items: [T; N]) -> T {
        const { assert!(N > 0) };
        items[self.below(N)]
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.below(items.len())])
        }
    }

    // ----- the ops -----

    /// The fixed start of every seed: the accounts, their first top-ups and webhooks.
    pub fn prelude(&mut self) -> Vec<Op> {
        let mut ops = Vec::new();
        for k in 0..self.accounts {
            let account = format!("a{k}");
            ops.push(Op::Account { name: account.clone() });
            let dollars = self.one_of([10, 20, 50, 100, 250, 500]);
            ops.push(Op::TopUp { account: account.clone(), amount: Decimal::from(dollars) });
            if self.chance(70) {
                let events = self.events();
                ops.push(self.webhook(&account, events));
            }
        }
        ops
    }

    /// The next op for the world as it is now.
    pub fn next(&mut self, world: &World) -> Op {
        for _ in 0..MAX_REDRAWS {
            let op = self.draw(world);
            if Some(op.verb()) != self.skip_verb {
                return op;
            }
        }
        Op::Advance { ms: 1_000 }
    }

    fn draw(&mut self, world: &World) -> Op {
        // The zombie wakes a few steps after the failover that made it (if drawn).
        if let Some(left) = self.zombie_wakes_in.take() {
            if left == 0 {
                return Op::Zombie;
            }
            self.zombie_wakes_in = Some(left - 1);
        }
        if let Some((sim, left)) = self.usage_burst.take() {
            if left > 0 {
                self.usage_burst = Some((sim.clone(), left - 1));
                return self.usage(sim);
            }
        }
        let roll = self.below(self.mix.total as usize) as u32;
        let what = self.mix.pick(roll);
        self.op(what, world)
    }

    /// The next op: `what` steered to keep the world alive, then drawn by the part of the
    /// interface it is about.
    fn op(&mut self, what: What, world: &World) -> Op {
        let account = self.account(world);
        let what = self.steer(what, world);
        match what {
            What::Advance | What::Malformed | What::Burst | What::Retry | What::Faults => {
                self.world_op(what, world, account)
            }
            What::Usage
            | What::Install
            | What::Fund
            | What::Provision
            | What::Defund
            | What::Toggle
            | What::Terminate
            | What::Throttle
            | What::Read => self.esim_op(what, world, account),
            What::CreateGroup
            | What::FundGroup
            | What::DefundGroup
            | What::AddMember
            | What::RemoveMember
            | What::PatchGroup => self.group_op(what, world, account),
            What::CreateWebhook
            | What::PutWebhook
            | What::DeleteWebhook
            | What::TestWebhook
            | What::RotateSecret
            | What::Deliveries
            | What::Resend
            | What::ReceiverMode => self.webhook_op(what, world, account),
            What::TopUp
            | What::Freeze
            | What::AutoRefill
            | What::Limits
            | What::Inventory
            | What::Keys
            | What::NewAccount => self.operator_op(what, world, account),
        }
    }

    /// Keeps the world alive: calls about eSIMs, groups or webhooks that do not exist (or
    /// are all terminated) mostly create one instead.
    fn steer(&mut self, what: What, world: &World) -> What {
        let live = self.live_sims(world).len();
        match what {
            What::Usage | What::Install | What::Fund | What::Defund | What::Toggle | What::Throttle
                if live == 0 && self.chance(80) =>
            {
                What::Provision
            }
            What::Terminate if live < 3 => What::Provision,
            What::FundGroup | What::DefundGroup | What::AddMember | What::RemoveMember | What::PatchGroup
                if world.groups().is_empty() && self.chance(80) =>
            {
                What::CreateGroup
            }
            What::PutWebhook
            | What::DeleteWebhook
            | What::TestWebhook
            | What::RotateSecret
            | What::Deliveries
            | What::Resend
            | What::ReceiverMode
                if world.webhooks().is_empty() && self.chance(80) =>
            {
                What::CreateWebhook
            }
            other => other,
        }
    }

    /// The world around the calls: time, malformed requests, bursts, retries, faults.
    fn world_op(&mut self, what: What, world: &World, account: String) -> Op {
        match what {
            What::Advance => Op::Advance { ms: self.duration_ms() },
            What::Malformed => self.malformed(world, account),
            What::Burst => Op::Burst { caller: account, count: self.range(20, 130) as u32 },
            What::Retry => match self.last_idempotent.clone() {
                Some(Op::Call { caller, call: Call::Fund { sim, amount }, idempotency_key }) if self.chance(25) => {
                    // The same key with another amount: 409.
                    let call = Call::Fund { sim, amount: amount + Decimal::ONE };
                    Op::Call { caller, call, idempotency_key }
                }
                Some(op) => op,
                None => self.read(world, account),
            },
            // A crash of the service: rebuilt from its journal, it must carry on as if
            // nothing happened (the `crash_recovery` checker and the comparison test).
            // One draw decides, as `chance(25)` did before the store's faults: a seed that
            // draws none of them draws the same numbers as before (decision 167).
            What::Faults if self.faults => match self.below(100) as u64 {
                // Mostly a crash (rebuilt from the journal), sometimes a clean restart.
                roll if roll < self.mix.crash_percent => Op::Restart { rebuild: !self.chance(15) },
                roll if roll < self.mix.crash_percent + self.mix.store_percent => self.store_fault(world),
                _ => {
                    let on = !self.faults_active && self.chance(60);
                    self.faults_active = on;
                    Op::Faults { upstream_pause_fails: Some(on), network_read_fails: Some(on && self.chance(50)) }
                }
            },
            What::Faults => Op::Advance { ms: self.duration_ms() },
            other => unreachable!("{other:?} is not a world call"),
        }
    }

    /// A call about one eSIM (or a read, or a provisioning).
    fn esim_op(&mut self, what: What, world: &World, account: String) -> Op {
        match what {
            What::Usage => {
                let (_, sim) = self.sim(world);
                if self.chance(15) {
                    let left = self.range(2, 8) as u32;
                    self.usage_burst = Some((sim.clone(), left));
                }
                self.usage(sim)
            }
            What::Install => Op::Install { sim: self.sim(world).1 },
            What::Fund => {
                let (caller, sim) = self.sim(world);
                let amount = self.amount();
                self.call(caller, Call::Fund { sim, amount }, true)
            }
            What::Provision if world.sims().len() < MAX_SIMS => {
                let bind = Some(format!("s{}", self.next_sim));
                self.next_sim += 1;
                let mine: Vec<String> = world
                    .groups()
                    .iter()
                    .filter(|g| world.accounts()[g.owner].name == account)
                    .map(|g| g.name.clone())
                    .collect();
                let group = if self.chance(20) { self.pick(&mine).cloned() } else { None };
                let label = self.chance(30).then(|| format!("trip {}", self.below(100)));
                self.call(account, Call::Provision { bind, group, label, reference: None }, true)
            }
            What::Defund => {
                let (caller, sim) = self.sim(world);
                self.call(caller, Call::Defund { sim }, true)
            }
            What::Toggle => {
                let (caller, sim) = self.sim(world);
                let call = if self.chance(50) { Call::Disable { sim } } else { Call::Enable { sim } };
                self.call(caller, call, true)
            }
            What::Terminate => {
                let (caller, sim) = self.sim(world);
                self.call(caller, Call::Terminate { sim }, true)
            }
            What::Throttle => {
                let (caller, sim) = self.sim(world);
                let speed = self
                    .one_of(["NO_LIMIT", "SPEED_100_KBPS", "SPEED_3500_KBPS", "SPEED_150_KBPS", "fast"])
                    .to_string();
                self.call(caller, Call::Throttle { sim, speed }, false)
            }
            What::Read | What::Provision => self.read(world, account),
            other => unreachable!("{other:?} is not a esim call"),
        }
    }

    /// A call about a group and its members.
    fn group_op(&mut self, what: What, world: &World, account: String) -> Op {
        match what {
            What::CreateGroup => {
                let bind = Some(format!("g{}", self.next_group));
                let name = if self.chance(10) && self.next_group > 0 {
                    format!("team{}", self.below(self.next_group))
                } else {
                    format!("team{}", self.next_group)
                };
                self.next_group += 1;
                let threshold = self.chance(50).then(|| Decimal::from(self.range(0, 20)));
                let refill = self.chance(50).then(|| Decimal::from(self.range(5, 40)));
                self.call(account, Call::CreateGroup { bind, name, threshold, refill }, false)
            }
            What::FundGroup => {
                let (caller, group) = self.group(world);
                let amount = self.amount();
                self.call(caller, Call::FundGroup { group, amount }, true)
            }
            What::DefundGroup => {
                let (caller, group) = self.group(world);
                self.call(caller, Call::DefundGroup { group }, true)
            }
            What::AddMember => {
                let (caller, group) = self.group(world);
                let (_, sim) = self.sim(world);
                self.call(caller, Call::Add { group, sim }, true)
            }
            What::RemoveMember => {
                let (caller, sim) = self.sim(world);
                let engine = world.engine();
                let member_of = world
                    .sims()
                    .iter()
                    .find(|s| s.name == sim)
                    .and_then(|s| engine.esims()[s.engine as usize].funding.group())
                    .and_then(|g| world.groups().iter().find(|r| r.engine == g.0))
                    .map(|g| g.name.clone());
                let group = match member_of {
                    Some(group) if self.chance(90) => group,
                    _ => self.group(world).1,
                };
                self.call(caller, Call::Remove { group, sim }, false)
            }
            What::PatchGroup => {
                let (caller, group) = self.group(world);
                let threshold = self.chance(60).then(|| Decimal::from(self.range(0, 25)));
                let name = (threshold.is_none() || self.chance(30)).then(|| format!("renamed{}", self.below(5)));
                self.call(caller, Call::UpdateGroup { group, name, threshold, refill: None }, false)
            }
            other => unreachable!("{other:?} is not a group call"),
        }
    }

    /// A call about a webhook, its deliveries, or the receiver behind it.
    fn webhook_op(&mut self, what: What, world: &World, account: String) -> Op {
        match what {
            What::CreateWebhook => {
                let events = self.events();
                self.webhook(&account, events)
            }
            What::PutWebhook => {
                let (caller, webhook) = self.webhook_of(world);
                let call = match self.below(10) {
                    0..=4 => Call::UpdateWebhook { webhook, events: None, active: Some(true), url: None },
                    5..=6 => Call::UpdateWebhook { webhook, events: None, active: Some(false), url: None },
                    _ => Call::UpdateWebhook { webhook, events: Some(self.events()), active: None, url: None },
                };
                self.call(caller, call, false)
            }
            What::DeleteWebhook => {
                let (caller, webhook) = self.webhook_of(world);
                self.call(caller, Call::DeleteWebhook { webhook }, false)
            }
            What::TestWebhook => {
                let (caller, webhook) = self.webhook_of(world);
                self.call(caller, Call::TestWebhook { webhook }, false)
            }
            What::RotateSecret => {
                let (caller, webhook) = self.webhook_of(world);
                self.call(caller, Call::RotateSecret { webhook }, true)
            }
            What::Deliveries => {
                let (caller, webhook) = self.webhook_of(world);
                self.call(caller, Call::Deliveries { webhook }, false)
            }
            What::Resend => self.resend(world),
            What::ReceiverMode => {
                let (_, webhook) = self.webhook_of(world);
                if self.chance(self.mix.gone_percent) {
                    return Op::Receiver { webhook, mode: Receiver::Gone };
                }
                let mode = match self.below(11) {
                    0..=3 => Receiver::Ok,
                    4 => Receiver::Fail,
                    5 => Receiver::FailTimes { count: self.range(1, 12) as u32 },
                    10 => Receiver::Fail,
                    6 => Receiver::Timeout,
                    7 => Receiver::Hold,
                    _ => Receiver::Down { ms: self.range(1, 12) * 3_600_000 },
                };
                Op::Receiver { webhook, mode }
            }
            other => unreachable!("{other:?} is not a webhook call"),
        }
    }

    /// What the operator does: top-ups, freezes, auto-refill, limits, inventory, keys, accounts.
    fn operator_op(&mut self, what: What, world: &World, account: String) -> Op {
        match what {
            What::TopUp => {
                let amount = if self.chance(90) {
                    Decimal::from(self.range(10, 200))
                } else {
                    self.one_of([Decimal::new(5, 0), Decimal::new(10001, 3)])
                };
                Op::TopUp { account, amount }
            }
            What::Freeze => {
                let frozen = world
                    .accounts()
                    .iter()
                    .find(|a| a.name == account)
                    .is_some_and(|a| world.engine().accounts()[a.engine as usize].frozen);
                // Frozen accounts thaw soon, so the world does not stall.
                Op::Freeze { account, frozen: !frozen && self.chance(60) }
            }
            What::AutoRefill => {
                if self.chance(25) {
                    // The reseller's own settings (decision 129); the card stays the operator's.
                    let call = if self.chance(30) {
                        Call::GetRefill
                    } else {
                        let amount = self.chance(50).then(|| Decimal::from(self.range(10, 60)));
                        Call::SetRefill { enabled: Some(self.chance(70)), amount }
                    };
                    self.call(account, call, false)
                } else if self.chance(20) {
                    Op::AutoRefill { account, enabled: false, amount: None, card: None }
                } else {
                    let amount = Some(Decimal::from(self.range(10, 60)));
                    let card = if self.chance(55) { CardBehavior::Ok } else { self.one_of(CardBehavior::ALL) };
                    Op::AutoRefill { account, enabled: true, amount, card: Some(card) }
                }
            }
            What::Limits => {
                if !self.chance(self.mix.tight_limits_percent) {
                    Op::Limits { account, groups: Some(10), size: Some(500) }
                } else {
                    Op::Limits { account, groups: Some(self.range(1, 3) as u32), size: Some(self.range(1, 4) as u32) }
                }
            }
            // Stock runs out, is set again, or a shard's block of the pool arrives.
            What::Inventory => match self.below(100) {
                0..=29 => Op::Inventory { available: 0 },
                30..=54 => Op::Grant { count: self.range(1, 1_000) as u64 },
                _ => Op::Inventory { available: 100_000 },
            },
            What::Keys => {
                // A revoked key is replaced soon, so the account does not go silent.
                let revoked = world.accounts().iter().any(|a| a.name == account && a.revoked);
                if !revoked && self.chance(40) {
                    // The reseller's own key calls (decision 128); no Idempotency-Key: a
                    // replay cannot show the key again, so it is not byte for byte.
                    let call = match self.below(4) {
                        0 => Call::Keys,
                        1 | 2 => Call::MakeKey,
                        _ => Call::RevokeOwnKey,
                    };
                    self.call(account, call, false)
                } else if !revoked && self.chance(30) {
                    Op::Revoke { account }
                } else {
                    self.next_key += 1;
                    Op::NewKey { account }
                }
            }
            What::NewAccount if world.accounts().len() < MAX_ACCOUNTS => {
                Op::Account { name: format!("a{}", world.accounts().len()) }
            }
            What::NewAccount => Op::TopUp { account, amount: Decimal::from(self.range(10, 100)) },
            other => unreachable!("{other:?} is not a operator call"),
        }
    }

    /// A fault of the journal's store: a failover (the owner's lease runs out and the
    /// standby takes over), the zombie trying to append after one, a commit whose
    /// outcome is lost, a stalled append, a standby left behind for a while, or a snapshot (written, or
    /// the process dying while it makes one).
    fn store_fault(&mut self, world: &World) -> Op {
        let op = match self.below(100) {
            0..=24 => Op::Failover,
            25..=39 if world.has_zombie() => Op::Zombie,
            25..=39 => Op::Failover,
            40..=49 => Op::LostCommit,
            // Up to twice the append deadline: about half the stalls outlast it.
            50..=59 => Op::Stall { ms: self.range(1, 2 * crate::world::APPEND_DEADLINE_MS) },
            60..=74 => Op::StandbyLag { steps: self.range(1, 24) as u32 },
            75..=87 => Op::Snapshot { crash: false },
            _ => Op::Snapshot { crash: true },
        };
        if op == Op::Failover && self.chance(60) {
            self.zombie_wakes_in = Some(self.range(0, 12) as u32);
        }
        op
    }

    /// A call, sometimes with an Idempotency-Key (remembered for a later retry).
    fn call(&mut self, caller: String, call: Call, idempotent: bool) -> Op {
        let idempotency_key = (idempotent && self.chance(12)).then(|| format!("k{}", self.below(1_000)));
        let op = Op::Call { caller, call, idempotency_key };
        if matches!(op, Op::Call { idempotency_key: Some(_), .. }) {
            self.last_idempotent = Some(op.clone());
        }
        op
    }

    fn account(&mut self, world: &World) -> String {
        match self.pick(world.accounts()) {
            Some(account) => account.name.clone(),
            None => "a0".to_string(),
        }
    }

    /// Indexes (in `world.sims()`) of the eSIMs not terminated.
    fn live_sims(&self, world: &World) -> Vec<usize> {
        let esims = world.engine().esims();
        (0..world.sims().len())
            .filter(|&i| esims[world.sims()[i].engine as usize].status != esim_engine::state::EsimStatus::Terminated)
            .collect()
    }

    /// An eSIM and who calls about it: mostly a live one by its owner, sometimes a
    /// terminated one, another account (404 expected) or an ICCID nobody owns.
    fn sim(&mut self, world: &World) -> (String, String) {
        let caller = self.account(world);
        let live = self.live_sims(world);
        let sim = match self.pick(&live) {
            Some(&index) if self.chance(90) => &world.sims()[index],
            _ => match self.pick(world.sims()) {
                Some(sim) => sim,
                None => return (caller, UNKNOWN_ICCID.to_string()),
            },
        };
        match self.below(100) {
            0..=5 => (caller, sim.name.clone()),
            6..=8 => (caller, UNKNOWN_ICCID.to_string()),
            _ => (world.accounts()[sim.owner].name.clone(), sim.name.clone()),
        }
    }

    fn group(&mut self, world: &World) -> (String, String) {
        let caller = self.account(world);
        let Some(group) = self.pick(world.groups()) else { return (caller, UNKNOWN_UUID.to_string()) };
        match self.below(100) {
            0..=4 => (caller, group.name.clone()),
            5..=6 => (caller, UNKNOWN_UUID.to_string()),
            _ => (world.accounts()[group.owner].name.clone(), group.name.clone()),
        }
    }

    fn webhook_of(&mut self, world: &World) -> (String, String) {
        let caller = self.account(world);
        match self.pick(world.webhooks()) {
            Some(webhook) => (world.accounts()[webhook.owner].name.clone(), webhook.name.clone()),
            None => (caller, "wh_unknown".to_string()),
        }
    }

    /// A resend of a recent event: mostly to a webhook of the event's account, sometimes
    /// to any webhook or of an unknown event (404s).
    fn resend(&mut self, world: &World) -> Op {
        let (caller, webhook) = self.webhook_of(world);
        let Some((account, _, event)) = self.pick(world.recent_events()).cloned() else {
            return self.call(caller, Call::Resend { event: "evt_unknown".into(), webhook }, false);
        };
        let owned: Vec<&str> = world
            .webhooks()
            .iter()
            .filter(|w| !w.deleted && world.accounts()[w.owner].engine == account)
            .map(|w| w.name.as_str())
            .collect();
        let (caller, webhook) = match self.pick(&owned) {
            Some(name) if self.chance(85) => {
                let owner = world.accounts().iter().find(|a| a.engine == account).map(|a| a.name.clone());
                (owner.unwrap_or(caller), name.to_string())
            }
            _ => (caller, webhook),
        };
        self.call(caller, Call::Resend { event, webhook }, true)
    }

    fn webhook(&mut self, account: &str, events: Vec<String>) -> Op {
        let bind = Some(format!("w{}", self.next_webhook));
        self.next_webhook += 1;
        Op::Call {
            caller: account.to_string(),
            call: Call::CreateWebhook { bind, events, url: None },
            idempotency_key: None,
        }
    }

    fn events(&mut self) -> Vec<String> {
        if self.chance(50) {
            return vec!["*".to_string()];
        }
        let count = self.range(1, 6) as usize;
        let mut names: Vec<String> =
            (0..count).map(|_| self.one_of(EventName::SUBSCRIBABLE).as_str().to_string()).collect();
        names.sort();
        names.dedup();
        names
    }

    fn usage(&mut self, sim: String) -> Op {
        let table = RateTable::builtin();
        let country = if self.chance(85) {
            self.one_of(COMMON_COUNTRIES).to_string()
        } else if self.chance(95) {
            self.pick(table.countries()).map_or_else(|| "DE".to_string(), |c| c.iso2.clone())
        } else {
            "XX".to_string()
        };
        let operator = if self.chance(30) {
            let networks = table.by_iso2(&country).map(|c| c.networks.as_slice()).unwrap_or(&[]);
            match self.pick(networks) {
                Some(network) if self.chance(95) => Some(network.operator.clone()),
                _ => Some("NoSuchTel".to_string()),
            }
        } else {
            None
        };
        let mb = if self.chance(97) { Decimal::from(self.range(1, 2_000)) } else { Decimal::ZERO };
        Op::Usage { sim, mb, country, operator }
    }

    /// Mostly valid amounts (with the spec's examples), some out of range on purpose.
    fn amount(&mut self) -> Decimal {
        match self.below(100) {
            0..=19 => Decimal::from(self.one_of([9, 18, 20, 27, 5, 10, 25])),
            20..=84 => Decimal::new(self.range(1, 5_000), 2),
            85..=92 => Decimal::new(self.range(5_000, 50_000), 2),
            _ => self.one_of([
                Decimal::ZERO,
                Decimal::new(-1, 0),
                Decimal::new(1, 3),
                Decimal::new(1_000_001, 2),
                Decimal::new(20_000, 0),
            ]),
        }
    }

    /// Waits across the interesting deadlines: seconds, sync cycles (60 s), card
    /// settles (2 min), pauses and settlements (15 min), retries and outages (hours),
    /// idempotency and auto-refill days (24 h).
    fn duration_ms(&mut self) -> i64 {
        let seconds = match self.below(100) {
            0..=34 => self.range(1, 20),
            35..=59 => self.range(55, 130),
            60..=69 => self.range(120, 200),
            70..=86 => self.range(890, 1_000),
            87..=93 => self.range(1_800, 7_200),
            94..=98 => self.range(3, 12) * 3_600,
            _ => self.range(24, 26) * 3_600,
        };
        seconds * 1_000
    }

    fn read(&mut self, world: &World, account: String) -> Op {
        let call = match self.below(11) {
            0 => Call::Get { sim: self.sim(world).1 },
            1 => Call::List {
                status: self.chance(30).then(|| self.one_of(["active", "pending", "bogus"]).to_string()),
                limit: self.chance(30).then(|| self.one_of([0, 1, 5, 150])),
                offset: None,
            },
            2 => Call::Wallet,
            3 => Call::AccountInfo,
            // The unfiltered table is large: mostly one country.
            4 => Call::Rates { country: self.chance(90).then(|| "DE".to_string()), continent: None },
            5 => Call::Groups,
            6 => Call::GetGroup { group: self.group(world).1 },
            7 => Call::Members { group: self.group(world).1, limit: None, offset: None },
            8 => Call::Webhooks,
            9 => Call::GetWebhook { webhook: self.webhook_of(world).1 },
            _ => {
                let (caller, sim) = self.sim(world);
                return Op::Call { caller, call: Call::Get { sim }, idempotency_key: None };
            }
        };
        Op::Call { caller: account, call, idempotency_key: None }
    }

    /// Requests production must refuse cleanly: bad JSON, wrong types, missing fields,
    /// wrong methods and routes, missing or wrong credentials, out-of-range values.
    fn malformed(&mut self, world: &World, account: String) -> Op {
        let sim = self.sim(world).1;
        let group = self.group(world).1;
        let (caller, method, path, body) = match self.below(17) {
            0 => (account, "POST", format!("/esim/{{{sim}}}/fund"), "{".to_string()),
            1 => (account, "POST", format!("/esim/{{{sim}}}/fund"), r#"{"amount": "20"}"#.to_string()),
            2 => (account, "POST", format!("/esim/{{{sim}}}/fund"), "{}".to_string()),
            3 => (account, "POST", format!("/esim/{{{sim}}}/fund"), "[1]".to_string()),
            4 => (account, "POST", format!("/esim/{{{sim}}}/fund"), r#"{"amount": 1e400}"#.to_string()),
            5 => (account, "POST", format!("/esim/{{{sim}}}/throttle"), r#"{"speed": 5}"#.to_string()),
            6 => (account, "POST", "/groups".to_string(), r#"{"name": 7}"#.to_string()),
            7 => (
                account,
                "POST",
                "/webhooks".to_string(),
                r#"{"url": "http://insecure.example.com", "events": ["*"]}"#.to_string(),
            ),
            8 => (account, "GET", "/esim/list?limit=abc".to_string(), String::new()),
            9 => (account, "PUT", "/esim/provision".to_string(), String::new()),
            10 => ("anonymous".to_string(), "GET", "/wallet/balance".to_string(), String::new()),
            11 => (account, "PATCH", format!("/groups/{{{group}}}"), "{}".to_string()),
            12 => (
                "admin".to_string(),
                "POST",
                format!("/admin/v1/accounts/{{{account}}}/topups"),
                r#"{"amount_usd": 5}"#.to_string(),
            ),
            13 => (
                "admin".to_string(),
                "POST",
                format!("/sandbox/v1/esims/{{{sim}}}/usage"),
                r#"{"mb": -1, "country": "DE"}"#.to_string(),
            ),
            // The operator's API without its token, an account nobody has, a route nobody has.
            14 => ("anonymous".to_string(), "GET", "/admin/v1/accounts".to_string(), String::new()),
            15 => (
                "admin".to_string(),
                "POST",
                "/admin/v1/accounts/acc_unknown/topups".to_string(),
                r#"{"amount_usd": 10}"#.to_string(),
            ),
            _ => (account, "GET", "/nowhere".to_string(), String::new()),
        };
        Op::Raw { caller, method: method.to_string(), path, body }
    }
}
