//! The engine at scale: one service grown to a million eSIMs, measured on the way.
//!
//! `cargo bench --bench scale` (figures in README.md, "Scale benchmark"). A load
//! program, not criterion: the state it measures takes minutes to grow, so it is grown
//! once and measured at checkpoints of 10 k, 100 k and 1 M eSIMs (those up to
//! `SCALE_MAX_ESIMS`, default 1,000,000; `SCALE_MAX_ESIMS=100000` is a quick run).
//!
//! The engine is driven as production drives it: commands through
//! [`Service::apply_command`] (journal entry, engine), journal entries drained every
//! [`GROUP`] commands as the owner task drains them per group commit, events and effects
//! drained after every command; the mix also hashes each bearer key and admits it
//! through the transport's [`Admission`] as a connection task does. Snapshots and
//! recovery go through `esim_http::journal` ([`FileJournal`], [`recover`]) as
//! `esim serve` and `esim replay` do.
//!
//! Growth: `SCALE_MAX_ESIMS / 100` accounts (10,000 at full scale), each topped up;
//! eSIM number `i` in growth order is provisioned
//! - into a group when `i % 10 == 0` (a tenth of them, in groups of 500, each group of
//!   its own account and funded with 5,000 USD),
//! - for account 0, the large reseller, when `i % 20 == 1` (5 % of all eSIMs),
//! - for the other accounts in turn otherwise;
//!
//! installed (except `i % 50 == 7`, left pending), funded with 20 USD when `i % 10 == 3`
//! (a tenth: 100,000 funded wallets at full scale), labelled every other one; and every
//! fifth step 1 MB of usage flows on a funded or grouped eSIM. Service time moves 50 ms
//! per growth command, so report timers fire on sync cycles during growth.
//!
//! At each checkpoint:
//! - memory per eSIM: live heap bytes counted by this binary's global allocator
//!   ([`Counting`]) after growth, minus those before the service existed and minus the
//!   bench's own index lists, divided by the eSIMs; the process RSS (`/proc/self/statm`)
//!   beside it;
//! - p50, p99 and max of each command kind, timed around `Service::apply_command` alone
//!   (in-engine: journal entry and engine, no HTTP, no admission), `SCALE_SAMPLES` of
//!   each (default 2,000) on random targets, and the journal bytes per command of each
//!   kind (the record as `FileJournal` writes it: 8 bytes of length and CRC, then JSON);
//! - list pages at the largest offsets: the large reseller's last page of eSIMs
//!   (unfiltered and filtered by status), its account record, a full group's last page;
//! - the fund / usage / read mix of `benches/engine.rs` (admission and the connection's
//!   key memo included) over the funded wallets: commands per second, median of batches,
//!   beside the same mix on a fresh engine of 10,000 eSIMs whose batches alternate with
//!   these (the ratio of the two medians is the "within 20 % of 10 k"); then the
//!   same mix over the reference's wallets only (1,000: the same working set at both
//!   sizes), again beside the reference, which separates what the size of the state
//!   costs from what touching ten times as many wallets costs;
//! - a sync cycle reporting usage for every funded wallet (and every group): the time
//!   of the request that fires it;
//! - a clock advance across an hour with one pending report timer per funded wallet
//!   (due over 15 minutes): as one advance of an hour, and as 60 one-minute steps
//!   (the longest step is the longest stall a request sees);
//! - a snapshot: its size, the time to encode it (the server encodes it on its owner
//!   task: every request waits that long) and the time to clone the engine (what a
//!   copy-then-encode-elsewhere design would stall for); then recovery from the
//!   snapshot plus a tail of `SCALE_TAIL` journaled commands (default 100,000), checked
//!   to rebuild the exact state digest.
//!
//! After the last checkpoint: service time jumps 31 days, so every event of the growth
//! is past the events API's 30-day window (decision 113): the time of the next command
//! that keeps an event (which lets expired ones go, a few per new event) and the memory
//! per eSIM then.

use esim_engine::{
    AdminOp, Command, Engine, EngineConfig, KeyDigest, Millis, Reply, ResellerOp, ResellerRequest, Response, SandboxOp,
};
use esim_http::admission::{Admission, KeyMemo};
use esim_http::journal::{recover, FileJournal, RecoverOptions, SegmentHeader, SnapshotPolicy};
use esim_http::secrets::Secrets;
use esim_http::server::JournalSink;
use esim_http::{ClockMode, JournalEntry, Service};
use rust_decimal::Decimal;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts the bytes live on the heap (requested sizes), to measure memory per eSIM
/// without the allocator's own slack or the RSS of freed pages.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        pointer
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        pointer
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) };
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed) as i64
}

/// Resident set size of the process, from `/proc/self/statm` (0 where unreadable).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1).and_then(|pages| pages.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

/// Commands per journal drain (the owner task drains once per group commit).
const GROUP: usize = 32;
/// Service time per growth command.
const GROWTH_STEP_MS: i64 = 50;
/// Service time per command of the mix (as in `benches/engine.rs`).
const MIX_STEP_MS: i64 = 60;
/// Members of a full group (the spec's default limit).
const GROUP_SIZE: usize = 500;
/// Commands of one measured batch of the mix (a multiple of 3).
const MIX_BATCH: usize = 30_000;
/// Batches of the mix at each checkpoint (the median is reported).
const MIX_BATCHES: usize = 11;
/// The size the mix is compared with (the "speed at 10 k").
const MIX_REFERENCE_ESIMS: usize = 10_000;
/// Repeats of each list page (the median and the longest are reported).
const PAGE_REPEATS: usize = 51;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.replace('_', "").parse().ok()).unwrap_or(default)
}

struct Account {
    /// The bearer key (the mix takes its digest from the account's connection memo, as
    /// a connection task does).
    key: String,
    digest: KeyDigest,
    /// The account's keep-alive connection: its key is hashed on its first call.
    memo: KeyMemo,
}

/// Per command kind: durations, failures, journal entries and bytes.
#[derive(Default)]
struct KindStats {
    nanos: Vec<u64>,
    failed: usize,
    entries: usize,
    journal_bytes: usize,
}

