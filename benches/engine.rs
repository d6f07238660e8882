//! The engine on the production path, on one core: a fund / usage / read mix (criterion).
//!
//! `cargo bench --bench engine` (figures in README.md).
//!
//! Each command goes the way a parsed request goes in the server, minus HTTP: a reseller
//! call's bearer key gets its digest from its connection's [`KeyMemo`] (each account
//! calls on its own keep-alive connection, so its key is hashed on the first call: as
//! the server's connection tasks do) and is admitted by the transport's [`Admission`]
//! (key directory and the per-key rate limit), then the command is applied by
//! [`Service::apply_command`] (journal entry, engine), and the journal entries are
//! drained every [`GROUP`] commands, as the owner task drains them per group commit.

//! Set-up: 100 accounts, each with its API key, a large top-up and 10 installed eSIMs
//! funded with 9,000 USD each. One engine lives through the whole run (no clone per
//! batch); each measured batch of 30,000 commands cycles over the 1,000 eSIMs (the
//! accounts interleaved) and over three commands:
//!
//! - `ResellerOp::Fund` of 0.01 USD (reseller call: key hash, rate limit, journal, ledger),
//! - `SandboxOp::Usage` of 1 MB in DE (journal, metering, ledger, report timer),
//! - `ResellerOp::GetEsim` (reseller call: key hash, rate limit, the detail reply).
//!
//! The rate limit (100 requests a minute per key, on the `now` passed in) is kept out of
//! the measurement by moving service time 60 ms per command: 1,000 commands a minute, of
//! which one key makes about 7. The commands are cloned from a template and the accounts
//! topped up (every 10 batches, by what the funds spent meanwhile) outside the timed
//! loop; every command must succeed (a refused fund, a stopped usage or a failed read
//! fails the bench). Timers (usage reports on sync cycles) fire inside the timed loop,
//! as they would in the service, and events are drained after every command.
//!
//! `ENGINE_BENCH_CLOCK=cpu` times the loop by the thread's CPU clock instead of the wall
//! clock: on a shared machine, time the thread spent descheduled is left out (use it for
//! A/B comparisons there; figures for README.md are wall-clock on a quiet machine).
//!
//! Beside the mix: each command kind alone, and SHA-256 of one API key (the per-call
//! authentication cost), to attribute where the time of the mix goes.

/// The allocator `esim serve` runs with (src/main.rs, decision 162): the bench measures it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use esim_engine::{
    AdminOp, Command, Engine, EngineConfig, KeyDigest, Millis, Reply, ResellerOp, ResellerRequest, SandboxOp,
};
use esim_http::admission::{Admission, KeyMemo};
use esim_http::secrets::Secrets;
use esim_http::{ClockMode, Service};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACCOUNTS: usize = 100;
const SIMS_PER_ACCOUNT: usize = 10;
/// Commands of one measured batch (a multiple of 3 and of the eSIM count).
const BATCH: usize = 30_000;
/// Service time per command: 1,000 commands a minute spread over 100 keys.
const STEP_MS: i64 = 60;
/// Top up every account this often (in batches), by what the funds spent meanwhile.
const TOPUP_EVERY: u64 = 10;
/// Commands per journal drain (the owner task drains once per group commit).
const GROUP: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    /// Fund, usage and read in turn.
    All,
    Fund,
    Usage,
    Read,
}

struct Bench {
    service: Service,
    admission: Arc<Admission>,
    now: Millis,
    account_ids: Vec<String>,
    /// Each account's API key, sent on its own keep-alive connection.
    keys: Vec<String>,
    /// Each account's connection memo: the key is hashed on its connection's first call.
    memos: Vec<KeyMemo>,
    /// Each command with the account whose key its request carries (reseller calls).
    template: Vec<(Option<usize>, Command)>,
    /// What each account gets every `TOPUP_EVERY` batches: what its funds spend meanwhile.
    top_up_usd: Decimal,
    batches: u64,
    next_top_up: u64,
}

