//! The world around the service: resellers, the operator, devices, the network and the
//! webhook receivers, all driving one in-memory [`Service`] with `http::Request<Bytes>`
//! values on a virtual clock, so a simulation runs production's routing, parsing and JSON.
//!
//! The world applies one [`Op`] at a time and records what it saw in a [`StepLog`]:
//! every HTTP exchange, every event, every webhook delivery and how the receiver
//! answered, and typed [`Fact`]s read from the responses (money moved, balances shown).
//! The checkers judge the engine against those observations, never against the world's
//! own guesses.
//!
//! This file holds the world's state and its stepping (an op, the clock); the rest is in
//! parts of one purpose each, children of this module so that they share the [`World`]'s
//! private fields: `log` (the step log and its facts, which every other part writes
//! into and which imports none of them), `request` (the requests an op sends), `oracle`
//! (what an Idempotency-Key should do), `observe` (the names bound and the facts read
//! from responses), `receiver` (events, deliveries and how receivers answer), `crash` (a
//! restart, and the rebuild from the journal), `store` (the journal in the in-memory
//! store: owner, standby, zombie, and their faults) and `json` (request bodies, and
//! amounts read back).

mod compare;
mod crash;
mod json;
mod log;
mod observe;
mod oracle;
mod receiver;
mod request;
mod store;

pub use compare::{compare, Compared};
pub use json::decimal;
pub use log::{DeliveryRecord, Exchange, Fact, StepLog};
pub use oracle::Idempotency;
pub use receiver::Mode;
pub use request::reached_by;
pub use store::{APPEND_DEADLINE_MS, STANDBY_DIGEST_EVERY_STEPS, STORE_LEASE_MS};

use crate::op::Op;
use crate::InjectedBug;
use esim_api::{ClockMode, JournalEntry, Service};
use esim_engine::{Command, Engine, EngineConfig, Millis, ResellerOp, ResellerRequest};
use oracle::IdempotencyOracle;
use serde_json::Value;
use std::collections::BTreeMap;

/// The admin and sandbox token of simulated services.
pub const ADMIN_TOKEN: &str = "sim-admin-token";

/// Most intermediate stops of one clock advance (deadlines met while deliveries are
/// outstanding); the rest of the way is one jump.
const MAX_ADVANCE_STOPS: usize = 256;

#[derive(Clone, Debug)]
pub struct AccountRec {
    pub name: String,
    pub id: String,
    pub engine: u32,
    /// Number of the key its calls use (see [`World::key`]).
    pub key: u32,
    pub revoked: bool,
}

#[derive(Clone, Debug)]
pub struct SimRec {
    pub name: String,
    pub iccid: String,
    pub engine: u32,
    /// Index in [`World::accounts`].
    pub owner: usize,
}

#[derive(Clone, Debug)]
pub struct GroupRec {
    pub name: String,
    pub id: String,
    pub engine: u32,
    pub owner: usize,
}

