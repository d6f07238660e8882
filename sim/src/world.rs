//! The world around the service: resellers, the operator, devices, the network and the
//! webhook receivers, all driving one in-memory [`Service`] with `http::Request<Bytes>`
//! values on a virtual clock, so a simulation runs production's routing, parsing and JSON.
//!
//! The world applies one [`Op`] at a time and records what it saw in a [`StepLog`]:
//! every HTTP exchange, every event, every webhook delivery and how the receiver
//! answered, and typed [`Fact`]s read from the responses (money moved, balances shown).
//! The checkers judge the engine against those observations, never against the world's
//! own guesses.

use crate::op::{Call, Op, Receiver};
use bytes::Bytes;
use esim_engine::state::{EsimIx, GroupIx, WalletOwner};
use esim_engine::{
    AdminOp, Command, DeliveryResult, Effect, Engine, EngineConfig, Event, EventName, InjectedBug, Millis, ResellerOp,
    ResellerRequest,
};
use esim_transport::api::Routed;
use esim_transport::journal::{self, SegmentBuffer, SegmentHeader};
use esim_transport::routes::{percent_encode as encode, Api, Endpoint, RESELLER_BASE};
use esim_transport::{ClockMode, JournalEntry, Outcome, Service};
use rust_decimal::Decimal;
use serde_json::Value;
use std::collections::BTreeMap;
use std::str::FromStr;

/// The admin and sandbox token of simulated services.
pub const ADMIN_TOKEN: &str = "sim-admin-token";

/// Idempotency-Key entries live this long (the engine's `IDEMPOTENCY_TTL_MS`).
const IDEMPOTENCY_TTL_MS: i64 = esim_engine::limits::IDEMPOTENCY_TTL_MS;

/// Answering a delivery cannot start new deliveries, but the loop is bounded anyway.
const MAX_DRAIN_ROUNDS: usize = 16;

/// Most intermediate stops of one clock advance (deadlines met while deliveries are
/// outstanding); the rest of the way is one jump.
const MAX_ADVANCE_STOPS: usize = 256;

/// Something the world read in a response: the checkers' evidence.
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// A manual top-up succeeded (admin API).
    TopUp {
        account: u32,
        amount: Decimal,
    },
    /// A provisioning succeeded (a fee of 1.75).
    Provisioned {
        account: u32,
        sim: u32,
    },
    /// An eSIM fund call succeeded: `amount` left the reseller balance, `shown` is the
    /// wallet balance the response displayed.
    EsimFunded {
        account: u32,
        sim: u32,
        amount: Decimal,
        shown: Decimal,
    },
    GroupFunded {
        account: u32,
        group: u32,
        amount: Decimal,
        shown: Decimal,
    },
    /// A balance return was accepted (eSIM defund, move with balance, group defund).
    ReturnRequested {
        account: u32,
        owner: WalletOwner,
        estimate: Decimal,
    },
    /// A read displayed this eSIM wallet balance.
    EsimShown {
        sim: u32,
        shown: Decimal,
    },
    GroupShown {
        group: u32,
        shown: Decimal,
    },
    /// `GET /wallet/balance` answered these.
    WalletShown {
        account: u32,
        balance: Decimal,
        lifetime_topup: Decimal,
        lifetime_usage: Decimal,
    },
    /// The reseller created, changed or deleted a webhook: its subscription and the
    /// active switch the reseller set (the engine may still disable it after failures).
    WebhookSet {
        webhook: u32,
        account: u32,
        events: Option<Vec<String>>,
        active: Option<bool>,
        deleted: bool,
    },
    /// The service restarted (`crash` or `restart`). For a crash, `rebuild` holds the
    /// state digest before it and the digest of the engine rebuilt from the journal's
    /// bytes, or why the rebuild failed.
    Restarted {
        rebuild: Option<Result<(String, String), String>>,
    },
}

/// What the world expected of a request with an `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq)]
pub enum Idempotency {
    /// No key, or one the engine cannot store (reads, unknown keys).
    None,
    /// First use of the key: executed, and stored if final.
    Fresh,
    /// The same request again within 24 hours: the stored status and bytes, exactly.
    Replay { status: u16, body: Bytes },
    /// The same key with another request: 409 IDEMPOTENCY_KEY_REUSED.
    Conflict,
}

/// One HTTP request and its response.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: http::Method,
    pub path: String,
    pub request_body: Bytes,
    /// The world's number of the API key used (for the rate limit), if any.
    pub key: Option<u32>,
    /// The key is known to the engine and not revoked.
    pub key_valid: bool,
    /// The request parsed into a reseller command (so the rate limit counted it).
    pub engine_bound: bool,
    pub read: bool,
    pub idempotency: Idempotency,
    pub status: u16,
    /// A 429 of the rate limit (RATE_LIMITED); other 429s are limits of the account.
    pub rate_limited: bool,
    pub body: Bytes,
    /// The Retry-After header of a 429.
    pub retry_after: Option<String>,
    pub at: Millis,
}

/// A webhook delivery the engine handed out, and the receiver's answer.
#[derive(Clone, Debug)]
pub struct DeliveryRecord {
    pub delivery_id: u64,
    pub webhook_id: String,
    /// Engine index of the webhook, when the world knows it.
    pub webhook: Option<u32>,
    pub event_id: String,
    pub event: EventName,
    pub attempt: u32,
    /// False for a delivery handed out earlier and held, answered now.
    pub handed_out: bool,
    /// None while the receiver holds it.
    pub answer: Option<DeliveryResult>,
    pub body: String,
}