impl Bench {
    fn new(mix: Mix) -> Bench {
        let engine = Engine::new(EngineConfig { seed: 1, ..EngineConfig::default() }, Millis::VIRTUAL_EPOCH);
        let mut service = Service::new(engine, "bench-admin".into(), ClockMode::Virtual, Secrets::seeded(1));
        let now = Millis::VIRTUAL_EPOCH;
        let mut accounts = Vec::with_capacity(ACCOUNTS);
        for _ in 0..ACCOUNTS {
            // The service draws each key, as in production, and shows it once.
            let Ok(Reply::AccountCreated(created)) = service.apply_command(
                now,
                Command::Admin(AdminOp::CreateAccount {
                    contact_email: "bench@x.example".into(),
                    company_name: None,
                    api_key_digest: KeyDigest::default(),
                    api_key_prefix: String::new(),
                }),
            ) else {
                panic!("account creation failed")
            };
            let top_up =
                AdminOp::TopUp { account_id: created.account_id.clone(), amount_usd: Decimal::from(1_000_000) };
            service.apply_command(now, Command::Admin(top_up)).expect("top-up");
            accounts.push((created.account_id, created.api_key));
        }
        // eSIM j belongs to account j % ACCOUNTS: consecutive commands hit different keys.
        let mut sims = vec![(0, String::new()); ACCOUNTS * SIMS_PER_ACCOUNT];
        for (a, (_, key)) in accounts.iter().enumerate() {
            for s in 0..SIMS_PER_ACCOUNT {
                let provision = ResellerOp::Provision { end_user_reference: None, label: None, group_id: None };
                let Ok(Reply::Provisioned(esim)) = service.apply_command(now, reseller(key, provision)) else {
                    panic!("provisioning failed")
                };
                service
                    .apply_command(now, Command::Sandbox(SandboxOp::Install { iccid: esim.iccid.clone() }))
                    .expect("install");
                let fund = ResellerOp::Fund { iccid: esim.iccid.clone(), amount: Decimal::from(9_000) };
                service.apply_command(now, reseller(key, fund)).expect("initial fund");
                sims[s * ACCOUNTS + a] = (a, esim.iccid);
            }
        }
        drain(&mut service);
        let template: Vec<(Option<usize>, Command)> = (0..BATCH)
            .map(|i| {
                let (account, iccid) = &sims[i % sims.len()];
                let kind = match mix {
                    Mix::All => i % 3,
                    Mix::Fund => 0,
                    Mix::Usage => 1,
                    Mix::Read => 2,
                };
                match kind {
                    0 => {
                        let fund = ResellerOp::Fund { iccid: iccid.clone(), amount: Decimal::new(1, 2) };
                        (Some(*account), unadmitted(fund))
                    }
                    1 => (
                        None,
                        Command::Sandbox(SandboxOp::Usage {
                            iccid: iccid.clone(),
                            mb: Decimal::ONE,
                            country: "DE".into(),
                            operator: None,
                        }),
                    ),
                    _ => (Some(*account), unadmitted(ResellerOp::GetEsim { iccid: iccid.clone() })),
                }
            })
            .collect();
        let funds = template
            .iter()
            .filter(|(_, c)| matches!(c, Command::Reseller(ResellerRequest { op: ResellerOp::Fund { .. }, .. })))
            .count();
        let spent_cents = (funds / ACCOUNTS) as i64 * TOPUP_EVERY as i64;
        let top_up_usd = Decimal::new(spent_cents, 2).max(Decimal::from(10));
        // Set-up happened at the epoch; the measured commands start a minute later.
        let now = now.plus_ms(Millis::MINUTE);
        let (account_ids, keys) = accounts.into_iter().unzip();
        let memos = (0..ACCOUNTS).map(|_| KeyMemo::default()).collect();
        let admission = service.admission();
        Bench { service, admission, now, account_ids, keys, memos, template, top_up_usd, batches: 0, next_top_up: 0 }
    }