#[derive(Clone, Debug)]
pub struct WebhookRec {
    pub name: String,
    pub id: String,
    pub engine: u32,
    pub owner: usize,
    pub mode: Mode,
    pub deleted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entity {
    Account(usize),
    Sim(usize),
    Group(usize),
    Webhook(usize),
}

/// Totals over the life of a world (for the summary).
#[derive(Clone, Debug, Default)]
pub struct WorldStats {
    pub requests: u64,
    pub rate_limited: u64,
    pub events: u64,
    pub deliveries: u64,
    pub deliveries_ok: u64,
}

pub struct World {
    service: Service,
    now: Millis,
    accounts: Vec<AccountRec>,
    sims: Vec<SimRec>,
    groups: Vec<GroupRec>,
    webhooks: Vec<WebhookRec>,
    names: BTreeMap<String, Entity>,
    ids: BTreeMap<String, Entity>,
    keys: Vec<String>,
    idempotency: IdempotencyOracle,
    held: Vec<esim_engine::Delivery>,
    log: StepLog,
    steps: usize,
    stats: WorldStats,
    /// The engine's configuration and test switch (a crash rebuilds with them; only
    /// builds with the `test-switches` feature have a bug to read).
    config: EngineConfig,
    #[cfg_attr(not(feature = "test-switches"), allow(dead_code))]
    bug: Option<InjectedBug>,
    /// Every journal entry the service handed out since the world began, in order:
    /// what a crash rebuilds the engine from.
    journal: Vec<JournalEntry>,
    /// The newest events (engine account, name, id): what resends pick from.
    recent_events: Vec<(u32, esim_engine::EventName, String)>,
    /// The journal in the in-memory store: the owner node, the standby, the zombie.
    nodes: store::Nodes,
}

impl World {
    /// A new service at the virtual epoch; the engine's seed is the scenario seed.
    pub fn new(seed: u64, bug: Option<InjectedBug>) -> World {
        let config = EngineConfig { seed, ..EngineConfig::default() };
        let engine = Engine::new(config.clone(), Millis::VIRTUAL_EPOCH);
        // Keys and signing secrets come from a stream seeded by the scenario (never secret
        // here: a run must repeat), sealed under a key derived from the seed.
        let secrets = esim_api::secrets::Secrets::seeded(seed);
        let mut service = Service::new(engine, ADMIN_TOKEN.to_string(), ClockMode::Virtual, secrets);
        service.set_render_qr(false);
        #[cfg(feature = "test-switches")]
        service.engine_mut().inject_bug_for_test(bug);
        let nodes = store::Nodes::new(store::header(&config), &store::prepare(bug));
        World {
            nodes,
            now: service.now(Millis(0)),
            service,
            accounts: Vec::new(),
            sims: Vec::new(),
            groups: Vec::new(),
            webhooks: Vec::new(),
            names: BTreeMap::new(),
            ids: BTreeMap::new(),
            keys: Vec::new(),
            idempotency: IdempotencyOracle::default(),
            held: Vec::new(),
            log: StepLog::default(),
            steps: 0,
            stats: WorldStats::default(),
            config,
            bug,
            journal: Vec::new(),
            recent_events: Vec::new(),
        }
    }

    // ----- read access (generator, checkers, scripts) -----

    pub fn engine(&self) -> &Engine {
        self.service.engine()
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        self.service.engine_mut()
    }

    pub fn now(&self) -> Millis {
        self.now
    }

    pub fn log(&self) -> &StepLog {
        &self.log
    }

    pub fn stats(&self) -> &WorldStats {
        &self.stats
    }

    pub fn accounts(&self) -> &[AccountRec] {
        &self.accounts
    }

    pub fn sims(&self) -> &[SimRec] {
        &self.sims
    }

    pub fn groups(&self) -> &[GroupRec] {
        &self.groups
    }

    pub fn webhooks(&self) -> &[WebhookRec] {
        &self.webhooks
    }

    /// The newest events the world saw, oldest first: (engine account, name, id).
    pub fn recent_events(&self) -> &[(u32, esim_engine::EventName, String)] {
        &self.recent_events
    }

    pub fn entity(&self, name: &str) -> Option<Entity> {
        self.names.get(name).copied()
    }

    /// The API key number `key` (see [`AccountRec::key`]).
    pub fn key(&self, key: u32) -> &str {
        &self.keys[key as usize]
    }

    /// The id a name stands for: the bound id, or the name itself.
    pub fn id_of(&self, name: &str) -> String {
        match self.names.get(name) {
            Some(Entity::Account(i)) => self.accounts[*i].id.clone(),
            Some(Entity::Sim(i)) => self.sims[*i].iccid.clone(),
            Some(Entity::Group(i)) => self.groups[*i].id.clone(),
            Some(Entity::Webhook(i)) => self.webhooks[*i].id.clone(),
            None => name.to_string(),
        }
    }

    /// Every bound id with its name, and API keys as `name.key` (for readable transcripts).
    pub fn redactions(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for account in &self.accounts {
            pairs.push((account.id.clone(), account.name.clone()));
        }
        for (number, key) in self.keys.iter().enumerate() {
            let owner = self.accounts.iter().find(|a| a.key == number as u32).map_or("old", |a| a.name.as_str());
            pairs.push((key.clone(), format!("{owner}.key{number}")));
        }
        pairs.extend(self.sims.iter().map(|s| (s.iccid.clone(), s.name.clone())));
        pairs.extend(self.groups.iter().map(|g| (g.id.clone(), g.name.clone())));
        pairs.extend(self.webhooks.iter().map(|w| (w.id.clone(), w.name.clone())));
        pairs.retain(|(id, name)| id != name);
        // Longest first, so that no id is replaced inside a longer one.
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        pairs
    }