/// Everything observed while applying one op.
#[derive(Clone, Debug, Default)]
pub struct StepLog {
    pub index: usize,
    /// Service time after the op.
    pub now: Millis,
    pub exchanges: Vec<Exchange>,
    pub facts: Vec<Fact>,
    pub events: Vec<Event>,
    pub deliveries: Vec<DeliveryRecord>,
    /// Which webhooks were active when events were emitted: (index in `events` of the
    /// first event of a batch, active flag per engine webhook index). One op can emit
    /// several batches (a long clock advance stops at deadlines, and receivers answer
    /// in between, which can disable a webhook).
    pub webhooks_active: Vec<(usize, Vec<bool>)>,
}

impl StepLog {
    fn clear(&mut self, index: usize) {
        self.index = index;
        self.exchanges.clear();
        self.facts.clear();
        self.events.clear();
        self.deliveries.clear();
        self.webhooks_active.clear();
    }

    /// The webhooks' active flags when event `event` (an index in `events`) was emitted.
    pub fn active_at(&self, event: usize) -> Option<&[bool]> {
        self.webhooks_active.iter().rev().find(|(first, _)| *first <= event).map(|(_, flags)| flags.as_slice())
    }
}

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

/// How a receiver answers, with `down` turned into a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Fail,
    /// Fails this many more answers, then answers 200.
    FailTimes(u32),
    Timeout,
    Hold,
    DownUntil(Millis),
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

/// Who sends a request.
#[derive(Clone, Copy, Debug)]
enum Who {
    Account(usize),
    Admin,
    Anonymous,
}

/// What a response tells the world, by the kind of request.
#[derive(Clone, Debug)]
enum Kind {
    Provision {
        bind: Option<String>,
    },
    Fund,
    Defund,
    Add,
    FundGroup,
    DefundGroup,
    CreateGroup {
        bind: Option<String>,
    },
    ShowGroup,
    ShowEsim,
    Wallet,
    CreateWebhook {
        bind: Option<String>,
    },
    UpdateWebhook {
        events: Option<Vec<String>>,
        active: Option<bool>,
    },
    DeleteWebhook {
        id: String,
    },
    TestWebhook,
    /// A hand-written request: the production router says what it is.
    Raw,
    CreateAccount {
        bind: Option<String>,
    },
    TopUp {
        account_id: String,
    },
    NewKey {
        account_id: String,
    },
    Revoke {
        key: String,
    },
    Other,
}

/// An Idempotency-Key the engine stored, as the world saw it.
struct Stored {
    request: (http::Method, String, Bytes),
    status: u16,
    body: Bytes,
    at: Millis,
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
    idempotency: BTreeMap<(u32, String), Stored>,
    held: Vec<esim_engine::Delivery>,
    log: StepLog,
    steps: usize,
    stats: WorldStats,
    /// The engine's configuration and test switch (a crash rebuilds with them).
    config: EngineConfig,
    bug: Option<InjectedBug>,
    /// Every journal entry the service handed out since the world began, in order:
    /// what a crash rebuilds the engine from.
    journal: Vec<JournalEntry>,
}