    /// One batch: returns the time of the command loop alone.
    fn batch(&mut self) -> Duration {
        if self.batches == self.next_top_up {
            self.next_top_up += TOPUP_EVERY;
            for account_id in &self.account_ids {
                let top_up = AdminOp::TopUp { account_id: account_id.clone(), amount_usd: self.top_up_usd };
                self.service.apply_command(self.now, Command::Admin(top_up)).expect("periodic top-up");
            }
            drain(&mut self.service);
        }
        self.batches += 1;
        let commands = self.template.clone();
        let (service, admission, mut now) = (&mut self.service, &self.admission, self.now);
        let (keys, memos) = (&self.keys, &self.memos);
        let mut failed = 0usize;
        let started = BenchClock::now();
        for (index, (account, mut command)) in commands.into_iter().enumerate() {
            now = now.plus_ms(STEP_MS);
            if let (Some(account), Command::Reseller(request)) = (account, &mut command) {
                // The connection task: the bearer's digest (the connection's memo), then
                // admission (key directory, rate limit).
                let digest = memos[account].digest_of(&keys[account]);
                if admission.admit_key(&digest, now).is_err() {
                    failed += 1;
                    continue;
                }
                request.key_digest = digest;
            }
            let succeeded = match service.apply_command(now, command) {
                Ok(Reply::Funded(_)) | Ok(Reply::Esim(_)) => true,
                Ok(Reply::Usage(usage)) => !usage.data_stopped,
                _ => false,
            };
            failed += usize::from(!succeeded);
            while service.poll_event().is_some() {}
            while service.poll_effect().is_some() {}
            if index % GROUP == GROUP - 1 {
                black_box(service.drain_journal());
            }
        }
        black_box(service.drain_journal());
        let elapsed = started.elapsed();
        self.now = now;
        assert_eq!(failed, 0, "{failed} of {BATCH} commands of the mix failed");
        elapsed
    }
}

/// The wall clock, or the thread's CPU clock with `ENGINE_BENCH_CLOCK=cpu`.
enum BenchClock {
    Wall(Instant),
    Cpu(Duration),
}

impl BenchClock {
    fn now() -> BenchClock {
        static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if *CPU.get_or_init(|| std::env::var("ENGINE_BENCH_CLOCK").is_ok_and(|clock| clock == "cpu")) {
            BenchClock::Cpu(thread_cpu_time())
        } else {
            BenchClock::Wall(Instant::now())
        }
    }

    fn elapsed(&self) -> Duration {
        match self {
            BenchClock::Wall(started) => started.elapsed(),
            BenchClock::Cpu(started) => thread_cpu_time() - *started,
        }
    }
}

fn thread_cpu_time() -> Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(time.tv_sec as u64, time.tv_nsec as u32)
}

fn reseller(key: &str, op: ResellerOp) -> Command {
    Command::Reseller(ResellerRequest { key_digest: KeyDigest::of(key), idempotency_key: None, op })
}

/// A reseller command before admission: its digest is filled in the timed loop.
fn unadmitted(op: ResellerOp) -> Command {
    Command::Reseller(ResellerRequest { key_digest: KeyDigest::default(), idempotency_key: None, op })
}

fn drain(service: &mut Service) {
    while service.poll_event().is_some() {}
    while service.poll_effect().is_some() {}
    let _ = service.drain_journal();
}

fn engine_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(30);
    for (name, mix) in [
        ("fund_usage_read_mix", Mix::All),
        ("fund_only", Mix::Fund),
        ("usage_only", Mix::Usage),
        ("read_only", Mix::Read),
    ] {
        // Built on first use: a filtered-out bench costs no set-up.
        let mut bench: Option<Bench> = None;
        group.bench_function(name, |b| {
            let bench = bench.get_or_insert_with(|| Bench::new(mix));
            b.iter_custom(|iters| (0..iters).map(|_| bench.batch()).sum())
        });
    }
    group.finish();

    // Reference point: the SHA-256 every reseller call computes over its 68-byte key.
    let mut parts = c.benchmark_group("engine_parts");
    parts.throughput(Throughput::Elements(1));
    let key = format!("rsk_{}", "0123456789abcdef".repeat(4));
    parts.bench_function("sha256_api_key", |b| b.iter(|| Sha256::digest(black_box(key.as_bytes()))));
    parts.finish();
}

criterion_group!(benches, engine_benches);
criterion_main!(benches);