/// What one checkpoint measured (for the summary).
#[derive(Default)]
struct Checkpoint {
    esims: usize,
    bytes_per_esim: f64,
    rss_per_esim: f64,
    worst_p99: (String, f64),
    /// The mix, in batches as the owner task applies them.
    mix_per_second: f64,
    /// The mix on a fresh engine of [`MIX_REFERENCE_ESIMS`], in batches alternating with
    /// those of `mix_per_second`.
    mix_reference_per_second: f64,
    /// The mix over the reference's number of wallets (the same working set at both
    /// sizes: what the size of the state alone costs), and on the reference again, in
    /// alternate batches.
    same_wallets: usize,
    same_wallets_per_second: f64,
    same_wallets_reference_per_second: f64,
    /// The longest command or append while a snapshot was made.
    snapshot_stall_ms: f64,
    /// Encoding the whole state (what the owner task used to do).
    encode_ms: f64,
    /// How long the background snapshot took.
    snapshot_s: f64,
    recovery_s: f64,
    longest_page_us: f64,
}

impl Checkpoint {
    /// The mix here against the mix at [`MIX_REFERENCE_ESIMS`] in the same minutes.
    fn mix_ratio(&self) -> f64 {
        self.mix_per_second / self.mix_reference_per_second.max(1.0)
    }

    /// The mix over as many wallets as the reference's against the reference.
    fn same_wallets_ratio(&self) -> f64 {
        self.same_wallets_per_second / self.same_wallets_reference_per_second.max(1.0)
    }
}

struct Scale {
    service: Service,
    admission: Arc<Admission>,
    now: Millis,
    accounts: Vec<Account>,
    /// Group ids, with their account.
    groups: Vec<(String, u32)>,
    /// Standalone eSIMs funded and with nothing on its way (engine indexes).
    funded: Vec<u32>,
    /// Standalone installed eSIMs never funded and not terminated.
    plain: Vec<u32>,
    /// Group members.
    members: Vec<u32>,
    /// eSIMs provisioned by growth so far (the growth order number of the next one).
    grown: usize,
    rng: u64,
    since_drain: usize,
    /// Journal entries drained so far (the index a snapshot covers).
    journaled: u64,
    /// Batches of the mix to measure ([`MIX_BATCHES`]; at the last checkpoint
    /// `SCALE_MIX_BATCHES`, for profiling).
    mix_batches: usize,
}

impl Scale {
    fn new(accounts: usize) -> Scale {
        let config = EngineConfig { seed: 7, initial_inventory: u64::MAX / 4, ..EngineConfig::default() };
        let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
        let service = Service::new(engine, "scale-admin".into(), ClockMode::Virtual, Secrets::seeded(7));
        let admission = service.admission();
        let mut scale = Scale {
            service,
            admission,
            now: Millis::VIRTUAL_EPOCH,
            accounts: Vec::with_capacity(accounts),
            groups: Vec::new(),
            funded: Vec::new(),
            plain: Vec::new(),
            members: Vec::new(),
            grown: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            since_drain: 0,
            journaled: 0,
            mix_batches: MIX_BATCHES,
        };
        for n in 0..accounts {
            let create = AdminOp::CreateAccount {
                contact_email: format!("reseller{n}@scale.example"),
                company_name: Some(format!("Reseller {n}")),
                api_key_digest: KeyDigest::default(),
                api_key_prefix: String::new(),
            };
            let Ok(Reply::AccountCreated(created)) = scale.apply(Command::Admin(create)) else {
                panic!("account creation failed")
            };
            // The large reseller spends about 2 USD per eSIM it holds: more top-ups.
            for _ in 0..if n == 0 { 4 } else { 1 } {
                let top_up =
                    AdminOp::TopUp { account_id: created.account_id.clone(), amount_usd: Decimal::from(1_000_000) };
                scale.apply(Command::Admin(top_up)).expect("top-up");
            }
            let digest = KeyDigest::of(&created.api_key);
            scale.accounts.push(Account { key: created.api_key, digest, memo: KeyMemo::default() });
        }
        scale
    }

    fn random(&mut self) -> usize {
        // xorshift64*: deterministic targets, no dependency.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 16) as usize
    }

    /// A random eSIM of one of the bench's lists.
    fn pick(&mut self, list: fn(&Scale) -> &Vec<u32>) -> u32 {
        let at = self.random() % list(self).len();
        list(self)[at]
    }

    fn engine(&self) -> &Engine {
        self.service.engine()
    }

    fn iccid(&self, sim: u32) -> String {
        self.engine().esims()[sim as usize].iccid.to_string()
    }

    fn owner(&self, sim: u32) -> u32 {
        self.engine().esims()[sim as usize].account.0
    }

    fn reseller(&self, account: u32, op: ResellerOp) -> Command {
        Command::Reseller(ResellerRequest {
            key_digest: self.accounts[account as usize].digest,
            idempotency_key: None,
            op,
        })
    }

    /// A reseller command of the eSIM's own account about it.
    fn on_sim(&self, sim: u32, op: impl FnOnce(String) -> ResellerOp) -> Command {
        self.reseller(self.owner(sim), op(self.iccid(sim)))
    }

    fn usage(&self, sim: u32) -> Command {
        Command::Sandbox(SandboxOp::Usage {
            iccid: self.iccid(sim),
            mb: Decimal::ONE,
            country: "DE".into(),
            operator: None,
        })
    }

    /// Drains what the owner task drains after each command (the journal per group).
    fn after_command(&mut self) {
        while self.service.poll_event().is_some() {}
        while self.service.poll_effect().is_some() {}
        self.since_drain += 1;
        if self.since_drain >= GROUP {
            self.drain_journal();
        }
    }

    fn drain_journal(&mut self) -> Vec<JournalEntry> {
        self.since_drain = 0;
        let entries = self.service.drain_journal();
        self.journaled += entries.len() as u64;
        entries
    }

    fn apply(&mut self, command: Command) -> Response {
        let response = self.service.apply_command(self.now, command);
        self.after_command();
        response
    }