impl World {
    /// A new service at the virtual epoch; the engine's seed is the scenario seed.
    pub fn new(seed: u64, bug: Option<InjectedBug>) -> World {
        let config = EngineConfig { seed, ..EngineConfig::default() };
        let engine = Engine::new(config.clone(), Millis::VIRTUAL_EPOCH);
        // Keys and signing secrets come from a stream seeded by the scenario (never secret
        // here: a run must repeat), sealed under a key derived from the seed.
        let secrets = esim_transport::secrets::Secrets::seeded(seed);
        let mut service = Service::new(engine, ADMIN_TOKEN.to_string(), ClockMode::Virtual, secrets);
        service.set_render_qr(false);
        service.engine_mut().inject_bug_for_test(bug);
        World {
            now: service.now(Millis(0)),
            service,
            accounts: Vec::new(),
            sims: Vec::new(),
            groups: Vec::new(),
            webhooks: Vec::new(),
            names: BTreeMap::new(),
            ids: BTreeMap::new(),
            keys: Vec::new(),
            idempotency: BTreeMap::new(),
            held: Vec::new(),
            log: StepLog::default(),
            steps: 0,
            stats: WorldStats::default(),
            config,
            bug,
            journal: Vec::new(),
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

    /// Applies one op and returns what was observed.
    pub fn apply(&mut self, op: &Op) -> &StepLog {
        self.log.clear(self.steps);
        self.steps += 1;
        match op {
            Op::Account { name } => {
                let body = Json::new()
                    .string("contact_email", &format!("{name}@reseller.example"))
                    .string("company_name", name);
                let kind = Kind::CreateAccount { bind: Some(name.clone()) };
                self.send_to(Who::Admin, Endpoint::CreateAccount, &[], "", body.finish(), None, kind);
            }
            Op::TopUp { account, amount } => {
                let account_id = self.id_of(account);
                let body = Json::new().number("amount_usd", amount).finish();
                let kind = Kind::TopUp { account_id: account_id.clone() };
                self.send_to(Who::Admin, Endpoint::TopUp, &[&account_id], "", body, None, kind);
            }
            Op::Freeze { account, frozen } => {
                let body = Json::new().raw("frozen", &frozen.to_string()).finish();
                self.send_to(Who::Admin, Endpoint::Freeze, &[&self.id_of(account)], "", body, None, Kind::Other);
            }
            Op::AutoRefill { account, enabled, amount, card } => {
                let body = Json::new()
                    .raw("enabled", &enabled.to_string())
                    .optional("amount_usd", amount.as_ref())
                    .optional("card", card.map(|card| card.to_string()).as_deref())
                    .finish();
                let account_id = self.id_of(account);
                self.send_to(Who::Admin, Endpoint::SetAutoRefill, &[&account_id], "", body, None, Kind::Other);
            }
            Op::Limits { account, groups, size } => {
                let body = Json::new()
                    .optional("max_groups", groups.as_ref())
                    .optional("max_group_size", size.as_ref())
                    .finish();
                let account_id = self.id_of(account);
                self.send_to(Who::Admin, Endpoint::SetLimits, &[&account_id], "", body, None, Kind::Other);
            }
            Op::Inventory { available } => {
                let body = Json::new().raw("available", &available.to_string()).finish();
                self.send_to(Who::Admin, Endpoint::SetInventory, &[], "", body, None, Kind::Other);
            }
            Op::NewKey { account } => {
                let account_id = self.id_of(account);
                let kind = Kind::NewKey { account_id: account_id.clone() };
                self.send_to(Who::Admin, Endpoint::CreateKey, &[&account_id], "", String::new(), None, kind);
            }
            Op::Revoke { account } => {
                let key = match self.entity(account) {
                    Some(Entity::Account(i)) => self.keys[self.accounts[i].key as usize].clone(),
                    _ => account.clone(),
                };
                let kind = Kind::Revoke { key: key.clone() };
                self.send_to(Who::Admin, Endpoint::RevokeKey, &[&key], "", String::new(), None, kind);
            }
            Op::Call { caller, call, idempotency_key } => self.call(caller, call, idempotency_key.as_deref()),
            Op::Raw { caller, method, path, body } => self.raw(caller, method, path, body),
            Op::Burst { caller, count } => {
                let who = self.who(caller);
                for _ in 0..*count {
                    self.send_to(who, Endpoint::WalletBalance, &[], "", String::new(), None, Kind::Wallet);
                }
            }
            Op::Install { sim } => {
                let iccid = self.id_of(sim);
                self.send_to(Who::Admin, Endpoint::Install, &[&iccid], "", String::new(), None, Kind::Other);
            }
            Op::Usage { sim, mb, country, operator } => {
                let body = Json::new()
                    .number("mb", mb)
                    .string("country", country)
                    .optional("operator", operator.as_deref())
                    .finish();
                let iccid = self.id_of(sim);
                self.send_to(Who::Admin, Endpoint::Usage, &[&iccid], "", body, None, Kind::Other);
            }
            Op::Faults { upstream_pause_fails, network_read_fails } => {
                let body = Json::new()
                    .optional("upstream_pause_fails", upstream_pause_fails.as_ref())
                    .optional("network_read_fails", network_read_fails.as_ref());
                self.send_to(Who::Admin, Endpoint::SetFaults, &[], "", body.finish(), None, Kind::Other);
            }
            Op::Advance { ms } => self.advance(*ms),
            Op::Receiver { webhook, mode } => {
                if let Some(Entity::Webhook(i)) = self.entity(webhook) {
                    self.webhooks[i].mode = match *mode {
                        Receiver::Ok => Mode::Ok,
                        Receiver::Fail => Mode::Fail,
                        Receiver::FailTimes { count } => Mode::FailTimes(count),
                        Receiver::Timeout => Mode::Timeout,
                        Receiver::Hold => Mode::Hold,
                        Receiver::Down { ms } => Mode::DownUntil(self.now.plus_ms(ms)),
                    };
                }
            }
            Op::Restart { rebuild } => self.restart(*rebuild),
        }
        self.drain();
        self.journal.extend(self.service.drain_journal());
        self.log.now = self.now;
        &self.log
    }

    /// The service process stops and starts again (see [`Op::Restart`]). Connections
    /// die with it: deliveries the receivers were holding are never answered, and the
    /// restarted service hands them out again (the next `drain` answers them).
    fn restart(&mut self, rebuild: bool) {
        self.journal.extend(self.service.drain_journal());
        let rebuilt = rebuild.then(|| {
            let before = self.service.engine().state_digest();
            let header = SegmentHeader {
                version: journal::FORMAT_VERSION,
                config: self.config.clone(),
                clock: ClockMode::Virtual,
                start: Millis::VIRTUAL_EPOCH,
                first_index: 0,
            };
            let mut segment = SegmentBuffer::new(&header);
            segment.append(&self.journal);
            match journal::replay_segment(segment.bytes()) {
                Ok((mut engine, _, _)) => {
                    engine.inject_bug_for_test(self.bug);
                    let after = engine.state_digest();
                    self.service.replace_engine(engine);
                    Ok((before, after))
                }
                Err(error) => Err(error.to_string()),
            }
        });
        self.log.facts.push(Fact::Restarted { rebuild: rebuilt });
        self.held.clear();
        self.service.restart();
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

    fn advance_clock(&mut self, ms: i64) {
        if ms <= 0 {
            return;
        }
        let seconds = Decimal::new(ms, 3).normalize();
        let body = Json::new().number("seconds", &seconds).finish();
        self.send_to(Who::Admin, Endpoint::AdvanceClock, &[], "", body, None, Kind::Other);
    }

    fn who(&self, caller: &str) -> Who {
        match (caller, self.entity(caller)) {
            (_, Some(Entity::Account(i))) => Who::Account(i),
            ("admin", _) => Who::Admin,
            _ => Who::Anonymous,
        }
    }

    fn call(&mut self, caller: &str, call: &Call, idempotency_key: Option<&str>) {
        let who = self.who(caller);
        let id = |name: &String| self.id_of(name);
        use Endpoint as E;
        let none = String::new;
        // (endpoint, path parameters, query, body, facts to read)
        let (endpoint, params, query, body, kind) = match call {
            Call::Provision { bind, group, label, reference } => {
                let body = Json::new()
                    .optional("end_user_reference", reference.as_deref())
                    .optional("label", label.as_deref())
                    .optional("group_id", group.as_ref().map(id).as_deref());
                (E::ProvisionEsim, vec![], none(), body.finish_or_empty(), Kind::Provision { bind: bind.clone() })
            }
            Call::List { status, limit, offset } => {
                let query = query(&[("status", status.clone()), ("limit", num(limit)), ("offset", num(offset))]);
                (E::ListEsims, vec![], query, none(), Kind::Other)
            }
            Call::Get { sim } => (E::GetEsim, vec![id(sim)], none(), none(), Kind::ShowEsim),
            Call::Enable { sim } => (E::EnableEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Disable { sim } => (E::DisableEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Terminate { sim } => (E::TerminateEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Throttle { sim, speed } => {
                let body = Json::new().string("speed", speed).finish();
                (E::ThrottleEsim, vec![id(sim)], none(), body, Kind::Other)
            }
            Call::Fund { sim, amount } => {
                let body = Json::new().number("amount", amount).finish();
                (E::FundEsim, vec![id(sim)], none(), body, Kind::Fund)
            }
            Call::Defund { sim } => (E::DefundEsim, vec![id(sim)], none(), none(), Kind::Defund),
            Call::Groups => (E::ListGroups, vec![], none(), none(), Kind::Other),
            Call::CreateGroup { bind, name, threshold, refill } => {
                let body = Json::new()
                    .string("name", name)
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                (E::CreateGroup, vec![], none(), body.finish(), Kind::CreateGroup { bind: bind.clone() })
            }
            Call::GetGroup { group } => (E::GetGroup, vec![id(group)], none(), none(), Kind::ShowGroup),
            Call::UpdateGroup { group, name, threshold, refill } => {
                let body = Json::new()
                    .optional("name", name.as_deref())
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                (E::UpdateGroup, vec![id(group)], none(), body.finish(), Kind::ShowGroup)
            }
            Call::FundGroup { group, amount } => {
                let body = Json::new().number("amount", amount).finish();
                (E::FundGroup, vec![id(group)], none(), body, Kind::FundGroup)
            }
            Call::DefundGroup { group } => (E::DefundGroup, vec![id(group)], none(), none(), Kind::DefundGroup),
            Call::Members { group, limit, offset } => {
                let query = query(&[("limit", num(limit)), ("offset", num(offset))]);
                (E::ListGroupEsims, vec![id(group)], query, none(), Kind::Other)
            }
            Call::Add { group, sim } => {
                let body = Json::new().string("iccid", &id(sim)).finish();
                (E::AddGroupEsim, vec![id(group)], none(), body, Kind::Add)
            }
            Call::Remove { group, sim } => (E::RemoveGroupEsim, vec![id(group), id(sim)], none(), none(), Kind::Other),
            Call::Wallet => (E::WalletBalance, vec![], none(), none(), Kind::Wallet),
            Call::Rates { country, continent } => {
                let query = query(&[("country", country.clone()), ("continent", continent.clone())]);
                (E::Rates, vec![], query, none(), Kind::Other)
            }
            Call::AccountInfo => (E::Account, vec![], none(), none(), Kind::Other),
            Call::Webhooks => (E::ListWebhooks, vec![], none(), none(), Kind::Other),
            Call::CreateWebhook { bind, events, url } => {
                let default_url = format!("https://hooks.example.com/{}", bind.as_deref().unwrap_or("hook"));
                let body = Json::new()
                    .string("url", url.as_deref().unwrap_or(&default_url))
                    .raw("events", &serde_json::to_string(events).unwrap_or_default())
                    .finish();
                (E::CreateWebhook, vec![], none(), body, Kind::CreateWebhook { bind: bind.clone() })
            }
            Call::GetWebhook { webhook } => (E::GetWebhook, vec![id(webhook)], none(), none(), Kind::Other),
            Call::UpdateWebhook { webhook, events, active, url } => {
                let body = Json::new()
                    .optional("url", url.as_deref())
                    .optional("events", events.as_ref())
                    .optional("active", active.as_ref());
                let kind = Kind::UpdateWebhook { events: events.clone(), active: *active };
                (E::UpdateWebhook, vec![id(webhook)], none(), body.finish(), kind)
            }
            Call::DeleteWebhook { webhook } => {
                let kind = Kind::DeleteWebhook { id: id(webhook) };
                (E::DeleteWebhook, vec![id(webhook)], none(), none(), kind)
            }
            Call::TestWebhook { webhook } => (E::TestWebhook, vec![id(webhook)], none(), none(), Kind::TestWebhook),
        };
        let params: Vec<&str> = params.iter().map(String::as_str).collect();
        self.send_to(who, endpoint, &params, &query, body, idempotency_key, kind);
    }

    /// Sends a request of `endpoint` with these path parameters (percent-encoded by the
    /// endpoint table) and query (`?...` or empty).
    #[allow(clippy::too_many_arguments)]
    fn send_to(
        &mut self,
        who: Who,
        endpoint: Endpoint,
        params: &[&str],
        query: &str,
        body: String,
        idempotency_key: Option<&str>,
        kind: Kind,
    ) {
        let method = http::Method::from_bytes(endpoint.method().as_bytes()).expect("the table's methods are valid");
        let path = endpoint.path(params) + query;
        self.send(who, method, path, body, idempotency_key, kind);
    }

    /// A request as bytes; its meaning (for the rate limit and the facts) comes from the
    /// production router itself.
    fn raw(&mut self, caller: &str, method: &str, path: &str, body: &str) {
        // `{name}` becomes the bound id (or the name itself when unbound).
        let mut full = String::with_capacity(path.len());
        let mut rest = path;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else { break };
            full.push_str(&rest[..open]);
            full.push_str(&encode(&self.id_of(&rest[open + 1..open + close])));
            rest = &rest[open + close + 1..];
        }
        full.push_str(rest);
        if !(full.starts_with("/admin") || full.starts_with("/sandbox") || full.starts_with("/api")) {
            full = format!("{RESELLER_BASE}{full}");
        }
        let method = http::Method::from_bytes(method.as_bytes()).unwrap_or(http::Method::GET);
        let who = self.who(caller);
        self.send(who, method, full, body.to_string(), None, Kind::Raw);
    }

    /// Sends one request and records the exchange (and its facts).
    fn send(
        &mut self,
        who: Who,
        method: http::Method,
        path: String,
        body: String,
        idempotency_key: Option<&str>,
        kind: Kind,
    ) {
        let body = Bytes::from(body);
        let (key, key_valid) = match who {
            Who::Account(i) => (Some(self.accounts[i].key), !self.accounts[i].revoked),
            _ => (None, false),
        };
        let mut builder = http::Request::builder().method(method.clone()).uri(path.as_str());
        match who {
            Who::Account(i) => {
                builder =
                    builder.header("authorization", format!("Bearer {}", self.keys[self.accounts[i].key as usize]))
            }
            Who::Admin => builder = builder.header("authorization", format!("Bearer {ADMIN_TOKEN}")),
            Who::Anonymous => {}
        }
        if !body.is_empty() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(key) = idempotency_key {
            builder = builder.header("idempotency-key", key);
        }
        let now = self.now;
        let request = match builder.body(body.clone()) {
            Ok(request) => request,
            Err(error) => {
                // Not even a valid HTTP request (a script's bad path): nothing was sent.
                self.log.exchanges.push(Exchange {
                    method,
                    path,
                    request_body: body,
                    key,
                    key_valid,
                    engine_bound: false,
                    read: true,
                    idempotency: Idempotency::None,
                    status: 0,
                    rate_limited: false,
                    body: Bytes::from(format!("not sent: {error}")),
                    retry_after: None,
                    at: now,
                });
                return;
            }
        };
        // Raw requests are classified by the router; the world's own are well-formed.
        let (engine_bound, read, kind) = match kind {
            Kind::Raw => classify(&request),
            kind => (path.starts_with(RESELLER_BASE), method == http::Method::GET, kind),
        };
        let account = match who {
            Who::Account(i) => Some(self.accounts[i].engine),
            _ => None,
        };
        // A request the router refuses (its shape: JSON, a missing field, an amount with
        // more than 2 decimals) never reaches the engine's idempotency store.
        let reaches_engine = idempotency_key.is_some()
            && matches!(esim_transport::api::route(&request, ADMIN_TOKEN, None), Routed::Engine(_));
        let idempotency = match (idempotency_key, account) {
            (Some(idem), Some(account)) if key_valid && engine_bound && reaches_engine && !read => {
                match self.idempotency.get(&(account, idem.to_string())) {
                    Some(stored) if now.0 < stored.at.0 + IDEMPOTENCY_TTL_MS => {
                        if stored.request == (method.clone(), path.clone(), body.clone()) {
                            Idempotency::Replay { status: stored.status, body: stored.body.clone() }
                        } else {
                            Idempotency::Conflict
                        }
                    }
                    _ => Idempotency::Fresh,
                }
            }
            _ => Idempotency::None,
        };
        let response = match self.service.handle(now, &request) {
            Outcome::Respond(response) => response,
            Outcome::AwaitDelivery(delivery_id) => self.process_effects(Some(delivery_id)).unwrap_or_else(|| {
                esim_transport::api::json_response(500, "{\"error\":\"the test delivery never came\"}")
            }),
        };
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let response_body = response.into_body();
        let rate_limited = status == 429 && retry_after.is_some();
        self.stats.requests += 1;
        if rate_limited {
            self.stats.rate_limited += 1;
        }
        if let (Idempotency::Fresh, Some(account), Some(idem)) = (&idempotency, account, idempotency_key) {
            // Only final answers are kept: never a 5xx (an upstream 502 is worth a retry).
            let storable = status != 401 && status < 500 && !rate_limited && !matches!(kind, Kind::TestWebhook);
            if storable {
                let stored = Stored {
                    request: (method.clone(), path.clone(), body.clone()),
                    status,
                    body: response_body.clone(),
                    at: now,
                };
                self.idempotency.insert((account, idem.to_string()), stored);
            }
        }
        let fresh = matches!(idempotency, Idempotency::None | Idempotency::Fresh);
        if fresh && (200..300).contains(&status) {
            self.observe(who, &kind, &response_body);
        }
        self.log.exchanges.push(Exchange {
            method,
            path,
            request_body: body,
            key,
            key_valid,
            engine_bound,
            read,
            idempotency,
            status,
            rate_limited,
            body: response_body,
            retry_after,
            at: now,
        });
        self.now = self.service.now(Millis(0));
    }

    /// Reads the facts out of a successful, freshly executed response.
    fn observe(&mut self, who: Who, kind: &Kind, body: &Bytes) {
        if matches!(kind, Kind::TestWebhook | Kind::Raw | Kind::Other) {
            return;
        }
        let Ok(fields) = serde_json::from_slice::<Fields>(body) else { return };
        let account = match who {
            Who::Account(i) => Some(self.accounts[i].engine),
            _ => None,
        };
        let caller = match who {
            Who::Account(i) => Some(i),
            _ => None,
        };
        let text = |field: &str| fields.text(field);
        let money = |field: &str| fields.money(field);
        match kind {
            Kind::Provision { bind } => {
                let (Some(iccid), Some(owner), Some(account)) = (text("iccid"), caller, account) else { return };
                let engine = self.engine();
                let Some(sim) = engine.esims().iter().rposition(|e| e.iccid == iccid) else { return };
                let name = bind.clone().unwrap_or_else(|| iccid.clone());
                self.bind(&name, iccid.clone(), Entity::Sim(self.sims.len()));
                self.sims.push(SimRec { name, iccid, engine: sim as u32, owner });
                self.log.facts.push(Fact::Provisioned { account, sim: sim as u32 });
            }
            Kind::Fund => {
                let (Some(account), Some(sim), Some(amount), Some(shown)) =
                    (account, self.sim_by_id(text("iccid")), money("funded_usd"), money("wallet_balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::EsimFunded { account, sim, amount, shown });
            }
            Kind::Defund | Kind::Add => {
                let (Some(account), Some(sim)) = (account, self.sim_by_id(text("iccid"))) else { return };
                if let Some(estimate) = money("estimated_return_usd") {
                    self.log.facts.push(Fact::ReturnRequested {
                        account,
                        owner: WalletOwner::Sim(EsimIx(sim)),
                        estimate,
                    });
                }
            }
            Kind::FundGroup => {
                let (Some(account), Some(group), Some(amount), Some(shown)) =
                    (account, self.group_by_id(text("group_id")), money("funded_usd"), money("balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::GroupFunded { account, group, amount, shown });
            }
            Kind::DefundGroup => {
                let (Some(account), Some(group), Some(estimate)) =
                    (account, self.group_by_id(text("group_id")), money("estimated_return_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::ReturnRequested {
                    account,
                    owner: WalletOwner::Group(GroupIx(group)),
                    estimate,
                });
            }
            Kind::CreateGroup { bind } => {
                let (Some(id), Some(owner)) = (text("id"), caller) else { return };
                let Some(group) = self.engine().groups().iter().rposition(|g| g.id == id) else { return };
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Group(self.groups.len()));
                self.groups.push(GroupRec { name, id, engine: group as u32, owner });
            }
            Kind::ShowGroup => {
                if let (Some(group), Some(shown)) = (self.group_by_id(text("id")), money("balance_usd")) {
                    self.log.facts.push(Fact::GroupShown { group, shown });
                }
            }
            Kind::ShowEsim => {
                if let (Some(sim), Some(shown)) = (self.sim_by_id(text("iccid")), money("wallet_balance_usd")) {
                    self.log.facts.push(Fact::EsimShown { sim, shown });
                }
            }
            Kind::Wallet => {
                if let (Some(account), Some(balance), Some(lifetime_topup), Some(lifetime_usage)) =
                    (account, money("balance_usd"), money("lifetime_topup_usd"), money("lifetime_usage_usd"))
                {
                    self.log.facts.push(Fact::WalletShown { account, balance, lifetime_topup, lifetime_usage });
                }
            }
            Kind::CreateWebhook { bind } => {
                let (Some(id), Some(owner), Some(account)) = (text("id"), caller, account) else { return };
                let Some(webhook) = self.engine().webhooks().iter().rposition(|w| w.id == id) else { return };
                let events = fields.events.clone();
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Webhook(self.webhooks.len()));
                self.webhooks.push(WebhookRec {
                    name,
                    id,
                    engine: webhook as u32,
                    owner,
                    mode: Mode::Ok,
                    deleted: false,
                });
                let webhook = webhook as u32;
                self.log.facts.push(Fact::WebhookSet { webhook, account, events, active: Some(true), deleted: false });
            }
            Kind::UpdateWebhook { events, active } => {
                let (Some(Entity::Webhook(i)), Some(account)) =
                    (text("id").and_then(|id| self.ids.get(&id).copied()), account)
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::WebhookSet {
                    webhook,
                    account,
                    events: events.clone(),
                    active: *active,
                    deleted: false,
                });
            }
            Kind::DeleteWebhook { id } => {
                let (Some(Entity::Webhook(i)), Some(account)) = (self.ids.get(id).copied(), account) else { return };
                self.webhooks[i].deleted = true;
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::WebhookSet { webhook, account, events: None, active: None, deleted: true });
            }
            Kind::CreateAccount { bind } => {
                let (Some(id), Some(key)) = (text("account_id"), text("api_key")) else { return };
                let Some(engine) = self.engine().accounts().iter().rposition(|a| a.id == id) else { return };
                let key_number = self.keys.len() as u32;
                self.keys.push(key);
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Account(self.accounts.len()));
                self.accounts.push(AccountRec { name, id, engine: engine as u32, key: key_number, revoked: false });
            }
            Kind::TopUp { account_id } => {
                if let (Some(Entity::Account(i)), Some(amount)) = (self.ids.get(account_id), money("amount_usd")) {
                    let account = self.accounts[*i].engine;
                    self.log.facts.push(Fact::TopUp { account, amount });
                }
            }
            Kind::NewKey { account_id } => {
                if let (Some(&Entity::Account(i)), Some(key)) = (self.ids.get(account_id), text("api_key")) {
                    self.accounts[i].key = self.keys.len() as u32;
                    self.accounts[i].revoked = false;
                    self.keys.push(key);
                }
            }
            Kind::Revoke { key } => {
                for account in self.accounts.iter_mut().filter(|a| &self.keys[a.key as usize] == key) {
                    account.revoked = true;
                }
            }
            Kind::TestWebhook | Kind::Raw | Kind::Other => {}
        }
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

    // ----- outputs of the service: events and deliveries -----

    /// Drains events and deliveries after an op, and lets the receivers answer.
    fn drain(&mut self) {
        for _ in 0..MAX_DRAIN_ROUNDS {
            let before = (self.log.events.len(), self.log.deliveries.len());
            if let Some(event) = self.service.poll_event() {
                // Receivers answer after this, so these are the flags at emission.
                let flags = self.service.engine().webhooks().iter().map(|w| w.active && !w.deleted).collect();
                self.log.webhooks_active.push((self.log.events.len(), flags));
                self.stats.events += 1;
                self.log.events.push(event);
            }
            while let Some(event) = self.service.poll_event() {
                self.stats.events += 1;
                self.log.events.push(event);
            }
            self.process_effects(None);
            self.answer_held();
            if (self.log.events.len(), self.log.deliveries.len()) == before {
                break;
            }
        }
    }

    fn webhook_rec(&self, webhook_id: &str) -> Option<usize> {
        match self.ids.get(webhook_id) {
            Some(Entity::Webhook(i)) => Some(*i),
            _ => None,
        }
    }

    fn webhook_engine(&self, webhook_id: &str) -> Option<u32> {
        self.webhook_rec(webhook_id).map(|i| self.webhooks[i].engine)
    }

    fn answer_for(&mut self, webhook_id: &str, test: bool) -> Option<DeliveryResult> {
        let rec = self.webhook_rec(webhook_id);
        let mode = rec.map_or(Mode::Ok, |i| self.webhooks[i].mode);
        match mode {
            Mode::Ok | Mode::FailTimes(0) => Some(DeliveryResult::Status(200)),
            Mode::Fail => Some(DeliveryResult::Status(500)),
            Mode::FailTimes(left) => {
                if let Some(i) = rec {
                    self.webhooks[i].mode = Mode::FailTimes(left - 1);
                }
                Some(DeliveryResult::Status(500))
            }
            Mode::Timeout => Some(DeliveryResult::Timeout),
            Mode::Hold if test => Some(DeliveryResult::Timeout),
            Mode::Hold => None,
            Mode::DownUntil(until) if self.now < until => Some(DeliveryResult::Failed("connection refused".into())),
            Mode::DownUntil(_) => Some(DeliveryResult::Status(200)),
        }
    }

    /// Takes every delivery the engine handed out; answers it now unless its receiver
    /// holds it. Returns the answer to the test delivery `test`, if it was among them.
    fn process_effects(&mut self, test: Option<u64>) -> Option<http::Response<Bytes>> {
        let mut test_response = None;
        while let Some(effect) = self.service.poll_effect() {
            let Effect::Deliver(delivery) = effect;
            self.stats.deliveries += 1;
            let is_test = test == Some(delivery.delivery_id);
            let answer = self.answer_for(&delivery.webhook_id, is_test);
            let response = match &answer {
                Some(result) => Some(self.service.delivery_outcome(self.now, delivery.delivery_id, result.clone())),
                None => None,
            };
            if is_test {
                test_response = response;
            }
            if answer.as_ref().is_some_and(DeliveryResult::is_success) {
                self.stats.deliveries_ok += 1;
            }
            let record = DeliveryRecord {
                delivery_id: delivery.delivery_id,
                webhook: self.webhook_engine(&delivery.webhook_id),
                webhook_id: delivery.webhook_id.clone(),
                event_id: delivery.event_id.clone(),
                event: delivery.event,
                attempt: delivery.attempt,
                handed_out: true,
                answer: answer.clone(),
                body: delivery.body.clone(),
            };
            self.log.deliveries.push(record);
            if answer.is_none() {
                self.held.push(delivery);
            }
        }
        test_response
    }

    /// Held deliveries whose receiver stopped holding are answered now.
    fn answer_held(&mut self) {
        let held = std::mem::take(&mut self.held);
        // Receivers that stopped holding answer in the order they received.
        for delivery in held {
            match self.answer_for(&delivery.webhook_id, false) {
                None => self.held.push(delivery),
                Some(result) => {
                    let _ = self.service.delivery_outcome(self.now, delivery.delivery_id, result.clone());
                    if result.is_success() {
                        self.stats.deliveries_ok += 1;
                    }
                    self.log.deliveries.push(DeliveryRecord {
                        delivery_id: delivery.delivery_id,
                        webhook: self.webhook_engine(&delivery.webhook_id),
                        webhook_id: delivery.webhook_id,
                        event_id: delivery.event_id,
                        event: delivery.event,
                        attempt: delivery.attempt,
                        handed_out: false,
                        answer: Some(result),
                        body: delivery.body,
                    });
                }
            }
        }
    }
}

/// The script verb whose requests reach each endpoint, or `None` (with the reason) for
/// an endpoint the simulation never sends. An exhaustive match: a new endpoint does not
/// compile until the simulation says how it reaches it, and a test checks that the
/// generated worlds do send every one named here.
pub fn reached_by(endpoint: Endpoint) -> Option<&'static str> {
    use Endpoint as E;
    Some(match endpoint {
        E::ProvisionEsim => "provision",
        E::ListEsims => "list",
        E::GetEsim => "get",
        E::EnableEsim => "enable",
        E::DisableEsim => "disable",
        E::TerminateEsim => "terminate",
        E::ThrottleEsim => "throttle",
        E::FundEsim => "fund",
        E::DefundEsim => "defund",
        E::ListGroups => "groups",
        E::CreateGroup => "group",
        E::GetGroup => "getgroup",
        E::UpdateGroup => "patchgroup",
        E::FundGroup => "fundgroup",
        E::DefundGroup => "defundgroup",
        E::ListGroupEsims => "members",
        E::AddGroupEsim => "add",
        E::RemoveGroupEsim => "remove",
        E::WalletBalance => "wallet",
        E::Rates => "rates",
        E::Account => "accountinfo",
        E::ListWebhooks => "webhooks",
        E::CreateWebhook => "webhook",
        E::GetWebhook => "getwebhook",
        E::UpdateWebhook => "putwebhook",
        E::DeleteWebhook => "deletewebhook",
        E::TestWebhook => "testwebhook",
        E::CreateAccount => "account",
        E::TopUp => "topup",
        E::CreateKey => "newkey",
        E::RevokeKey => "revoke",
        E::Freeze => "freeze",
        E::SetAutoRefill => "autorefill",
        E::SetLimits => "limits",
        E::SetInventory => "inventory",
        E::Install => "install",
        E::Usage => "usage",
        E::SetFaults => "faults",
        E::AdvanceClock => "advance",
        // Reads of no state the checkers follow: the document is static, the clock and
        // the state digest are read from the engine directly, and the conservation
        // report is checked on the engine's own report after every step.
        E::OpenApi | E::Clock | E::State | E::ConservationReport => return None,
    })
}

/// What the production router makes of a request: (reaches the engine as a reseller
/// command, is a read, the facts to read from its response).
fn classify(request: &http::Request<Bytes>) -> (bool, bool, Kind) {
    match esim_transport::api::route(request, ADMIN_TOKEN, None) {
        Routed::Engine(Command::Reseller(reseller)) => {
            let read = reseller.op.is_read();
            let kind = match reseller.op {
                ResellerOp::Provision { .. } => Kind::Provision { bind: None },
                ResellerOp::Fund { .. } => Kind::Fund,
                ResellerOp::Defund { .. } => Kind::Defund,
                ResellerOp::AddGroupEsim { .. } => Kind::Add,
                ResellerOp::FundGroup { .. } => Kind::FundGroup,
                ResellerOp::DefundGroup { .. } => Kind::DefundGroup,
                ResellerOp::CreateGroup { .. } => Kind::CreateGroup { bind: None },
                ResellerOp::GetGroup { .. } | ResellerOp::UpdateGroup { .. } => Kind::ShowGroup,
                ResellerOp::GetEsim { .. } => Kind::ShowEsim,
                ResellerOp::WalletBalance => Kind::Wallet,
                ResellerOp::CreateWebhook { .. } => Kind::CreateWebhook { bind: None },
                ResellerOp::UpdateWebhook { events, active, .. } => Kind::UpdateWebhook { events, active },
                ResellerOp::DeleteWebhook { webhook_id } => Kind::DeleteWebhook { id: webhook_id },
                ResellerOp::TestWebhook { .. } => Kind::TestWebhook,
                _ => Kind::Other,
            };
            (true, read, kind)
        }
        Routed::Engine(Command::Admin(op)) => {
            let kind = match op {
                AdminOp::CreateAccount { .. } => Kind::CreateAccount { bind: None },
                AdminOp::TopUp { account_id, .. } => Kind::TopUp { account_id },
                AdminOp::CreateKey { account_id, .. } => Kind::NewKey { account_id },
                // The command holds only the key's digest; the key is the path's last segment.
                AdminOp::RevokeKey { .. } => Kind::Revoke {
                    key: esim_transport::api::percent_decode(request.uri().path().rsplit('/').next().unwrap_or("")),
                },
                _ => Kind::Other,
            };
            (false, false, kind)
        }
        // Refused by the transport after the key check: counted by the rate limit, but
        // never reaches the idempotency store (treated as a read).
        Routed::Reject(_) if esim_transport::routes::api_of_path(request.uri().path()) == Some(Api::Reseller) => {
            (true, true, Kind::Other)
        }
        _ => (false, request.method() == http::Method::GET, Kind::Other),
    }
}

/// The response fields the world reads; everything else is skipped, not parsed.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Fields {
    id: Option<String>,
    iccid: Option<String>,
    group_id: Option<String>,
    account_id: Option<String>,
    api_key: Option<String>,
    events: Option<Vec<String>>,
    funded_usd: Option<serde_json::Number>,
    wallet_balance_usd: Option<serde_json::Number>,
    balance_usd: Option<serde_json::Number>,
    estimated_return_usd: Option<serde_json::Number>,
    lifetime_topup_usd: Option<serde_json::Number>,
    lifetime_usage_usd: Option<serde_json::Number>,
    amount_usd: Option<serde_json::Number>,
}

impl Fields {
    fn text(&self, name: &str) -> Option<String> {
        match name {
            "id" => self.id.clone(),
            "iccid" => self.iccid.clone(),
            "group_id" => self.group_id.clone(),
            "account_id" => self.account_id.clone(),
            "api_key" => self.api_key.clone(),
            _ => None,
        }
    }

    fn money(&self, name: &str) -> Option<Decimal> {
        let number = match name {
            "funded_usd" => &self.funded_usd,
            "wallet_balance_usd" => &self.wallet_balance_usd,
            "balance_usd" => &self.balance_usd,
            "estimated_return_usd" => &self.estimated_return_usd,
            "lifetime_topup_usd" => &self.lifetime_topup_usd,
            "lifetime_usage_usd" => &self.lifetime_usage_usd,
            "amount_usd" => &self.amount_usd,
            _ => return None,
        };
        decimal(&Value::Number(number.clone()?))
    }
}

/// A JSON number or string as a decimal (exact: numbers keep their digits).
pub fn decimal(value: &Value) -> Option<Decimal> {
    let text = match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        _ => return None,
    };
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}

fn num(value: &Option<u64>) -> Option<String> {
    value.map(|v| v.to_string())
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> =
        pairs.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v)))).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// A small JSON object writer: numbers are written with their exact decimal digits.