    /// A read through the engine, as the entity's owner would make it, without going
    /// through the rate limit or the step log (for a script's `expect`).
    pub fn read(&mut self, name: &str) -> Result<Value, String> {
        let entity = self.entity(name).ok_or_else(|| format!("{name} is not bound"))?;
        let (owner, ops) = match entity {
            Entity::Account(i) => (i, vec![ResellerOp::Account, ResellerOp::WalletBalance]),
            Entity::Sim(i) => (self.sims[i].owner, vec![ResellerOp::GetEsim { iccid: self.sims[i].iccid.clone() }]),
            Entity::Group(i) => {
                (self.groups[i].owner, vec![ResellerOp::GetGroup { group_id: self.groups[i].id.clone() }])
            }
            Entity::Webhook(i) => {
                (self.webhooks[i].owner, vec![ResellerOp::GetWebhook { webhook_id: self.webhooks[i].id.clone() }])
            }
        };
        let api_key = self.keys[self.accounts[owner].key as usize].clone();
        let mut merged = serde_json::Map::new();
        for op in ops {
            let request =
                ResellerRequest { key_digest: esim_engine::KeyDigest::of(&api_key), idempotency_key: None, op };
            let now = self.now;
            let response = self.service.engine_mut().handle(now, Command::Reseller(request));
            let (_, body) = esim_engine::render(&response);
            match serde_json::from_slice(&body) {
                Ok(Value::Object(fields)) => merged.extend(fields),
                _ => return Err(format!("reading {name} gave {}", String::from_utf8_lossy(&body))),
            }
        }
        Ok(Value::Object(merged))
    }

    // ----- applying an op -----

    /// A block of the global pool granted to this engine, as the sharded shell applies
    /// it (the command, journaled; no HTTP route): the stock before and after is a fact.
    fn grant(&mut self, count: u64) {
        let before = self.service.engine().inventory();
        let command = Command::Admin(esim_engine::AdminOp::GrantInventory { count });
        let granted = self.service.apply_command(self.now, command).is_ok();
        let after = self.service.engine().inventory();
        self.log.facts.push(Fact::Granted { count, before, after: granted.then_some(after) });
    }

    /// Applies one op and returns what was observed.
    pub fn apply(&mut self, op: &Op) -> &StepLog {
        self.log.clear(self.steps);
        self.steps += 1;
        match op {
            Op::Advance { ms } => self.advance(*ms),
            Op::Receiver { webhook, mode } => self.set_receiver(webhook, *mode),
            Op::Restart { rebuild } => self.restart(*rebuild),
            Op::Failover => self.failover(),
            Op::Zombie => self.zombie_append(),
            Op::LostCommit => self.lose_commit_outcome(),
            Op::Stall { ms } => self.arm_stall(*ms),
            Op::StandbyLag { steps } => self.lag_standby(*steps),
            Op::Grant { count } => self.grant(*count),
            Op::Snapshot { crash } => self.snapshot(*crash),
            request => self.send_op(request),
        }
        self.drain();
        self.commit_journal();
        self.report_store(op.is_store_fault());
        self.log.now = self.now;
        &self.log
    }

    /// Moves the clock by `ms`. While deliveries are outstanding it stops at every
    /// deadline on the way, so receivers answer each attempt when it is made (as a real
    /// shell would), not all at the end of a long jump.
    fn advance(&mut self, ms: i64) {
        let target = self.now.plus_ms(ms.max(1));
        for _ in 0..MAX_ADVANCE_STOPS {
            let outstanding = !self.service.engine().pending_deliveries().is_empty();
            match self.service.poll_timeout() {
                Some(deadline) if outstanding && deadline > self.now && deadline < target => {
                    self.advance_clock(deadline.0 - self.now.0);
                    self.drain();
                }
                _ => break,
            }
        }
        self.advance_clock(target.0 - self.now.0);
    }

    fn bind(&mut self, name: &str, id: String, entity: Entity) {
        self.names.insert(name.to_string(), entity);
        self.ids.insert(id, entity);
    }

    fn sim_by_id(&self, iccid: Option<String>) -> Option<u32> {
        match self.ids.get(&iccid?) {
            Some(Entity::Sim(i)) => Some(self.sims[*i].engine),
            _ => None,
        }
    }

    fn group_by_id(&self, id: Option<String>) -> Option<u32> {
        match self.ids.get(&id?) {
            Some(Entity::Group(i)) => Some(self.groups[*i].engine),
            _ => None,
        }
    }
}