    fn apply_at(&mut self, at: Millis, command: Command) -> Response {
        self.now = self.now.max(at);
        self.apply(command)
    }

    // ----- growth -----

    fn grow_to(&mut self, target: usize) {
        while self.engine().esims().len() < target {
            self.grow_one();
        }
        self.drain_journal();
    }

    fn new_group(&mut self, number: usize) {
        let others = self.accounts.len() as u32 - 1;
        let account = 1 + (number as u32).wrapping_mul(7_919) % others;
        let create = ResellerOp::CreateGroup {
            name: format!("fleet {number}"),
            low_balance_threshold_usd: None,
            refill_amount_usd: None,
        };
        let Ok(Reply::GroupCreated(group)) = self.apply(self.reseller(account, create)) else {
            panic!("group creation failed")
        };
        let fund = ResellerOp::FundGroup { group_id: group.id.clone(), amount: Decimal::from(5_000) };
        self.apply(self.reseller(account, fund)).expect("group fund");
        self.groups.push((group.id, account));
    }

    fn grow_one(&mut self) {
        let i = self.grown;
        self.grown += 1;
        self.now = self.now.plus_ms(GROWTH_STEP_MS);
        let others = self.accounts.len() - 1;
        let (account, group) = if i.is_multiple_of(10) {
            let number = i / 10 / GROUP_SIZE;
            if number >= self.groups.len() {
                self.new_group(number);
            }
            (self.groups[number].1, Some(self.groups[number].0.clone()))
        } else if i % 20 == 1 {
            (0, None)
        } else {
            (1 + (i % others) as u32, None)
        };
        let grouped = group.is_some();
        let label = i.is_multiple_of(2).then(|| format!("customer-{i}"));
        let provision = ResellerOp::Provision { end_user_reference: None, label, group_id: group };
        let Ok(Reply::Provisioned(provisioned)) = self.apply(self.reseller(account, provision)) else {
            panic!("provisioning failed")
        };
        let sim = self.engine().esims().len() as u32 - 1;
        let installed = i % 50 != 7;
        if installed {
            let install = SandboxOp::Install { iccid: provisioned.iccid.clone() };
            self.apply(Command::Sandbox(install)).expect("install");
        }
        if grouped {
            self.members.push(sim);
        } else if i % 10 == 3 {
            let fund = ResellerOp::Fund { iccid: provisioned.iccid, amount: Decimal::from(20) };
            self.apply(self.reseller(account, fund)).expect("fund");
            self.funded.push(sim);
        } else if installed {
            self.plain.push(sim);
        }
        if i % 5 == 4 {
            let funded = self.random().is_multiple_of(2) && !self.funded.is_empty();
            if funded || !self.members.is_empty() {
                let sim = if funded { self.pick(|s| &s.funded) } else { self.pick(|s| &s.members) };
                let _ = self.apply(self.usage(sim));
            }
        }
    }

    // ----- measurements -----

    /// Memory of the service per eSIM: (live heap bytes, RSS bytes).
    fn memory_per_esim(&self, baseline: i64) -> (f64, f64) {
        let own = (self.funded.capacity() + self.plain.capacity() + self.members.capacity()) * 4
            + self.accounts.capacity() * std::mem::size_of::<Account>();
        let esims = self.engine().esims().len() as f64;
        ((live_bytes() - baseline - own as i64) as f64 / esims, rss_bytes() as f64 / esims)
    }

    /// Heap bytes per eSIM of the parts of the state that can be copied from outside:
    /// each copied (exact-size lists, no spare capacity), its live bytes counted, then
    /// dropped. What the total holds beyond them is the rest (the events API's log, the
    /// indexes, timers, stored answers, spare list capacity).
    fn memory_parts(&self) -> Vec<(&'static str, f64)> {
        let esims = self.engine().esims().len() as f64;
        let measure = |copy: &dyn Fn() -> Box<dyn std::any::Any>| {
            let before = live_bytes();
            let copied = copy();
            let bytes = live_bytes() - before;
            drop(copied);
            bytes as f64 / esims
        };
        let engine = self.engine();
        vec![
            ("eSIM records", measure(&|| Box::new(engine.esims().to_vec()))),
            ("ledger", measure(&|| Box::new(engine.ledger().clone()))),
            ("accounts", measure(&|| Box::new(engine.accounts().to_vec()))),
            ("groups", measure(&|| Box::new(engine.groups().to_vec()))),
        ]
    }

    /// Times one command in the engine (`Service::apply_command`), then drains.
    fn timed(
        &mut self,
        stats: &mut BTreeMap<&'static str, KindStats>,
        kind: &'static str,
        command: Command,
    ) -> Option<Reply> {
        let started = Instant::now();
        let response = self.service.apply_command(self.now, command);
        let nanos = started.elapsed().as_nanos() as u64;
        let entries = self.drain_journal();
        let record = stats.entry(kind).or_default();
        record.nanos.push(nanos);
        record.failed += usize::from(response.is_err());
        record.entries += entries.len();
        record.journal_bytes += entries.iter().map(|e| serde_json::to_vec(e).expect("entry").len() + 8).sum::<usize>();
        while self.service.poll_event().is_some() {}
        while self.service.poll_effect().is_some() {}
        response.ok()
    }