struct Json(String);

/// A value as JSON text in a request body the world writes.
trait JsonText {
    fn json_text(&self) -> String;
}

impl JsonText for Decimal {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for bool {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for u32 {
    fn json_text(&self) -> String {
        self.to_string()
    }
}

impl JsonText for str {
    fn json_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "\"\"".to_string())
    }
}

impl JsonText for Vec<String> {
    fn json_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Json {
    fn new() -> Json {
        Json(String::from("{"))
    }

    fn raw(mut self, key: &str, value: &str) -> Json {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&format!("\"{key}\":{value}"));
        self
    }

    fn number(self, key: &str, value: &Decimal) -> Json {
        self.raw(key, &value.json_text())
    }

    fn string(self, key: &str, value: &str) -> Json {
        self.raw(key, &value.json_text())
    }

    /// Adds the field only when it has a value (an optional field stays absent).
    fn optional<T: JsonText + ?Sized>(self, key: &str, value: Option<&T>) -> Json {
        match value {
            Some(value) => self.raw(key, &value.json_text()),
            None => self,
        }
    }

    fn finish(mut self) -> String {
        self.0.push('}');
        self.0
    }

    /// An empty body when no field was set (optional bodies may be absent).
    fn finish_or_empty(self) -> String {
        if self.0.len() == 1 {
            String::new()
        } else {
            self.finish()
        }
    }
}