    /// Every command kind, `samples` of each, at one service time (no timer falls due
    /// inside the measurement: timers are measured on their own below).
    fn command_kinds(&mut self, samples: usize, checkpoint: usize) -> BTreeMap<&'static str, KindStats> {
        let mut stats = BTreeMap::new();
        let s = &mut stats;
        let accounts = self.accounts.len() as u32;
        let group_count = self.groups.len();
        for _ in 0..samples {
            let sim = self.random() % self.engine().esims().len();
            let command = self.on_sim(sim as u32, |iccid| ResellerOp::GetEsim { iccid });
            self.timed(s, "get_esim", command);
        }
        for (kind, op) in [
            ("list_esims", ResellerOp::ListEsims { status: None, limit: None, offset: None }),
            ("account", ResellerOp::Account),
            ("wallet_balance", ResellerOp::WalletBalance),
            ("list_groups", ResellerOp::ListGroups),
        ] {
            for _ in 0..samples {
                let account = (self.random() % accounts as usize) as u32;
                let command = self.reseller(account, op.clone());
                self.timed(s, kind, command);
            }
        }
        for _ in 0..samples {
            let at = self.random() % group_count;
            let (group_id, account) = self.groups[at].clone();
            let command = self.reseller(account, ResellerOp::GetGroup { group_id: group_id.clone() });
            self.timed(s, "get_group", command);
            let list = ResellerOp::ListGroupEsims { group_id: group_id.clone(), limit: None, offset: None };
            let command = self.reseller(account, list);
            self.timed(s, "list_group_esims", command);
            let fund = ResellerOp::FundGroup { group_id, amount: Decimal::ONE };
            let command = self.reseller(account, fund);
            self.timed(s, "fund_group", command);
        }
        let mut provisioned = Vec::with_capacity(samples);
        for _ in 0..samples {
            let account = (self.random() % accounts as usize) as u32;
            let op = ResellerOp::Provision { end_user_reference: None, label: Some("bench".into()), group_id: None };
            let command = self.reseller(account, op);
            if let Some(Reply::Provisioned(p)) = self.timed(s, "provision", command) {
                provisioned.push(p.iccid);
            }
        }
        let first_new = self.engine().esims().len() - provisioned.len();
        for (n, iccid) in provisioned.into_iter().enumerate() {
            self.timed(s, "install", Command::Sandbox(SandboxOp::Install { iccid }));
            self.plain.push((first_new + n) as u32);
        }
        for _ in 0..samples {
            let sim = self.pick(|s| &s.funded);
            let command = self.on_sim(sim, |iccid| ResellerOp::Fund { iccid, amount: Decimal::ONE });
            self.timed(s, "fund", command);
            let command = self.usage(sim);
            self.timed(s, "usage", command);
        }
        for _ in 0..samples {
            let sim = self.pick(|s| &s.plain);
            let command = self.on_sim(sim, |iccid| ResellerOp::Throttle { iccid, speed: "SPEED_1000_KBPS".into() });
            self.timed(s, "throttle", command);
            let command = self.on_sim(sim, |iccid| ResellerOp::Disable { iccid });
            self.timed(s, "disable", command);
            let command = self.on_sim(sim, |iccid| ResellerOp::Enable { iccid });
            self.timed(s, "enable", command);
        }
        for _ in 0..samples {
            let sim = self.pick(|s| &s.members);
            let group = self.engine().esims()[sim as usize].funding.group().expect("a member");
            let group_id = self.engine().groups()[group.0 as usize].id.clone();
            let iccid = self.iccid(sim);
            let remove = ResellerOp::RemoveGroupEsim { group_id: group_id.clone(), iccid: iccid.clone() };
            let command = self.reseller(self.owner(sim), remove);
            self.timed(s, "remove_group_esim", command);
            let command = self.reseller(self.owner(sim), ResellerOp::AddGroupEsim { group_id, iccid });
            self.timed(s, "add_group_esim", command);
        }
        for n in 0..samples.min(accounts as usize / 2) {
            let account = accounts - 1 - n as u32;
            let create = ResellerOp::CreateGroup {
                name: format!("bench {checkpoint} {n}"),
                low_balance_threshold_usd: None,
                refill_amount_usd: None,
            };
            let command = self.reseller(account, create);
            self.timed(s, "create_group", command);
        }
        for _ in 0..samples.min(self.funded.len() / 4) {
            let at = self.random() % self.funded.len();
            let sim = self.funded.swap_remove(at);
            let command = self.on_sim(sim, |iccid| ResellerOp::Defund { iccid });
            self.timed(s, "defund", command);
        }
        for _ in 0..samples.min(self.plain.len() / 4) {
            let at = self.random() % self.plain.len();
            let sim = self.plain.swap_remove(at);
            let command = self.on_sim(sim, |iccid| ResellerOp::Terminate { iccid });
            self.timed(s, "terminate", command);
        }
        stats
    }

    /// One read, repeated: (median, longest) in µs, and the total it reports.
    fn page(&mut self, account: u32, op: ResellerOp) -> (f64, f64, u64) {
        let mut times = Vec::with_capacity(PAGE_REPEATS);
        let mut total = 0;
        for _ in 0..PAGE_REPEATS {
            let command = self.reseller(account, op.clone());
            let started = Instant::now();
            let response = self.service.apply_command(self.now, command);
            times.push(started.elapsed().as_secs_f64() * 1e6);
            total = match response.expect("a page") {
                Reply::EsimPage(page) => page.total,
                Reply::GroupMembers(page) => page.total,
                Reply::Account(record) => record.esim_count.total,
                other => panic!("unexpected {other:?}"),
            };
        }
        times.sort_by(f64::total_cmp);
        (times[times.len() / 2], times[times.len() - 1], total)
    }

    fn pages(&mut self) -> Vec<(String, f64, f64)> {
        let mut rows = Vec::new();
        let list = |status: Option<&str>, offset: u64| ResellerOp::ListEsims {
            status: status.map(str::to_string),
            limit: Some(50),
            offset: Some(offset),
        };
        for status in [None, Some("active")] {
            let (_, _, total) = self.page(0, list(status, 0));
            let (first, _, _) = self.page(0, list(status, 0));
            let last_offset = total.saturating_sub(50);
            let (median, longest, _) = self.page(0, list(status, last_offset));
            let name = format!(
                "list_esims{} of the large reseller ({total} eSIMs), offset {last_offset} (offset 0: {first:.1} µs)",
                status.map_or(String::new(), |s| format!(" status={s}"))
            );
            rows.push((name, median, longest));
        }
        let (median, longest, total) = self.page(0, ResellerOp::Account);
        rows.push((format!("account record of the large reseller ({total} eSIMs)"), median, longest));
        let (group_id, account) = self.groups[0].clone();
        let members = |offset| ResellerOp::ListGroupEsims { group_id: group_id.clone(), limit: Some(50), offset };
        let (_, _, total) = self.page(account, members(Some(0)));
        let offset = total.saturating_sub(50);
        let (median, longest, _) = self.page(account, members(Some(offset)));
        rows.push((format!("list_group_esims of a group of {total}, offset {offset}"), median, longest));
        rows
    }

    /// The mix's commands: a fund, a usage and a read on each funded wallet in turn, with
    /// the account whose key each is sent with.
    fn mix_template(&mut self) -> Vec<(u32, Command)> {
        self.mix_template_over(self.funded.len())
    }

    /// [`Scale::mix_template`] over the first `wallets` funded wallets only.
    fn mix_template_over(&mut self, wallets: usize) -> Vec<(u32, Command)> {
        let wallets = wallets.clamp(1, self.funded.len());
        (0..MIX_BATCH)
            .map(|i| {
                let sim = self.funded[(i / 3) % wallets];
                let command = match i % 3 {
                    0 => self.on_sim(sim, |iccid| ResellerOp::Fund { iccid, amount: Decimal::new(1, 2) }),
                    1 => self.usage(sim),
                    _ => self.on_sim(sim, |iccid| ResellerOp::GetEsim { iccid }),
                };
                (self.owner(sim), command)
            })
            .collect()
    }

    /// One batch of the mix, as the owner task applies it: commands per second.
    fn mix_batch(&mut self, template: &[(u32, Command)]) -> f64 {
        let mut commands = template.iter().cloned().peekable();
        let mut failed = 0usize;
        let started = Instant::now();
        let mut batch: Vec<Command> = Vec::with_capacity(GROUP);
        while commands.peek().is_some() {
            // The connection tasks admit each request before the owner task takes
            // the batch; the owner task applies it and drains the journal once (the
            // group commit).
            batch.clear();
            for (account, mut command) in commands.by_ref().take(GROUP) {
                if let Command::Reseller(request) = &mut command {
                    let caller = &self.accounts[account as usize];
                    let digest = caller.memo.digest_of(&caller.key);
                    if self.admission.admit_key(&digest, self.now).is_err() {
                        failed += 1;
                        continue;
                    }
                    request.key_digest = digest;
                }
                batch.push(command);
            }
            for command in batch.drain(..) {
                self.now = self.now.plus_ms(MIX_STEP_MS);
                let succeeded = match self.service.apply_command(self.now, command) {
                    Ok(Reply::Funded(_)) | Ok(Reply::Esim(_)) => true,
                    Ok(Reply::Usage(usage)) => !usage.data_stopped,
                    _ => false,
                };
                failed += usize::from(!succeeded);
                while self.service.poll_event().is_some() {}
                while self.service.poll_effect().is_some() {}
            }
            black_box(self.drain_journal());
        }
        black_box(self.drain_journal());
        let elapsed = started.elapsed();
        assert_eq!(failed, 0, "{failed} of {MIX_BATCH} commands of the mix failed");
        MIX_BATCH as f64 / elapsed.as_secs_f64()
    }

    /// The next sync-cycle boundary strictly after `at`.
    fn next_minute(at: Millis) -> Millis {
        Millis((at.0.div_euclid(Millis::MINUTE) + 1) * Millis::MINUTE)
    }

    /// A read at `at`: the request that fires every timer due by then. Its time.
    fn read_at(&mut self, at: Millis) -> Duration {
        self.now = self.now.max(at);
        let sim = self.funded[0];
        let command = self.on_sim(sim, |iccid| ResellerOp::GetEsim { iccid });
        let started = Instant::now();
        self.service.apply_command(self.now, command).expect("read");
        let elapsed = started.elapsed();
        self.after_command();
        elapsed
    }

    /// Usage on every funded wallet and on one member of every group, then the request
    /// at the next sync boundary: (its time, reports it fired).
    fn sync_cycle(&mut self) -> (Duration, usize) {
        // Whatever is pending from before fires first, out of the measurement.
        self.read_at(self.now.plus_ms(Millis::HOUR));
        let mut targets = self.funded.clone();
        for group in self.members.chunks(GROUP_SIZE) {
            targets.push(group[0]);
        }
        for sim in targets {
            let _ = self.apply(self.usage(sim));
        }
        let before = self.engine().pending_timer_count();
        let elapsed = self.read_at(Self::next_minute(self.now));
        (elapsed, before - self.engine().pending_timer_count())
    }

    /// One report timer per funded wallet, due over 15 minutes: each wallet funded at
    /// its own time (its reporting pause ends 15 minutes later), then used once.
    fn pending_hour(&mut self) -> usize {
        self.read_at(self.now.plus_ms(Millis::HOUR));
        let start = self.now;
        let funded = self.funded.clone();
        let spacing = (15 * Millis::MINUTE) / funded.len().max(1) as i64;
        for (k, &sim) in funded.iter().enumerate() {
            let fund = self.on_sim(sim, |iccid| ResellerOp::Fund { iccid, amount: Decimal::new(1, 2) });
            self.apply_at(start.plus_ms(k as i64 * spacing), fund).expect("fund");
        }
        self.now = start.plus_ms(15 * Millis::MINUTE - 1);
        for &sim in &funded {
            let _ = self.apply(self.usage(sim));
        }
        self.drain_journal();
        self.engine().pending_timer_count()
    }

    /// A clock advance across an hour: as one advance, and as 60 one-minute steps.
    /// (pending timers, one advance, longest step, all steps).
    fn hour(&mut self) -> (usize, Duration, Duration, Duration) {
        let pending = self.pending_hour();
        let one = self.read_at(self.now.plus_ms(Millis::HOUR));
        self.pending_hour();
        let start = self.now;
        let mut longest = Duration::ZERO;
        let mut all = Duration::ZERO;
        for minute in 1..=60 {
            let step = self.read_at(start.plus_ms(minute * Millis::MINUTE));
            longest = longest.max(step);
            all += step;
        }
        (pending, one, longest, all)
    }

    /// Snapshot and recovery in a temporary data dir, as `esim serve` makes them. The grown
    /// state has no journal to replay, so its first snapshot is written directly (encode,
    /// write, sync: the figure the owner task used to stall for). Then the fund / usage
    /// mix is journaled through `JournalSink::append`, the server's call, under a policy
    /// that makes the next snapshot due half way through the tail: it is made by replay
    /// on its own thread (`FileJournal::compact_if_due`) while commands and appends go on
    /// (paced while it runs, so the tail stays a tail), and each command's and append's
    /// time is recorded, outside and during the snapshot. Prints the figures; returns
    /// (longest step during the snapshot ms, first snapshot encode ms, the background
    /// snapshot's duration s, recovery s).
    fn snapshot_and_recovery(&mut self, tail: usize) -> (f64, f64, f64, f64) {
        let dir = std::env::temp_dir().join(format!("esim-scale-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        self.drain_journal();
        let header = SegmentHeader {
            version: esim_http::journal::FORMAT_VERSION,
            config: self.engine().config().clone(),
            clock: ClockMode::Virtual,
            start: Millis::VIRTUAL_EPOCH,
            first_index: self.journaled,
        };
        let policy = SnapshotPolicy { every_entries: (tail / 2) as u64, every_bytes: u64::MAX };
        let mut journal = FileJournal::open(&dir, header, policy).expect("journal");
        let started = Instant::now();
        let encoded = journal.encode_snapshot(self.engine(), 0).expect("snapshot");
        let encode_ms = started.elapsed().as_secs_f64() * 1e3;
        let started = Instant::now();
        journal.write_encoded_snapshot(encoded).expect("write snapshot");
        let write_ms = started.elapsed().as_secs_f64() * 1e3;
        let snapshot_bytes: u64 =
            std::fs::read_dir(dir.join("snapshots")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        println!(
            "  snapshot: {:.1} MB ({:.0} bytes per eSIM); encoding the whole state {encode_ms:.0} ms, write and \
             sync {write_ms:.0} ms (the server no longer does this on its owner task)",
            snapshot_bytes as f64 / 1e6,
            snapshot_bytes as f64 / self.engine().esims().len() as f64
        );
        self.snapshot_fields();
        if let Ok(keep) = std::env::var("SCALE_KEEP_SNAPSHOT") {
            // A copy of the first snapshot file, for experiments with its decoding.
            let covered = format!("{:020}.snap", self.journaled);
            std::fs::copy(dir.join("snapshots").join(covered), format!("{keep}.{}", self.engine().esims().len()))
                .expect("copy of the snapshot");
        }
        // The tail; steps (commands and appends) timed outside and during the snapshot.
        let funded = self.funded.clone();
        let (mut outside, mut during) = (Vec::<u64>::new(), Vec::<u64>::new());
        let (mut longest_append_outside, mut longest_append_during) = (0u64, 0u64);
        let mut snapshot_began: Option<Instant> = None;
        let mut snapshot_s = f64::NAN;
        let mut n = 0usize;
        let mut written = 0usize;
        loop {
            let making = journal.snapshot_in_progress();
            if let (Some(began), false, true) = (snapshot_began, making, snapshot_s.is_nan()) {
                snapshot_s = began.elapsed().as_secs_f64();
                // One snapshot: the rest of the tail is what a recovery replays after it.
                journal.set_snapshot_policy(SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX });
            }
            if n >= tail && (!snapshot_s.is_nan() || snapshot_began.is_none() && n >= 4 * tail) {
                break;
            }
            self.now = self.now.plus_ms(MIX_STEP_MS);
            let sim = funded[n % funded.len()];
            let command = if n.is_multiple_of(2) {
                self.on_sim(sim, |iccid| ResellerOp::Fund { iccid, amount: Decimal::new(1, 2) })
            } else {
                self.usage(sim)
            };
            let began = Instant::now();
            let _ = self.service.apply_command(self.now, command);
            while self.service.poll_event().is_some() {}
            while self.service.poll_effect().is_some() {}
            let nanos = began.elapsed().as_nanos() as u64;
            if making {
                during.push(nanos)
            } else {
                outside.push(nanos)
            }
            n += 1;
            if n.is_multiple_of(GROUP) {
                let entries = self.drain_journal();
                written += entries.len();
                let began = Instant::now();
                JournalSink::append(&mut journal, &entries).expect("append");
                let nanos = began.elapsed().as_nanos() as u64;
                if making {
                    longest_append_during = longest_append_during.max(nanos);
                } else {
                    longest_append_outside = longest_append_outside.max(nanos);
                }
                if snapshot_began.is_none() && journal.snapshot_in_progress() {
                    snapshot_began = Some(Instant::now());
                }
                if making {
                    // About 6,000 commands a second while it runs: the tail stays a tail.
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let entries = self.drain_journal();
        written += entries.len();
        journal.append_entries(&entries).expect("append");
        let made = journal.wait_for_snapshot().map(|r| r.expect("the background snapshot is written"));
        drop(journal);
        for steps in [&mut outside, &mut during] {
            steps.sort_unstable();
        }
        let longest = |steps: &[u64]| steps.last().map_or(0.0, |&n| n as f64 / 1e6);
        let stall_ms = longest(&during).max(longest_append_during as f64 / 1e6);
        println!(
            "  snapshot made by replay on its own thread (covering {} entries) in {snapshot_s:.1} s; commands \
             outside it: {} (p99 {:.1} µs, longest {:.2} ms, longest append {:.2} ms); during it: {} (p99 {:.1} \
             µs, longest {:.2} ms, longest append {:.2} ms)",
            made.map_or("no".into(), |covered| covered.to_string()),
            outside.len(),
            if outside.is_empty() { 0.0 } else { percentile(&outside, 0.99) },
            longest(&outside),
            longest_append_outside as f64 / 1e6,
            during.len(),
            if during.is_empty() { 0.0 } else { percentile(&during, 0.99) },
            longest(&during),
            longest_append_during as f64 / 1e6
        );
        let live = self.engine().state_digest();
        let started = Instant::now();
        let recovery = recover(&dir, &RecoverOptions { repair: false, until: None }).expect("recovery");
        let recovery_s = started.elapsed().as_secs_f64();
        let engine = recovery.engine.expect("an engine");
        assert_eq!(engine.state_digest(), live, "recovery rebuilds the exact state");
        println!(
            "  recovery: snapshot of {} entries plus a tail of {} ({written} written): {recovery_s:.2} s",
            recovery.from_snapshot, recovery.replayed
        );
        drop(engine);
        let _ = std::fs::remove_dir_all(&dir);
        (stall_ms, encode_ms, snapshot_s, recovery_s)
    }

    /// Where the snapshot's bytes are: the engine's fields, largest first.
    fn snapshot_fields(&self) {
        let bytes = serde_json::to_vec(self.engine()).expect("engine");
        let fields: BTreeMap<&str, &serde_json::value::RawValue> = serde_json::from_slice(&bytes).expect("fields");
        let mut sizes: Vec<(usize, &str)> = fields.iter().map(|(name, raw)| (raw.get().len(), *name)).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let esims = self.engine().esims().len() as f64;
        let shown: Vec<String> =
            sizes.iter().take(6).map(|(size, name)| format!("{name} {:.0}", *size as f64 / esims)).collect();
        println!("  snapshot bytes per eSIM by field: {}", shown.join(", "));
    }
}

fn percentile(sorted: &[u64], fraction: f64) -> f64 {
    let at = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at] as f64 / 1e3
}

/// The median of some rates.
fn median_rate(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied().unwrap_or(0.0)
}

/// Measures the mix and prints it, beside the same mix on a fresh engine of
/// [`MIX_REFERENCE_ESIMS`] grown the same way: their batches alternate, so that both
/// medians come from the same minutes of this shared machine and their ratio is not the
/// machine's drift between checkpoints (a run's first checkpoint alone varied from 1.2 to
/// 2.6 M commands a second between runs).
fn report_mix(scale: &mut Scale, result: &mut Checkpoint) {
    let mut reference = Scale::new(scale.accounts.len());
    reference.grow_to(MIX_REFERENCE_ESIMS.min(scale.engine().esims().len()));
    let (ours, theirs) = (scale.mix_template(), reference.mix_template());
    (result.mix_per_second, result.mix_reference_per_second) = alternate_mix(scale, &ours, &mut reference, &theirs);
    println!(
        "  mix (fund, usage, read; admission included): {:.0} commands/s; on a fresh engine of {} eSIMs in \
         alternate batches: {:.0} (ratio {:.2})",
        result.mix_per_second,
        reference.engine().esims().len(),
        result.mix_reference_per_second,
        result.mix_ratio()
    );
    // The mix above spreads its 10,000 funds, usages and reads over as many wallets as
    // there are (up to 10,000): at a large state most of them are cold in the caches.
    // The same mix over the reference's wallets alone separates what the size of the
    // state costs (lookups, indexes) from what a wider working set costs (decision 214).
    let wallets = reference.funded.len();
    let same = scale.mix_template_over(wallets);
    result.same_wallets = wallets;
    (result.same_wallets_per_second, result.same_wallets_reference_per_second) =
        alternate_mix(scale, &same, &mut reference, &theirs);
    println!(
        "  the same mix over {wallets} wallets only (the reference's working set): {:.0} commands/s; \
         the reference in alternate batches: {:.0} (ratio {:.2})",
        result.same_wallets_per_second,
        result.same_wallets_reference_per_second,
        result.same_wallets_ratio()
    );
}

/// `scale.mix_batches` batches of `ours` on `scale` alternating with batches of `theirs`
/// on `reference`: the median rate of each.
fn alternate_mix(
    scale: &mut Scale,
    ours: &[(u32, Command)],
    reference: &mut Scale,
    theirs: &[(u32, Command)],
) -> (f64, f64) {
    let (mut rates, mut reference_rates) = (Vec::new(), Vec::new());
    for _ in 0..scale.mix_batches {
        reference_rates.push(reference.mix_batch(theirs));
        rates.push(scale.mix_batch(ours));
    }
    (median_rate(rates), median_rate(reference_rates))
}

fn measure(scale: &mut Scale, baseline: i64, samples: usize, tail: usize) -> Checkpoint {
    let esims = scale.engine().esims().len();
    let mut result = Checkpoint { esims, ..Checkpoint::default() };
    println!(
        "\n## {esims} eSIMs ({} accounts, {} groups, {} funded wallets, {} members)",
        scale.accounts.len(),
        scale.groups.len(),
        scale.funded.len(),
        scale.members.len()
    );
    if std::env::var_os("SCALE_MIX_ONLY").is_some() {
        // Growth and the mix alone (for profiling the mix: `perf record -D` past growth).
        report_mix(scale, &mut result);
        return result;
    }
    let (heap, rss) = scale.memory_per_esim(baseline);
    println!("  memory: {heap:.0} heap bytes per eSIM (counting allocator), RSS {rss:.0} bytes per eSIM");
    let parts: Vec<String> =
        scale.memory_parts().into_iter().map(|(name, bytes)| format!("{name} {bytes:.0}")).collect();
    println!("  heap bytes per eSIM by part (copied exactly, without spare capacity): {}", parts.join(", "));
    result.bytes_per_esim = heap;
    result.rss_per_esim = rss;

    let stats = scale.command_kinds(samples, esims);
    println!("  | command | samples | p50 µs | p99 µs | max µs | failed | journal bytes per command |");
    println!("  |---|---:|---:|---:|---:|---:|---:|");
    for (kind, record) in &stats {
        let mut nanos = record.nanos.clone();
        nanos.sort_unstable();
        let p99 = percentile(&nanos, 0.99);
        if p99 > result.worst_p99.1 {
            result.worst_p99 = (kind.to_string(), p99);
        }
        let per_command = if record.entries == 0 {
            "-".to_string()
        } else {
            format!("{:.0}", record.journal_bytes as f64 / nanos.len() as f64)
        };
        println!(
            "  | {kind} | {} | {:.1} | {p99:.1} | {:.1} | {} | {per_command} |",
            nanos.len(),
            percentile(&nanos, 0.5),
            nanos[nanos.len() - 1] as f64 / 1e3,
            record.failed,
        );
    }

    for (name, median, longest) in scale.pages() {
        println!("  page: {name}: median {median:.1} µs, longest {longest:.1} µs");
        result.longest_page_us = result.longest_page_us.max(median);
    }

    report_mix(scale, &mut result);

    let (cycle, reported) = scale.sync_cycle();
    println!(
        "  sync cycle: {reported} wallet reports fired by one request in {:.1} ms ({:.2} µs per wallet)",
        cycle.as_secs_f64() * 1e3,
        cycle.as_secs_f64() * 1e6 / reported.max(1) as f64
    );

    let (pending, one, longest, all) = scale.hour();
    println!(
        "  clock across an hour with {pending} pending timers: one advance {:.1} ms; as 60 one-minute steps, \
         longest {:.1} ms, all {:.1} ms",
        one.as_secs_f64() * 1e3,
        longest.as_secs_f64() * 1e3,
        all.as_secs_f64() * 1e3
    );

    let (stall_ms, encode_ms, snapshot_s, recovery_s) = scale.snapshot_and_recovery(tail);
    result.snapshot_stall_ms = stall_ms;
    result.encode_ms = encode_ms;
    result.snapshot_s = snapshot_s;
    result.recovery_s = recovery_s;
    result
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs bench binaries without --bench: stay quick.
    }
    let max = env_usize("SCALE_MAX_ESIMS", 1_000_000).max(1_000);
    let samples = env_usize("SCALE_SAMPLES", 2_000).max(10);
    let tail = env_usize("SCALE_TAIL", 100_000).max(GROUP);
    let mut checkpoints: Vec<usize> = [10_000, 100_000, 1_000_000].into_iter().filter(|&c| c < max).collect();
    checkpoints.push(max);
    let accounts = (max / 100).max(10);
    println!("# scale: up to {max} eSIMs, {accounts} accounts, {samples} samples per command kind, tail {tail}");

    let baseline = live_bytes();
    let started = Instant::now();
    let mut scale = Scale::new(accounts);
    let mut results = Vec::new();
    for &checkpoint in &checkpoints {
        let growing = Instant::now();
        scale.grow_to(checkpoint);
        if checkpoint == max {
            scale.mix_batches = env_usize("SCALE_MIX_BATCHES", MIX_BATCHES).max(1);
        }
        println!("\n(grown to {checkpoint} eSIMs in {:.1} s)", growing.elapsed().as_secs_f64());
        results.push(measure(&mut scale, baseline, samples, tail));
    }

    // 31 days later every event of the growth is past the events API's window.
    let later = scale.now.plus_ms(31 * Millis::DAY);
    let fired = scale.read_at(later);
    let account = scale.owner(scale.funded[0]);
    let provision = ResellerOp::Provision { end_user_reference: None, label: None, group_id: None };
    let command = scale.reseller(account, provision);
    let started_drop = Instant::now();
    scale.service.apply_command(scale.now, command).expect("provision");
    let dropped = started_drop.elapsed();
    scale.after_command();
    let (heap, rss) = scale.memory_per_esim(baseline);
    let parts: Vec<String> =
        scale.memory_parts().into_iter().map(|(name, bytes)| format!("{name} {bytes:.0}")).collect();
    println!(
        "\n## 31 days later (events of the growth past the 30-day window)\n  the read that fired the \
         timers: {:.1} ms; the next command that keeps an event (expired ones leave with it): {:.1} ms\n  \
         memory: {heap:.0} heap bytes per eSIM, RSS {rss:.0} bytes per eSIM",
        fired.as_secs_f64() * 1e3,
        dropped.as_secs_f64() * 1e3
    );
    println!("  heap bytes per eSIM by part: {}", parts.join(", "));

    println!("\n## Summary");
    println!("| eSIMs | heap B/eSIM | RSS B/eSIM | worst p99 (µs) | mix cmd/s | mix at 10 k, same minutes | mix ratio | same wallets ratio | snapshot stall ms | encode ms | snapshot s | recovery s |");
    println!("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        println!(
            "| {} | {:.0} | {:.0} | {} {:.1} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.0} | {:.1} | {:.2} |",
            r.esims,
            r.bytes_per_esim,
            r.rss_per_esim,
            r.worst_p99.0,
            r.worst_p99.1,
            r.mix_per_second,
            r.mix_reference_per_second,
            r.mix_ratio(),
            r.same_wallets_ratio(),
            r.snapshot_stall_ms,
            r.encode_ms,
            r.snapshot_s,
            r.recovery_s
        );
    }
    let last = results.last().expect("a checkpoint");
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    println!("\nTargets at {} eSIMs:", last.esims);
    println!(
        "- at most 600 bytes per eSIM: {:.0} (31 days later {heap:.0}): {}",
        last.bytes_per_esim,
        verdict(last.bytes_per_esim <= 600.0)
    );
    println!(
        "- every command's p99 under 20 µs: worst {} {:.1} µs: {}",
        last.worst_p99.0,
        last.worst_p99.1,
        verdict(last.worst_p99.1 < 20.0)
    );
    println!(
        "- a snapshot stalls no request over 50 ms (longest command or append while one is made): {:.1} ms: {}",
        last.snapshot_stall_ms,
        verdict(last.snapshot_stall_ms <= 50.0)
    );
    println!("- recovery under 5 s: {:.2} s: {}", last.recovery_s, verdict(last.recovery_s < 5.0));
    let ratio = last.mix_ratio();
    println!(
        "- mix within 20% of its speed at {MIX_REFERENCE_ESIMS} eSIMs (alternate batches): {ratio:.2}: {}",
        verdict(ratio >= 0.8)
    );
    println!(
        "  (the same mix over the reference's {} wallets only, the same working set at both sizes: {:.2})",
        last.same_wallets,
        last.same_wallets_ratio()
    );
    println!(
        "(whole run {:.0} s; longest median page {:.1} µs)",
        started.elapsed().as_secs_f64(),
        last.longest_page_us
    );
}
