//! `esim`: the Reseller eSIM Connectivity Service.
//!
//! `esim serve` runs the HTTP service; the other commands are listed by `esim --help`.

mod repair;

/// mimalloc instead of the system allocator: the HTTP bench measured reads and durable
/// funds 15 to 20 % faster with it on this machine (decision 162).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, Reply};
use esim_transport::journal::{self, FileJournal, RecoverOptions, SegmentHeader, SnapshotPolicy};
use esim_transport::secrets::{self, SealingKey, Secrets};
use esim_transport::server::{self, JournalSink, ServerOptions};
use esim_transport::standby;
use esim_transport::store_pg::{self, Opened, PgStore, StoreOptions};
use esim_transport::{ClockMode, Service};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "esim", version, about = "Reseller eSIM Connectivity Service v2.0: service, simulation and reports")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
    /// Log format on stderr: `text` for people (colour only on a terminal), `json` for a
    /// log collector (one object per line). Which lines: RUST_LOG (default `info`).
    #[arg(long, global = true, env = "ESIM_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// `esim serve`: log lines held for stderr's reader at most; beyond, new lines are
    /// dropped (and counted in `esim_log_lines_dropped_total` on /metrics) rather than
    /// stopping the service while its log's reader is slow or stuck.
    #[arg(long, global = true, env = "ESIM_LOG_BUFFER_LINES", default_value_t = LOG_BUFFER_LINES_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..))]
    log_buffer_lines: u32,
}

/// The default of `--log-buffer-lines`: about 6 MB of lines of about 200 bytes, some
/// seconds of a busy service's request lines.
const LOG_BUFFER_LINES_DEFAULT: u32 = 32_768;

/// The end of `esim serve --help`: logs and the operator endpoints.
const SERVE_AFTER_HELP: &str = "\
Logs (stderr):
  --log-format text|json   or ESIM_LOG_FORMAT; text has no colour when stderr is not a terminal
  RUST_LOG                 which lines, e.g. RUST_LOG=warn, RUST_LOG=info,esim_transport=debug
                           (tracing's EnvFilter syntax; default info)
  --log-buffer-lines N     or ESIM_LOG_BUFFER_LINES (default 32768): lines are written by a
                           thread of their own; while stderr's reader lags more than N lines
                           behind, new lines are dropped and counted
                           (esim_log_lines_dropped_total), never waited for
  Each request's lines carry its request id (the client's X-Request-Id when it is 1-64
  characters of [A-Za-z0-9._-], else a new one; echoed in the X-Request-Id response header)
  and its account id; never an API key.

Operator endpoints (on the same listener, never rate-limited):
  GET /healthz   200 while the process is alive
  GET /readyz    200 when recovered, the journal takes writes and the request queue has
                 room; else 503 with the reason in the error body (a standby of a
                 PostgreSQL store: `standby: …`, and every API request answers 503 with
                 Retry-After until it takes the shard over; without a credential it
                 answers only /healthz and /readyz, its detail only to the admin token)
  GET /metrics   Prometheus text format; needs the admin token (Authorization: Bearer)";

#[derive(Subcommand)]
enum Commands {
    /// Run the HTTP service (reseller API, admin API and sandbox API on one listener).
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(ServeArgs),
    /// Run the simulation harness: many seeded scenarios, every invariant checked after every step.
    Sim(SimArgs),
    /// Rebuild the state from a data dir's journal (or a PostgreSQL store's, `--store`);
    /// print its digest and a summary.
    ///
    /// Read-only: a live data dir (held by a running `esim serve`) is read without taking
    /// it over, and says it is live; a store is read in one consistent read up to its
    /// head, without migrating it or taking its shard. A torn tail is reported, not cut. Journals of another
    /// format version are refused with the reason. No secret key file is needed: the
    /// journal holds key digests and sealed secrets only.
    Replay(ReplayArgs),
    /// Finance reports rebuilt offline.
    Report {
        #[command(subcommand)]
        report: ReportKind,
    },
    /// Find damage in a data dir's journal and what cutting there drops; --cut-at-damage cuts it.
    ///
    /// Without `--cut-at-damage` nothing changes (exit 1 when there is damage). With it, the
    /// damaged segment is cut at the damage offset, later segments are removed, and the
    /// entries dropped and the index and service time of the last entry kept are printed.
    /// Refuses a live (locked) data dir, a damaged snapshot (restore it from a backup) and
    /// another format version.
    Repair(repair::RepairArgs),
    /// Replay a scenario script (`scenarios/*.scenario`, or a `violation-seed-N.scenario`
    /// that `esim sim --report DIR` wrote) with every checker after every step; exit 1 on a
    /// failed expectation or a violation.
    Scenario(ScenarioArgs),
}

#[derive(clap::Args)]
struct ScenarioArgs {
    /// The script file.
    file: PathBuf,
    /// Print every request, response, event and delivery (ids shown as names).
    #[arg(long)]
    transcript: bool,
}

/// `esim scenario FILE`: the failures of one script, or a line saying it passed.
fn scenario(args: ScenarioArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.file).map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let run = esim_sim::script::run_script(&text);
    if args.transcript {
        print_out(&run.transcript);
    }
    if run.failures.is_empty() {
        println!("{}: {} steps, every expectation held, no checker fired", args.file.display(), run.steps);
        return Ok(());
    }
    for failure in &run.failures {
        println!("{failure}");
    }
    Err(format!("{}: {} failure(s) in {} steps", args.file.display(), run.failures.len(), run.steps))
}

#[derive(clap::Args)]
struct SimArgs {
    /// Seeds to run, as A..B (B excluded).
    #[arg(long, conflicts_with = "seed", value_parser = parse_seed_range)]
    seeds: Option<std::ops::Range<u64>>,
    /// One seed (replays a reported violation).
    #[arg(long)]
    seed: Option<u64>,
    /// Steps per scenario.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Reseller accounts per scenario (1 to 4).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=4))]
    accounts: u64,
    /// Upstream faults through the sandbox.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    faults: String,
    /// Scenarios run on this many threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Write the finance report of the run to DIR (checked before the run starts):
    /// conservation.{json,csv,md,html} with one row per seed (its accounts summed) and a
    /// total row, conservation-days.csv (every seed's days summed by date), summary.md, and
    /// a replayable violation-seed-N.scenario per violation.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Run every seed twice and compare the state digests.
    #[arg(long)]
    determinism: bool,
    /// Add the coverage table: how many times the run reached each error code, event,
    /// eSIM and group transition, fault, webhook outcome and checker evaluation.
    #[arg(long)]
    coverage: bool,
    /// Fail (exit 1) when an item reachable by design was reached 0 times (shows the
    /// coverage table).
    #[arg(long)]
    require_coverage: bool,
    /// How seeds weigh their ops: `swarm` (each seed draws its own mix of ops and fault
    /// rates from the seed, printed with a violation) or `uniform` (one fixed mix).
    #[arg(long, default_value = "swarm", value_parser = ["swarm", "uniform"])]
    mix: String,
}

fn parse_seed_range(text: &str) -> Result<std::ops::Range<u64>, String> {
    let (start, end) = text.split_once("..").ok_or("expected A..B, e.g. 0..10000")?;
    let start: u64 = start.trim().parse().map_err(|_| format!("{start:?} is not a seed"))?;
    let end: u64 = end.trim().parse().map_err(|_| format!("{end:?} is not a seed"))?;
    if end <= start {
        return Err("the range is empty: B must be above A".into());
    }
    Ok(start..end)
}

fn simulate(args: SimArgs) -> Result<(), String> {
    use std::io::IsTerminal;
    let seeds = match (args.seeds, args.seed) {
        (Some(range), _) => range,
        (None, Some(seed)) => seed..seed + 1,
        (None, None) => 0..1_000,
    };
    let mut options = esim_sim::SimOptions {
        seeds,
        steps: args.steps,
        accounts: args.accounts as usize,
        faults: args.faults == "on",
        report: args.report,
        determinism: args.determinism,
        coverage: args.coverage,
        require_coverage: args.require_coverage,
        swarm: args.mix == "swarm",
        ..esim_sim::SimOptions::default()
    };
    if let Some(jobs) = args.jobs {
        options.jobs = jobs.max(1);
    }
    if let Some(dir) = &options.report {
        esim_sim::check_report_dir(dir)?;
    }
    let terminal = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let last_print = std::sync::Mutex::new(std::time::Instant::now());
    let summary = esim_sim::run_with_progress(&options, |done, total| {
        let mut last = last_print.lock().unwrap_or_else(|p| p.into_inner());
        if done == total || last.elapsed() >= std::time::Duration::from_millis(if terminal { 100 } else { 5_000 }) {
            *last = std::time::Instant::now();
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            if terminal {
                let width = 30;
                let filled = (done as usize * width) / total.max(1) as usize;
                eprint!(
                    "\r[{}{}] {done}/{total} scenarios, {rate:.0}/s ",
                    "#".repeat(filled),
                    " ".repeat(width - filled)
                );
                if done == total {
                    eprintln!();
                }
            } else {
                eprintln!("{done}/{total} scenarios, {rate:.0}/s");
            }
        }
    });
    print_out(&format!("{}\n", summary.table()));
    if let Some(error) = &summary.report_error {
        return Err(error.clone());
    }
    if summary.ok() {
        Ok(())
    } else if summary.violations.is_empty() && summary.determinism_failures.is_empty() && summary.conservation.conserved
    {
        let missing: Vec<String> =
            summary.coverage.missing().iter().map(|i| format!("{} {}", i.family, i.name)).collect();
        Err(format!("coverage: {} item(s) reached 0 times: {}", missing.len(), missing.join(", ")))
    } else {
        Err("invariant violations found (see above); each line gives the command that replays it".into())
    }
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// The data dir of `esim serve`.
    #[arg(long, required_unless_present = "store")]
    data_dir: Option<PathBuf>,
    /// A PostgreSQL store (`esim serve --store`), read without taking its shard.
    #[arg(long, conflicts_with = "data_dir")]
    store: Option<String>,
    /// Stop before the first entry later than this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
}

#[derive(Subcommand)]
enum ReportKind {
    /// The finance report, rebuilt offline from a data dir (or a PostgreSQL store, `--store`): money in -> where it is now ->
    /// where it went -> the difference (exactly 0, with the equation written out), one row
    /// per account and a total row, over a period, with a per-day movements table.
    ///
    /// Markdown and HTML show USD with two decimals and thousands separators; JSON and CSV
    /// carry every decimal. HTML is one self-contained printable file with inline SVG charts
    /// (a waterfall and balances per day). Periods are whole UTC days: --from is the first
    /// day counted, --until the first day not counted. Exit code 1 when money is not
    /// conserved.
    #[command(
        after_help = "Examples:\n  esim report conservation --data-dir ./esim-data\n  esim report conservation --data-dir ./esim-data --from 2026-01-01 --until 2026-02-01 --format html > january.html"
    )]
    Conservation {
        /// The data dir of `esim serve`.
        #[arg(long, required_unless_present = "store")]
        data_dir: Option<PathBuf>,
        /// A PostgreSQL store (`esim serve --store`), read without taking its shard.
        #[arg(long, conflicts_with = "data_dir")]
        store: Option<String>,
        /// Only this account.
        #[arg(long)]
        account: Option<String>,
        /// md and html for people (two decimals), json and csv exact (csv: one row per account and the total).
        #[arg(long, default_value = "md", value_parser = ["json", "csv", "md", "html"])]
        format: String,
        /// First day counted: a date (2026-01-31) or an RFC 3339 time (its UTC day). Default: the first movement.
        #[arg(long)]
        from: Option<String>,
        /// First day NOT counted: a date or an RFC 3339 time (its UTC day). Default: up to now.
        #[arg(long)]
        until: Option<String>,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Bind address; port 0 picks a free port.
    #[arg(long, env = "ESIM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// Journal and snapshots; created when missing. With `--store`, only the generated
    /// admin token file is kept here (no journal, no lock).
    #[arg(long, env = "ESIM_DATA_DIR", default_value = "./esim-data")]
    data_dir: PathBuf,
    /// The journal and snapshots in PostgreSQL instead of the data dir: a `postgres://`
    /// URL (or libpq `key=value` settings). The schema is migrated on start and this
    /// process takes the store's shard: a process that served it before acknowledges no
    /// more changes. Default: the data dir's file journal.
    #[arg(long, env = "ESIM_STORE", hide_env_values = true)]
    store: Option<String>,
    /// With `--store`: the owner's lease in milliseconds (default 3000). The owner renews
    /// it every third of it; a standby takes the shard over once it has run out. Every
    /// process on one store should use the same value.
    #[arg(
        long,
        env = "ESIM_LEASE_MS",
        default_value_t = store_pg::LEASE_MS,
        value_parser = clap::value_parser!(u64).range(*store_pg::LEASE_MS_RANGE.start()..=*store_pg::LEASE_MS_RANGE.end())
    )]
    lease_ms: u64,
    /// How long a request waits for its change to be durable (the journal's append)
    /// before it is answered 503 with `Retry-After` (its change may still become durable:
    /// a retry with the same Idempotency-Key finds out). With `--store`, an append's
    /// transaction is also given up after it and its outcome read back.
    #[arg(
        long,
        env = "ESIM_APPEND_DEADLINE_MS",
        default_value_t = server::APPEND_DEADLINE_MS,
        value_parser = clap::value_parser!(u64).range(*server::APPEND_DEADLINE_MS_RANGE.start()..=*server::APPEND_DEADLINE_MS_RANGE.end())
    )]
    append_deadline_ms: u64,
    /// With `--store`: take the shard even while another process's lease is live (a
    /// planned switch-over; the other process is fenced at its next append or renewal).
    /// Without it, such a start becomes a standby. Refused (nothing taken) when this
    /// process could not serve the shard: its key file does not open the sealed secrets.
    #[arg(long, env = "ESIM_TAKE_OVER", value_parser = clap::builder::FalseyValueParser::new())]
    take_over: bool,
    /// `virtual`: time moves only through POST /sandbox/v1/clock/advance.
    #[arg(long, env = "ESIM_CLOCK", default_value = "wall", value_parser = ["wall", "virtual"])]
    clock: String,
    /// Wall clock only: service time runs N times faster than real time (default 1;
    /// refused with `--clock virtual`, where only clock/advance moves time).
    #[arg(long, env = "ESIM_SPEED", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    speed: Option<u32>,
    /// Start on the wall clock even when the state's last service time is more than 5
    /// minutes ahead of it (made on the virtual clock, or at a higher speed): service
    /// time then continues from there, that far ahead for good. Without it such a start
    /// is refused, naming both times.
    #[arg(long, env = "ESIM_ALLOW_TIME_AHEAD", value_parser = clap::builder::FalseyValueParser::new())]
    allow_time_ahead: bool,
    /// Seed of the engine's randomness on a new data dir (default: from the OS).
    #[arg(long, env = "ESIM_SEED")]
    seed: Option<u64>,
    /// Token of the admin and sandbox APIs (default: generated into DIR/admin-token).
    #[arg(long, env = "ESIM_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The 256-bit key that seals webhook signing secrets at rest; kept outside the data
    /// dir (a copy of the data dir then reveals no secret). Made, mode 0600, by a start
    /// that holds no sealed secret yet, once its other checks have passed; never by a
    /// standby, which needs the owner's key file. A file its group or others may read is
    /// refused. Default: $XDG_CONFIG_HOME/esim/secret-key, else ~/.config/esim/secret-key.
    /// A data dir must always be served with the key file it was made with.
    #[arg(long, env = "ESIM_SECRET_KEY_FILE")]
    secret_key_file: Option<PathBuf>,
    /// Accept http:// webhook URLs and loopback or private targets (local development only).
    #[arg(long, env = "ESIM_ALLOW_INSECURE_WEBHOOKS", value_parser = clap::builder::FalseyValueParser::new())]
    allow_insecure_webhooks: bool,
    /// Create a demo account with a $100 top-up and print its API key (default: on a new
    /// data dir; `--demo=false` or ESIM_DEMO=0 turns it off).
    #[arg(
        long,
        env = "ESIM_DEMO",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    demo: Option<bool>,
    /// Accounts spread over this many engines (1 to 64), each with its own journal in
    /// DIR/shard-<k>/ and its own owner task; every id names its shard, so requests
    /// route without a lookup. Fixed when the data dir is made (recorded in DIR/shards);
    /// a later start with another count is refused. Default: what the data dir holds (1
    /// for a new one, which is the unsharded layout). With `--store`, the count is
    /// recorded in the store when it is made, and each shard has its own owner row,
    /// journal and snapshots there.
    #[arg(long, env = "ESIM_SHARDS", value_parser = clap::value_parser!(u32).range(1..=64))]
    shards: Option<u32>,
    /// With --shards above 1: eSIMs a shard takes from the global inventory pool at once
    /// (DIR/pool on the data dir's file journals, the `inventory_pool` row of a
    /// `--store`); it takes the next block when its own count falls to a quarter of this
    /// (decisions 185-191).
    #[arg(
        long,
        env = "ESIM_POOL_BLOCK",
        default_value_t = esim_transport::pool::BLOCK_ESIMS,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000_000)
    )]
    pool_block: u64,
    /// With `--store`: the shards this node takes and serves, e.g. `0,1` (default: every
    /// shard). A request for another shard is forwarded to its owner, whose address the
    /// store holds, so clients may call any node.
    #[arg(long, env = "ESIM_OWN_SHARDS", value_delimiter = ',', num_args = 1..)]
    own_shards: Option<Vec<u32>>,
    /// With `--store` and shards: the shards this node follows as their hot standby, e.g.
    /// `2,3`: it keeps each one's engine current from the store's journal, forwards its
    /// requests to its owner meanwhile, and takes the shard over once the owner's lease
    /// runs out (the owner died or stalled), serving it from then on. None of them may be
    /// in `--own-shards`; without `--own-shards` the node owns no shard at start.
    #[arg(long, env = "ESIM_STANDBY_SHARDS", value_delimiter = ',', num_args = 1..)]
    standby_shards: Option<Vec<u32>>,
    /// With `--store` and shards: the URL other nodes forward this node's shards'
    /// requests to, written to each owner row it takes (default: `http://` and the bound
    /// listen address; set it when listening on 0.0.0.0 or behind a NAT).
    #[arg(long, env = "ESIM_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// Open connections at most (lowered to fit the descriptor limit, `ulimit -n`); at
    /// the cap, new connections wait in the listen backlog.
    #[arg(
        long,
        env = "ESIM_MAX_CONNECTIONS",
        default_value_t = esim_transport::edge::CONNECTIONS_MAX,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    max_connections: usize,
    /// Open connections at most from one client address (an IPv6 /64), never more than
    /// three quarters of --max-connections; over it, new connections are closed at once
    /// (decision 216). Raise it for a reverse proxy on the same host (one address).
    #[arg(
        long,
        env = "ESIM_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = esim_transport::edge::CONNECTIONS_PER_ADDRESS_MAX,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    max_connections_per_address: usize,
}

/// A new admin token: `adm_` and 48 hex characters from the OS random source.
fn random_token() -> String {
    format!("adm_{}", secrets::hex(&secrets::os_random::<24>()))
}

/// Writes the admin token file, mode 0600 whatever the umask (and an existing file is
/// made 0600 too).
fn write_admin_token(dir: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = secrets::private_file(&dir.join("admin-token"))?;
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// This start's secret key file (the one named, or the default): read at once, made
/// only once every check of the start has passed (a start that fails leaves none
/// behind), and checked against every state the start is to serve.
struct KeyFile {
    path: PathBuf,
    /// `None` while the file does not exist.
    key: Option<Arc<SealingKey>>,
}

impl KeyFile {
    /// Reads the key file when it exists; one its group or others may read is refused.
    fn open(args: &ServeArgs) -> Result<KeyFile, String> {
        let path = match &args.secret_key_file {
            Some(path) => path.clone(),
            None => secrets::default_key_file().ok_or(
                "no place for the secret key file: set --secret-key-file or ESIM_SECRET_KEY_FILE (HOME is not set)",
            )?,
        };
        if path.starts_with(&args.data_dir) {
            tracing::warn!(
                "the secret key file {} is inside the data dir: a copy of the data dir then holds the key",
                path.display()
            );
        }
        let key = SealingKey::load(&path)?.map(Arc::new);
        Ok(KeyFile { path, key })
    }

    /// The key opens every signing secret of `engine` (`what`: "this data dir", "shard
    /// 2"); a missing key file fails when the state holds any.
    fn check(&self, engine: &Engine, what: &str) -> Result<(), String> {
        match &self.key {
            Some(key) => opens_every_secret(key, &self.path, engine),
            None => match engine.webhooks().first() {
                None => Ok(()),
                Some(webhook) => Err(format!(
                    "the secret key file {} does not exist, but {what} holds signing secrets sealed with a key (webhook \
                     {} and others): serve it with the key file it was made with (--secret-key-file)",
                    self.path.display(),
                    webhook.id
                )),
            },
        }
    }

    /// A standby's key: the file must exist, since the shards it follows were made, and
    /// their secrets sealed, by another process with it.
    fn required(&self, role: &str) -> Result<Arc<SealingKey>, String> {
        self.key.clone().ok_or_else(|| {
            format!(
                "the secret key file {} does not exist: {role} serves secrets sealed by the owner's key, so it needs \
                 the same key file (--secret-key-file)",
                self.path.display()
            )
        })
    }

    /// The key, its file made now when missing: called once every check has passed.
    fn key(&mut self) -> Result<Arc<SealingKey>, String> {
        if let Some(key) = &self.key {
            return Ok(key.clone());
        }
        let (key, created) = SealingKey::load_or_create(&self.path)?;
        if created {
            tracing::info!(
                "made a new secret key file {} (key id {}); keep it apart from the data dir",
                self.path.display(),
                key.key_id()
            );
        }
        let key = Arc::new(key);
        self.key = Some(key.clone());
        Ok(key)
    }
}

/// Whether `key` (read from `path`) opens every signing secret `engine` holds, the
/// previous one of a rotation included.
fn opens_every_secret(key: &SealingKey, path: &Path, engine: &Engine) -> Result<(), String> {
    for webhook in engine.webhooks() {
        let previous = webhook.previous_secret.iter().map(|(sealed, _)| sealed);
        for sealed in std::iter::once(&webhook.signing_secret).chain(previous) {
            if let Err(why) = key.open(sealed) {
                return Err(format!(
                    "the secret key file {} does not open the signing secret of webhook {} ({why}); serve this state \
                     with the key file it was made with (--secret-key-file)",
                    path.display(),
                    webhook.id
                ));
            }
        }
    }
    Ok(())
}

/// The standby's check of a state it follows (`crate::standby::ServeCheck`): `key`
/// opens every signing secret in it.
fn serve_check(key: Arc<SealingKey>, path: PathBuf) -> standby::ServeCheck {
    Arc::new(move |engine: &Engine| opens_every_secret(&key, &path, engine))
}

/// With `--take-over`, the store's state (shard `shard`, else the one shard) is read
/// and checked before its lease is taken: taking a live owner's lease fences it for
/// good, so a process that could not serve the state must not take it. (Without the
/// flag only a lease that has run out is taken; a failed check gives it back at once.)
fn check_before_taking(
    args: &ServeArgs,
    keys: &KeyFile,
    clock: ClockMode,
    url: &str,
    shard: Option<u32>,
) -> Result<(), String> {
    if !args.take_over {
        return Ok(());
    }
    let (what, shard) = match shard {
        Some(shard) => (format!("shard {shard}"), shard as i32),
        None => ("the store".to_string(), store_pg::SHARD),
    };
    let (recovery, _) = store_pg::read_only_shard(url, shard, None).map_err(|e| format!("{what}: {e}"))?;
    if let Some(engine) = &recovery.engine {
        let refused = |why: String| format!("--take-over refused: this process cannot serve {what}: {why}");
        keys.check(engine, &what).map_err(refused)?;
        check_time_ahead(args, clock, engine, &what).map_err(refused)?;
    }
    Ok(())
}

/// How far a recovered state's service time may be ahead of the wall clock at a start
/// on it (a host clock stepped back a little, NTP) before the start is refused.
const TIME_AHEAD_TOLERANCE_MS: i64 = 5 * 60 * 1000;

/// On the wall clock at speed 1, a state whose last service time is ahead of the wall
/// clock by more than [`TIME_AHEAD_TOLERANCE_MS`] (made on the virtual clock and
/// advanced, or at a higher speed) is refused: served, it would run that far ahead for
/// good. `--allow-time-ahead` starts it anyway; `--clock virtual` keeps its own time.
fn check_time_ahead(args: &ServeArgs, clock: ClockMode, engine: &Engine, what: &str) -> Result<(), String> {
    if clock != ClockMode::Wall || args.speed.unwrap_or(1) != 1 || args.allow_time_ahead {
        return Ok(());
    }
    let wall = Millis(server::real_now_ms());
    let ahead_ms = engine.now().0 - wall.0;
    if ahead_ms <= TIME_AHEAD_TOLERANCE_MS {
        return Ok(());
    }
    Err(format!(
        "{what}'s last service time {} is {} ahead of the wall clock ({}), more than the {} min allowed: on the wall \
         clock it would stay that far ahead for good. Serve it on its own clock (--clock virtual), or start it anyway \
         with --allow-time-ahead (ESIM_ALLOW_TIME_AHEAD=1)",
        engine.now(),
        shown_duration(ahead_ms),
        wall,
        TIME_AHEAD_TOLERANCE_MS / 60_000
    ))
}

/// A duration for people: minutes, hours or days.
fn shown_duration(ms: i64) -> String {
    let minutes = ms / 60_000;
    match minutes {
        0..=119 => format!("{minutes} min"),
        120..=2879 => format!("{} h", minutes / 60),
        _ => format!("{} days {} h", minutes / 1_440, minutes % 1_440 / 60),
    }
}

/// `esim serve`. Every check comes before the first write of the start (decision 237):
/// the settings, the key file's modes, the lock, the listener, the recovered state
/// against the key file and the wall clock; then the key file (made when missing), the
/// admin token file and the journal.
fn serve(args: ServeArgs) -> Result<(), String> {
    if args.clock == "virtual" && args.speed.is_some() {
        return Err("--speed applies to the wall clock only: with --clock virtual, time moves only through \
                    POST /sandbox/v1/clock/advance"
            .into());
    }
    let speed = args.speed.unwrap_or(1);
    let mut keys = KeyFile::open(&args)?;
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", args.data_dir.display()))?;
    // Only the service's user may read the data dir, whatever the umask.
    secrets::set_mode(&args.data_dir, 0o700)
        .map_err(|e| format!("cannot make the data dir {} mode 0700: {e}", args.data_dir.display()))?;
    let clock = if args.clock == "virtual" { ClockMode::Virtual } else { ClockMode::Wall };
    // The header a new journal starts with (drawn once: a new store records it when this
    // process takes its shard, a new data dir in its first segment).
    let fresh = new_header(&args, clock);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    // SIGINT and SIGTERM are handled from here on (a standby stops on them too).
    let mut shutdown = {
        let _entered = runtime.enter();
        Box::pin(shutdown_signal()?)
    };
    let bind = |runtime: &tokio::runtime::Runtime| {
        runtime
            .block_on(tokio::net::TcpListener::bind(&args.listen))
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))
    };
    // With a store: no lock (the shard's epoch fences a second server, decision 140).
    let mut lock = None;
    let listener = match &args.store {
        Some(url) => {
            // Bound at once: a standby answers on it (503) and keeps it when it takes
            // over (decision 148); a busy port ends the start before the store is touched.
            let listener = bind(&runtime)?;
            let shards = store_pg::prepare_shards(url, args.shards, fresh.config.initial_inventory)
                .map_err(|e| e.to_string())?;
            let only_shard_0 = args.own_shards.as_ref().is_none_or(|own| own.iter().all(|&k| k == 0));
            if shards == 1 && args.standby_shards.is_some() {
                return Err("--standby-shards follows shards of a sharded store; a store of one shard gets its \
                            hot standby from a second `esim serve --store` with the same URL (no flag)"
                    .into());
            }
            if shards > 1 || !only_shard_0 || args.standby_shards.is_some() {
                let sharded = Sharded { shards, new: false, clock, fresh, speed };
                return serve_store_shards(args, sharded, (keys, listener), runtime, shutdown);
            }
            listener
        }
        None => {
            if args.own_shards.is_some() || args.advertise_url.is_some() || args.standby_shards.is_some() {
                return Err("--own-shards, --standby-shards and --advertise-url need --store: shards of a data \
                            dir are all served by the process that locks it"
                    .into());
            }
            // One process per data dir, for this process's whole life (released however it ends).
            lock = Some(esim_transport::lock::DataDirLock::acquire(&args.data_dir).map_err(|e| e.to_string())?);
            let listener = bind(&runtime)?;
            let (shards, new) = esim_transport::shards::shards_to_serve(&args.data_dir, args.shards)?;
            if shards > 1 {
                let sharded = Sharded { shards, new, clock, fresh, speed };
                return serve_sharded(args, sharded, (keys, listener), runtime, shutdown);
            }
            listener
        }
    };
    let listening = format!("listening on http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    // `said`: a standby said it listens at once (it answered from then on).
    let (recovery, store, listener, said) = match &args.store {
        Some(url) => {
            let options = store_options(&args);
            let policy = SnapshotPolicy::default();
            check_before_taking(&args, &keys, clock, url, None)?;
            // The line comes once the shard is taken (as without a store), or at once
            // for a standby, which answers from then on.
            match PgStore::open_with(url, &fresh, policy, options).map_err(|e| e.to_string())? {
                Opened::Owner(store, recovery) => (*recovery, Some(*store), listener, false),
                Opened::Leased(holder) => {
                    let standby = StoreStandby { url, keys: &keys, options, holder, listening: &listening };
                    match standby.follow(&args, listener, &runtime, &mut shutdown)? {
                        None => return Ok(()),
                        Some(takeover) => (takeover.recovery, Some(takeover.store), takeover.listener, true),
                    }
                }
            }
        }
        None => {
            // A large state takes seconds to read back: say so before, and how long after.
            tracing::info!(data_dir = %args.data_dir.display(), "recovering: the newest snapshot and the journal after it");
            let began = std::time::Instant::now();
            let recovery = journal::recover(&args.data_dir, &RecoverOptions { repair: true, until: None })
                .map_err(|e| e.to_string())?;
            tracing::info!(
                from_snapshot = recovery.from_snapshot,
                replayed = recovery.replayed,
                ms = began.elapsed().as_millis() as u64,
                "recovered"
            );
            (recovery, None, listener, false)
        }
    };
    let _lock = lock;
    for note in &recovery.repaired {
        tracing::warn!("recovery: {note}");
    }
    if let Some(engine) = &recovery.engine {
        let what = if args.store.is_some() { "the store" } else { "this data dir" };
        keys.check(engine, what)?;
        if !said {
            // A shard taken over continues its owner's time, whatever this host's clock.
            check_time_ahead(&args, clock, engine, what)?;
        }
    }
    // Every check has passed: from here on the start writes.
    let key = keys.key()?;
    let new_data_dir = recovery.engine.is_none();
    let admin_token = admin_token(&args)?;
    let (engine, header, _) =
        continue_or_start((recovery.engine, recovery.header), recovery.next_index, clock, "this data dir", || fresh);
    let replayed = (recovery.from_snapshot, recovery.replayed);
    let mut journal: Box<dyn JournalSink> = match store {
        Some(mut store) => {
            store.set_header(header).map_err(|e| e.to_string())?;
            Box::new(store)
        }
        None => Box::new(
            FileJournal::open(&args.data_dir, header, SnapshotPolicy::default())
                .map_err(|e| format!("cannot open the journal in {}: {e}", args.data_dir.display()))?,
        ),
    };
    let mut service = start_service(&args, engine, (key, admin_token), clock, (0, 1))?;
    let demo_account = service.engine().accounts().iter().find(|a| a.contact_email == DEMO_EMAIL).map(|a| a.id.clone());
    let demo = match demo_account {
        None if args.demo.unwrap_or(new_data_dir) => Some(Demo::Created(create_demo_account(&mut service)?)),
        None => None,
        Some(account_id) => (args.demo != Some(false)).then_some(Demo::Exists(account_id)),
    };
    journal.append(&service.drain_journal()).map_err(|e| format!("cannot write the journal: {e}"))?;

    let served = runtime.block_on(async move {
        if !said {
            println!("{listening}");
        }
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        print_demo(demo, address, &args.data_dir);
        tracing::info!(
            data_dir = %args.data_dir.display(), store = args.store.is_some(), clock = ?clock, speed,
            from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let options = server_options(&args, speed);
        server::serve(listener, service, journal, options, shutdown).await.map_err(|e| e.to_string())
    });
    // A blocking task stuck in a frozen disk or store is not waited for at exit.
    runtime.shutdown_timeout(RUNTIME_STOP_WAIT);
    served
}

/// The standby of a one-shard store (another process holds its live lease).
struct StoreStandby<'a> {
    url: &'a str,
    keys: &'a KeyFile,
    options: StoreOptions,
    holder: store_pg::ShardOwner,
    listening: &'a str,
}

impl StoreStandby<'_> {
    /// Checks that the key file opens every secret of the state it follows (else the
    /// start fails), says it listens, and follows until it takes the shard over (`None`:
    /// stopped as a standby).
    fn follow(
        self,
        args: &ServeArgs,
        listener: tokio::net::TcpListener,
        runtime: &tokio::runtime::Runtime,
        shutdown: &mut (impl std::future::Future<Output = ()> + Unpin),
    ) -> Result<Option<standby::Takeover>, String> {
        let key = self.keys.required("a standby")?;
        let check = serve_check(key, self.keys.path.clone());
        let standby = runtime
            .block_on(standby::Standby::start(self.url, 0, self.options.lease, check))
            .map_err(|e| format!("this process cannot be the store's standby: {e}"))?;
        let admin_token = admin_token(args)?;
        println!("{}", self.listening);
        let policy = SnapshotPolicy::default();
        let followed = runtime.block_on(standby::follow(
            listener,
            standby,
            policy,
            self.options,
            (self.holder, admin_token),
            shutdown,
        ));
        let taken = followed.map_err(|e| e.to_string())?;
        if taken.is_none() {
            tracing::info!("stopped as a standby");
        }
        Ok(taken)
    }
}

/// The admin token of this start: the one given, else the data dir's file (made with a
/// new token when missing).
fn admin_token(args: &ServeArgs) -> Result<String, String> {
    match args.admin_token.clone() {
        Some(token) if !token.is_empty() => Ok(token),
        _ => {
            let existing =
                std::fs::read_to_string(args.data_dir.join("admin-token")).ok().map(|t| t.trim().to_string());
            let token = existing.filter(|t| !t.is_empty()).unwrap_or_else(random_token);
            write_admin_token(&args.data_dir, &token).map_err(|e| format!("cannot write the admin token file: {e}"))?;
            Ok(token)
        }
    }
}

/// What `serve` settled before a sharded data dir takes its own path.
struct Sharded {
    shards: u32,
    /// No shard count was recorded: a new data dir.
    new: bool,
    clock: ClockMode,
    fresh: SegmentHeader,
    speed: u32,
}

/// Shard k's header on a new sharded data dir or store: the start's seed plus k (each
/// shard its own streams), its index and the count, and no eSIM of its own: the initial
/// inventory is in the global pool (the data dir's or the store's), from which it takes
/// its first block at start (decisions 187, 190); the same start time, so every shard's clock starts together (decision 170).
fn shard_header(fresh: &SegmentHeader, shard: u32, shards: u32) -> SegmentHeader {
    let config = EngineConfig {
        seed: fresh.config.seed.wrapping_add(u64::from(shard)),
        shard,
        shard_count: shards,
        initial_inventory: 0,
        ..fresh.config.clone()
    };
    SegmentHeader { config, ..fresh.clone() }
}

/// `esim serve` on a sharded data dir (the data dir is locked, the listener bound):
/// each shard recovered from (or made in) DIR/shard-<k>/ and checked, then served by
/// [`server::serve_shards`].
fn serve_sharded(
    args: ServeArgs,
    sharded: Sharded,
    (mut keys, listener): (KeyFile, tokio::net::TcpListener),
    runtime: tokio::runtime::Runtime,
    shutdown: std::pin::Pin<Box<impl std::future::Future<Output = ()>>>,
) -> Result<(), String> {
    let Sharded { shards, new, clock, fresh, speed } = sharded;
    // The pool before the shard count: a start cut short between the two is new again
    // and finds its pool. A data dir sharded before the pool existed starts with an
    // empty pool, its shards keeping their own counts (decision 187).
    let initial_pool = if new { fresh.config.initial_inventory } else { 0 };
    let pool = esim_transport::pool::FilePool::open(&args.data_dir, initial_pool)
        .map_err(|e| format!("cannot open the inventory pool in {}: {e}", args.data_dir.display()))?;
    if new {
        esim_transport::shards::record_shards(&args.data_dir, shards)
            .map_err(|e| format!("cannot record the shard count in {}: {e}", args.data_dir.display()))?;
    }
    let mut recovered = Vec::with_capacity(shards as usize);
    let mut replayed = (0, 0);
    for shard in 0..shards {
        let dir = esim_transport::shards::shard_dir(&args.data_dir, shard);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        secrets::set_mode(&dir, 0o700).map_err(|e| format!("cannot make {} mode 0700: {e}", dir.display()))?;
        let recovery = journal::recover(&dir, &RecoverOptions { repair: true, until: None })
            .map_err(|e| format!("shard {shard}: {e}"))?;
        for note in &recovery.repaired {
            tracing::warn!(shard, "recovery: {note}");
        }
        if let Some(engine) = &recovery.engine {
            keys.check(engine, &format!("shard {shard}"))?;
            check_time_ahead(&args, clock, engine, &format!("shard {shard}"))?;
        }
        replayed = (replayed.0 + recovery.from_snapshot, replayed.1 + recovery.replayed);
        recovered.push((dir, recovery));
    }
    // Every check has passed: from here on the start writes.
    let key = keys.key()?;
    let admin_token = admin_token(&args)?;
    let mut parts: Vec<(Service, Box<dyn JournalSink>)> = Vec::with_capacity(shards as usize);
    let mut new_data_dir = true;
    for (shard, (dir, recovery)) in (0..shards).zip(recovered) {
        let (engine, header, new) = continue_or_start_shard(recovery, clock, &fresh, (shard, shards));
        new_data_dir &= new;
        let journal = FileJournal::open(&dir, header, SnapshotPolicy::default())
            .map_err(|e| format!("cannot open the journal in {}: {e}", dir.display()))?;
        let service = start_service(&args, engine, (key.clone(), admin_token.clone()), clock, (shard, shards))?;
        parts.push((service, Box::new(journal)));
    }
    esim_transport::shards::align_virtual_clocks(parts.iter_mut().map(|(service, _)| service).collect())?;
    // The demo account lives on shard 0 (decision 169).
    let demo_account = parts.iter().find_map(|(service, _)| {
        service.engine().accounts().iter().find(|a| a.contact_email == DEMO_EMAIL).map(|a| a.id.clone())
    });
    let demo = match demo_account {
        None if args.demo.unwrap_or(new_data_dir) => Some(Demo::Created(create_demo_account(&mut parts[0].0)?)),
        None => None,
        Some(account_id) => (args.demo != Some(false)).then_some(Demo::Exists(account_id)),
    };
    for (shard, (service, journal)) in parts.iter_mut().enumerate() {
        journal.append(&service.drain_journal()).map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
    }
    let served = runtime.block_on(async move {
        println!("listening on http://{}", listener.local_addr().map_err(|e| e.to_string())?);
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        print_demo(demo, address, &args.data_dir);
        tracing::info!(
            data_dir = %args.data_dir.display(), shards, clock = ?clock, speed,
            from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let mut options = server_options(&args, speed);
        options.pool = Some(esim_transport::pool::PoolSettings { pool: Arc::new(pool), block_esims: args.pool_block });
        server::serve_shards(listener, parts, options, shutdown).await.map_err(|e| e.to_string())
    });
    // A blocking task stuck in a frozen disk or store is not waited for at exit.
    runtime.shutdown_timeout(RUNTIME_STOP_WAIT);
    served
}

/// How long the end of `esim serve` waits for the runtime's blocking tasks (an append
/// stuck in a frozen disk or store): what they did not confirm was never acknowledged.
const RUNTIME_STOP_WAIT: Duration = Duration::from_secs(2);

/// How many times a node waits for another process's live lease on a shard it is to
/// own before it gives up (each wait: the lease left, at most the longest lease).
const SHARD_LEASE_WAITS: u32 = 3;

/// Takes shard `shard` of the store for this node, writing `address` to its owner row.
/// A live lease of another process (a node that just stopped, or one that still serves
/// it) is waited out a few times; `--take-over` takes it at once.
fn take_store_shard(
    url: &str,
    shard: u32,
    address: &str,
    fresh: &SegmentHeader,
    options: StoreOptions,
) -> Result<(PgStore, journal::Recovery), String> {
    let mut waits = 0;
    loop {
        let opened = PgStore::open_shard(url, shard as i32, Some(address), fresh, SnapshotPolicy::default(), options)
            .map_err(|e| e.to_string())?;
        match opened {
            Opened::Owner(store, recovery) => return Ok((*store, *recovery)),
            Opened::Leased(holder) if waits < SHARD_LEASE_WAITS => {
                waits += 1;
                let wait_ms = (holder.lease_left_s.max(0.0) * 1000.0) as u64 + 100;
                tracing::warn!(shard, holder = %holder.owner, wait_ms, "the shard's lease is held by another process: waiting it out");
                std::thread::sleep(Duration::from_millis(wait_ms.min(*store_pg::LEASE_MS_RANGE.end())));
            }
            Opened::Leased(holder) => {
                return Err(format!(
                    "shard {shard} of the store is held by {} (epoch {}, lease for {:.1} s more), which keeps \
                     renewing it: another node serves it. Give this node other shards (--own-shards), or start it \
                     with --take-over to take the shard anyway",
                    holder.owner, holder.epoch, holder.lease_left_s
                ))
            }
        }
    }
}

/// The shards a node of a `shards`-shard store takes: `--own-shards` (each below the
/// count, sorted, no repeats), else every shard.
fn shards_to_own(asked: Option<&[u32]>, shards: u32) -> Result<Vec<u32>, String> {
    let Some(asked) = asked else { return Ok((0..shards).collect()) };
    let mut own: Vec<u32> = asked.to_vec();
    own.sort_unstable();
    own.dedup();
    if let Some(bad) = own.iter().find(|&&k| k >= shards) {
        return Err(format!(
            "--own-shards names shard {bad}, but the store has {shards} shard(s) (0 to {})",
            shards - 1
        ));
    }
    if own.is_empty() {
        return Err("--own-shards names no shard: a node serves at least one".into());
    }
    Ok(own)
}

/// The address other nodes forward to: `--advertise-url`, else the bound address.
fn advertise_url(asked: Option<&str>, bound: std::net::SocketAddr) -> Result<String, String> {
    let Some(url) = asked else { return Ok(format!("http://{bound}")) };
    let authority = url.strip_prefix("http://").map(|rest| rest.trim_end_matches('/')).unwrap_or_default();
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']');
    if authority.is_empty() || !authority.bytes().all(plain) {
        return Err(format!(
            "--advertise-url {url:?} must be http://host:port (nodes forward to each other over plain HTTP on a \
             private network in this slice)"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// `esim serve --store` of a sharded store (decisions 177-181): this node takes the
/// shards it owns (each as the unsharded store's owner takes shard 0: its own epoch,
/// lease, journal and snapshots), writes its address to their owner rows, and forwards
/// requests for the other shards to their owners. The shards it follows as their
/// standby are loaded and checked against the key file first: a node that could not
/// serve one does not start (decision 235).
fn serve_store_shards(
    args: ServeArgs,
    sharded: Sharded,
    (mut keys, listener): (KeyFile, tokio::net::TcpListener),
    runtime: tokio::runtime::Runtime,
    shutdown: std::pin::Pin<Box<impl std::future::Future<Output = ()>>>,
) -> Result<(), String> {
    let Sharded { shards, clock, fresh, speed, .. } = sharded;
    let url = args.store.clone().expect("called with a store");
    let (own, standby) = node_shards(&args, shards)?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let address = advertise_url(args.advertise_url.as_deref(), bound)?;
    let options = store_options(&args);
    let followers = follow_checked(&runtime, &url, &standby, options, &keys)?;
    let mut taken = Vec::with_capacity(own.len());
    let mut replayed = (0, 0);
    for &shard in &own {
        check_before_taking(&args, &keys, clock, &url, Some(shard))?;
        let (store, recovery) = take_store_shard(&url, shard, &address, &shard_header(&fresh, shard, shards), options)
            .map_err(|e| format!("shard {shard}: {e}"))?;
        if let Some(engine) = &recovery.engine {
            keys.check(engine, &format!("shard {shard}"))?;
            check_time_ahead(&args, clock, engine, &format!("shard {shard}"))?;
        }
        replayed = (replayed.0 + recovery.from_snapshot, replayed.1 + recovery.replayed);
        taken.push((shard, store, recovery));
    }
    // Every check has passed: from here on the start writes.
    let key = keys.key()?;
    let admin_token = admin_token(&args)?;
    let mut parts: Vec<server::ShardPart> = (0..shards).map(|_| server::ShardPart::Remote).collect();
    let mut new_store = true;
    for (shard, mut store, recovery) in taken {
        let (engine, header, new) = continue_or_start_shard(recovery, clock, &fresh, (shard, shards));
        new_store &= new;
        store.set_header(header).map_err(|e| format!("shard {shard}: {e}"))?;
        let service = start_service(&args, engine, (key.clone(), admin_token.clone()), clock, (shard, shards))?;
        parts[shard as usize] = server::ShardPart::Local(service, Box::new(store));
    }
    fn local(parts: &mut [server::ShardPart]) -> Vec<&mut Service> {
        parts
            .iter_mut()
            .filter_map(|part| match part {
                server::ShardPart::Local(service, _) => Some(service),
                server::ShardPart::Remote => None,
            })
            .collect()
    }
    // Only this node's shards are aligned: another node's are aligned by it, and the next
    // clock advance brings every shard to one time (decision 171).
    esim_transport::shards::align_virtual_clocks(local(&mut parts))?;
    // The demo account lives on shard 0 (decision 169): made by the node that owns it.
    let demo = match local(&mut parts).into_iter().next() {
        Some(service) if own.first() == Some(&0) => {
            let existing =
                service.engine().accounts().iter().find(|a| a.contact_email == DEMO_EMAIL).map(|a| a.id.clone());
            match existing {
                None if args.demo.unwrap_or(new_store) => Some(Demo::Created(create_demo_account(service)?)),
                None => None,
                Some(account_id) => (args.demo != Some(false)).then_some(Demo::Exists(account_id)),
            }
        }
        _ => None,
    };
    for (shard, part) in parts.iter_mut().enumerate() {
        if let server::ShardPart::Local(service, journal) = part {
            journal
                .append(&service.drain_journal())
                .map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
        }
    }
    let locator = store_pg::Locator::new(&url).map_err(|e| e.to_string())?;
    let forwarder = Arc::new(esim_transport::nodes::Forwarder::new(locator, shards as usize));
    // The global eSIM pool is the store's row, shared by every node (decisions 190-191):
    // this node's shards start at 0 (new) and take their first block at start.
    let pool: Arc<dyn esim_transport::pool::InventoryPool> =
        Arc::new(store_pg::PgPool::open(&url).map_err(|e| format!("the inventory pool: {e}"))?);
    let args = Arc::new(args);
    let served = runtime.block_on(async move {
        println!("listening on http://{bound}");
        print_demo(demo, bound, &args.data_dir);
        tracing::info!(
            shards, own = ?own, standby = ?standby, advertise = %address, clock = ?clock, speed,
            from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let (adopt, adopted) = tokio::sync::mpsc::channel(shards as usize);
        for (shard, follower) in followers {
            let follow = StandbyShard {
                args: args.clone(),
                shard,
                shards,
                address: address.clone(),
                options,
                fresh: fresh.clone(),
                clock,
                secrets: (key.clone(), admin_token.clone()),
            };
            tokio::spawn(follow.run(follower, adopt.clone()));
        }
        let mut options = server_options(&args, speed);
        options.pool = Some(esim_transport::pool::PoolSettings { pool, block_esims: args.pool_block });
        let node = server::NodeOptions { forwarder, adopted, admin_token, mode: clock };
        server::serve_nodes(listener, parts, Some(node), options, shutdown).await.map_err(|e| e.to_string())
    });
    // A blocking task stuck in a frozen disk or store is not waited for at exit.
    runtime.shutdown_timeout(RUNTIME_STOP_WAIT);
    served
}

/// The shards a node of a sharded store owns and those it follows as their standby
/// (`--own-shards`, `--standby-shards`): no shard in both.
fn node_shards(args: &ServeArgs, shards: u32) -> Result<(Vec<u32>, Vec<u32>), String> {
    let standby = match &args.standby_shards {
        Some(asked) => shards_to_own(Some(asked), shards)?,
        None => Vec::new(),
    };
    // A standby node without --own-shards owns none at start (decision 199).
    let own = match (&args.own_shards, standby.is_empty()) {
        (None, false) => Vec::new(),
        (asked, _) => shards_to_own(asked.as_deref(), shards)?,
    };
    if let Some(both) = own.iter().find(|k| standby.contains(k)) {
        return Err(format!(
            "shard {both} is in both --own-shards and --standby-shards: a node owns a shard or follows it"
        ));
    }
    Ok((own, standby))
}

/// Each shard of `standby` loaded from the store and checked: the key file exists and
/// opens every signing secret in it, else the node refuses to start (decision 235).
fn follow_checked(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    standby: &[u32],
    options: StoreOptions,
    keys: &KeyFile,
) -> Result<Vec<(u32, standby::Standby)>, String> {
    if standby.is_empty() {
        return Ok(Vec::new());
    }
    let key = keys.required("a standby of --standby-shards")?;
    standby
        .iter()
        .map(|&shard| {
            let check = serve_check(key.clone(), keys.path.clone());
            let follower = runtime
                .block_on(standby::Standby::start(url, shard, options.lease, check))
                .map_err(|e| format!("this node cannot be the standby of shard {shard}: {e}"))?;
            Ok((shard, follower))
        })
        .collect()
}

/// One shard a node of a sharded store follows as its hot standby (`--standby-shards`).
struct StandbyShard {
    args: Arc<ServeArgs>,
    shard: u32,
    shards: u32,
    address: String,
    options: StoreOptions,
    fresh: SegmentHeader,
    clock: ClockMode,
    /// The sealing key (checked against the shard before it is taken) and admin token.
    secrets: (Arc<SealingKey>, String),
}

impl StandbyShard {
    /// Follows the shard until its owner's lease runs out, takes it over (only while the
    /// follower's check passes), and hands its engine and store to the serving node
    /// (`adopt`). A standby that fails says why and ends: the node goes on serving its
    /// other shards and forwarding this one.
    async fn run(self, follower: standby::Standby, adopt: tokio::sync::mpsc::Sender<server::AdoptedShard>) {
        let shard = self.shard;
        tracing::info!(shard, "following shard {shard} as its hot standby");
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let followed =
            standby::follow_shard(follower, &self.address, SnapshotPolicy::default(), self.options, &mut never).await;
        let (store, recovery) = match followed {
            Ok(Some(taken)) => taken,
            Ok(None) => return,
            Err(why) => {
                tracing::error!(shard, %why, "the hot standby of shard {shard} failed: it is no longer followed");
                return;
            }
        };
        // Setting the header writes the store (blocking): off the runtime's threads.
        let made = tokio::task::spawn_blocking(move || self.serve_taken(store, recovery)).await;
        match made {
            Ok(Ok(adopted)) => {
                if adopt.send(adopted).await.is_err() {
                    tracing::warn!(shard, "the node stopped before serving the shard it took over");
                }
            }
            Ok(Err(why)) => tracing::error!(shard, %why, "took shard {shard} over but cannot serve it"),
            Err(error) => tracing::error!(shard, %error, "took shard {shard} over but cannot serve it"),
        }
    }

    /// The service of a shard taken over, as a start of its node would make it.
    fn serve_taken(self, mut store: PgStore, recovery: journal::Recovery) -> Result<server::AdoptedShard, String> {
        let StandbyShard { args, shard, shards, fresh, clock, secrets, .. } = self;
        let (engine, header, _) = continue_or_start_shard(recovery, clock, &fresh, (shard, shards));
        store.set_header(header).map_err(|e| e.to_string())?;
        let mut service = start_service(&args, engine, secrets, clock, (shard, shards))?;
        let mut journal: Box<dyn JournalSink> = Box::new(store);
        journal.append(&service.drain_journal()).map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
        Ok(server::AdoptedShard { shard: shard as usize, service, journal })
    }
}

/// The journal header of a new data dir or store: the seed and configuration of this
/// start (the seed from the OS when none is given).
fn new_header(args: &ServeArgs, clock: ClockMode) -> SegmentHeader {
    let config = EngineConfig {
        // The seed draws ids and serials only, never a secret (secrets come from the OS
        // random source), so it may sit in every segment header.
        seed: args.seed.unwrap_or_else(|| u64::from_le_bytes(secrets::os_random::<8>())),
        allow_insecure_webhooks: args.allow_insecure_webhooks,
        ..EngineConfig::default()
    };
    let start = match clock {
        ClockMode::Virtual => Millis::VIRTUAL_EPOCH,
        ClockMode::Wall => Millis(server::real_now_ms()),
    };
    SegmentHeader { version: journal::FORMAT_VERSION, config, clock, start, first_index: 0 }
}

esim_engine::with_test_switches! {
    /// Test-only switch (the fail-fast test), compiled only into the builds of `cargo
    /// test` (decision 84): with this environment variable at 1, every eSIM fund panics
    /// inside the engine, so a test can see the process end.
    const TEST_PANIC_ON_FUND: &str = "ESIM_TEST_PANIC_ON_FUND";

    /// The engine with every fund panicking when [`TEST_PANIC_ON_FUND`] is 1.
    fn panic_on_fund_if_asked(mut engine: Engine) -> Engine {
        if std::env::var_os(TEST_PANIC_ON_FUND).is_some_and(|v| v == "1") {
            eprintln!("esim: {TEST_PANIC_ON_FUND}=1: every fund panics (a test of fail-fast)");
            engine.inject_bug_for_test(Some(esim_engine::InjectedBug::PanicOnFund));
        }
        engine
    }
}

/// The demo account of this start: made now (its key, shown once), or made before.
enum Demo {
    Created(String),
    Exists(String),
}

/// The service one engine (shard `shard` of `shards`; `(0, 1)` unsharded) starts with:
/// the sealing key (checked against it before), the test switch, and this start's
/// `--allow-insecure-webhooks`.
fn start_service(
    args: &ServeArgs,
    engine: Engine,
    (key, admin_token): (Arc<SealingKey>, String),
    clock: ClockMode,
    (shard, shards): (u32, u32),
) -> Result<Service, String> {
    esim_engine::with_test_switches! {
        let engine = panic_on_fund_if_asked(engine);
    }
    let mut secrets = Secrets::from_os(key);
    secrets.set_shard(shard, shards);
    let mut service = Service::new(engine, admin_token, clock, secrets);
    if service.engine().config().allow_insecure_webhooks != args.allow_insecure_webhooks {
        // The flag of this start rules from now on (journaled: earlier registrations
        // replay under the setting they were made with).
        let now = service.now(Millis(server::real_now_ms()));
        let allowed = args.allow_insecure_webhooks;
        service
            .apply_command(now, Command::Admin(AdminOp::SetInsecureWebhooks { allowed }))
            .map_err(|e| e.to_string())?;
    }
    Ok(service)
}

/// What a start says of the demo account: its key the first time, else how to get one.
fn print_demo(demo: Option<Demo>, address: std::net::SocketAddr, data_dir: &Path) {
    match demo {
        Some(Demo::Created(key)) => println!("demo account API key (shown once): {key}"),
        Some(Demo::Exists(account_id)) => println!(
            "demo account {account_id} (its key was shown at its first start); a new key:\n  \
             curl -s -XPOST http://{address}/admin/v1/accounts/{account_id}/keys \
             -H \"Authorization: Bearer $(cat {})\"",
            data_dir.join("admin-token").display()
        ),
        None => {}
    }
}

/// The server's options from the serve flags (one engine or several shards alike).
fn server_options(args: &ServeArgs, speed: u32) -> ServerOptions {
    let mut options = ServerOptions::new(speed, args.allow_insecure_webhooks);
    options.edge.connections_max = args.max_connections;
    options.edge.connections_per_address_max = args.max_connections_per_address;
    options.append_deadline = Duration::from_millis(args.append_deadline_ms);
    options
}

/// How this process uses a `--store` (lease, append deadline, `--take-over`).
fn store_options(args: &ServeArgs) -> StoreOptions {
    StoreOptions {
        lease: Duration::from_millis(args.lease_ms),
        append_deadline: Duration::from_millis(args.append_deadline_ms),
        take_over: args.take_over,
    }
}

/// [`continue_or_start`] of shard `shard` of `shards`: a new one starts from
/// [`shard_header`] of this start's header.
fn continue_or_start_shard(
    recovery: journal::Recovery,
    clock: ClockMode,
    fresh: &SegmentHeader,
    (shard, shards): (u32, u32),
) -> (Engine, SegmentHeader, bool) {
    continue_or_start((recovery.engine, recovery.header), recovery.next_index, clock, &format!("shard {shard}"), || {
        shard_header(fresh, shard, shards)
    })
}

/// The engine and journal header a start continues from: what was recovered (`what`:
/// "this data dir", "shard 2"), on this start's clock, or a new one from `new`; and
/// whether it is new.
fn continue_or_start(
    recovered: (Option<Engine>, Option<SegmentHeader>),
    next_index: u64,
    clock: ClockMode,
    what: &str,
    new: impl FnOnce() -> SegmentHeader,
) -> (Engine, SegmentHeader, bool) {
    match recovered {
        (Some(engine), Some(mut header)) => {
            header.first_index = next_index;
            if header.clock != clock {
                // Allowed (every journal entry carries its own service time), but rarely
                // meant: a virtual clock is usually far ahead of the wall clock, and then
                // service time stands still until the wall clock catches up.
                tracing::warn!(
                    from = clock_name(header.clock),
                    to = clock_name(clock),
                    "{what} ran on the {} clock; it continues on the {} clock from service time {}",
                    clock_name(header.clock),
                    clock_name(clock),
                    engine.now()
                );
                header.clock = clock;
            }
            (engine, header, false)
        }
        _ => {
            let header = new();
            (Engine::new(header.config.clone(), header.start), header, true)
        }
    }
}

fn clock_name(clock: ClockMode) -> &'static str {
    match clock {
        ClockMode::Wall => "wall",
        ClockMode::Virtual => "virtual",
    }
}

/// The contact of the demo account (how a restart knows it exists already).
const DEMO_EMAIL: &str = "demo@reseller.example";

fn create_demo_account(service: &mut Service) -> Result<String, String> {
    let now = service.now(Millis(server::real_now_ms()));
    let created = service.apply_command(
        now,
        Command::Admin(AdminOp::CreateAccount {
            contact_email: DEMO_EMAIL.into(),
            company_name: Some("Demo Reseller".into()),
            // Drawn by the service.
            api_key_digest: Default::default(),
            api_key_prefix: String::new(),
        }),
    );
    let Ok(Reply::AccountCreated(created)) = created else { return Err("demo account creation failed".into()) };
    service
        .apply_command(
            now,
            Command::Admin(AdminOp::TopUp { account_id: created.account_id.clone(), amount_usd: 100.into() }),
        )
        .map_err(|e| e.to_string())?;
    Ok(created.api_key)
}

fn replay(args: ReplayArgs) -> Result<(), String> {
    let until = match &args.until {
        Some(text) => {
            Some(Millis::parse_rfc3339(text).ok_or_else(|| format!("--until {text:?} is not an RFC 3339 time"))?)
        }
        None => None,
    };
    let started = std::time::Instant::now();
    let source = Source::new(args.data_dir, args.store);
    if let Some(shards) = source.sharded()? {
        return replay_sharded(&source, shards, until);
    }
    let recovery = source.recover(until)?;
    let elapsed = started.elapsed();
    let Some(engine) = recovery.engine else { return Err(format!("{} holds no journal", source.name())) };
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "state_digest {}", engine.state_digest());
    let _ = writeln!(out, "service time {}", engine.now());
    let _ = writeln!(
        out,
        "entries      {} ({} from the snapshot, {} replayed from the journal)",
        recovery.next_index, recovery.from_snapshot, recovery.replayed
    );
    let _ = writeln!(out, "accounts     {}", engine.accounts().len());
    let _ = writeln!(out, "esims        {}", engine.esims().len());
    let _ = writeln!(out, "groups       {}", engine.groups().len());
    let report = engine.conservation_report(None).expect("all accounts");
    let _ =
        writeln!(out, "conserved    {}", if report.conserved { "yes (every difference is exactly 0)" } else { "NO" });
    let seconds = elapsed.as_secs_f64().max(1e-9);
    // A rate only of what was replayed: a snapshot alone is read, not replayed.
    if recovery.replayed == 0 {
        let what =
            if recovery.from_snapshot > 0 { "the snapshot read, no entry after it" } else { "nothing to replay" };
        let _ = writeln!(out, "replay time  {seconds:.3} s ({what})");
    } else {
        let _ = writeln!(out, "replay time  {:.3} s ({:.0} entries/s)", seconds, recovery.replayed as f64 / seconds);
    }
    for note in &recovery.repaired {
        let _ = writeln!(out, "damage       {note} (not repaired here: `esim serve` cuts it on start)");
    }
    source.note_live();
    print_out(&out);
    Ok(())
}

/// Each shard of a sharded data dir or store recovered (read-only), in shard order.
fn recover_shards(source: &Source, shards: u32, until: Option<Millis>) -> Result<Vec<journal::Recovery>, String> {
    (0..shards)
        .map(|shard| {
            let recovery = source.recover_shard(shard, until).map_err(|e| format!("shard {shard}: {e}"))?;
            if recovery.engine.is_none() {
                return Err(format!("shard {shard} of {} holds no journal", source.name()));
            }
            Ok(recovery)
        })
        .collect()
}

/// `esim replay` of a sharded data dir: each shard's digest and summary, then one digest
/// over all (what `GET /admin/v1/state` shows) and the totals.
fn replay_sharded(source: &Source, shards: u32, until: Option<Millis>) -> Result<(), String> {
    use std::fmt::Write as _;
    let started = std::time::Instant::now();
    let recoveries = recover_shards(source, shards, until)?;
    let elapsed = started.elapsed();
    let mut out = String::new();
    let mut digests = Vec::new();
    let (mut accounts, mut esims, mut groups, mut entries, mut conserved) = (0, 0, 0, 0, true);
    for (shard, recovery) in recoveries.iter().enumerate() {
        let engine = recovery.engine.as_ref().expect("checked by recover_shards");
        let report = engine.conservation_report(None).expect("all accounts");
        conserved &= report.conserved;
        digests.push(engine.state_digest());
        let _ = writeln!(
            out,
            "shard {shard}      {} time {} entries {} accounts {} esims {} groups {} conserved {}",
            engine.state_digest(),
            engine.now(),
            recovery.next_index,
            engine.accounts().len(),
            engine.esims().len(),
            engine.groups().len(),
            if report.conserved { "yes" } else { "NO" }
        );
        accounts += engine.accounts().len();
        esims += engine.esims().len();
        groups += engine.groups().len();
        entries += recovery.next_index;
        for note in &recovery.repaired {
            let _ =
                writeln!(out, "damage       shard {shard}: {note} (not repaired here: `esim serve` cuts it on start)");
        }
    }
    let header = format!(
        "shards       {shards}\nstate_digest {} (over the shards' digests)\n",
        esim_transport::shards::combined_digest(&digests)
    );
    out.insert_str(0, &header);
    let _ = writeln!(out, "entries      {entries}");
    let _ = writeln!(out, "accounts     {accounts}");
    let _ = writeln!(out, "esims        {esims}");
    let _ = writeln!(out, "groups       {groups}");
    let _ = writeln!(
        out,
        "conserved    {}",
        if conserved { "yes (every difference is exactly 0, on every shard)" } else { "NO" }
    );
    let _ = writeln!(out, "replay time  {:.3} s", elapsed.as_secs_f64());
    source.note_live();
    print_out(&out);
    Ok(())
}

/// What `esim replay` and `esim report` read: a data dir, or a store (read-only).
enum Source {
    DataDir(PathBuf),
    Store { url: String, owner: std::cell::RefCell<Option<store_pg::ShardOwner>> },
}

impl Source {
    /// From the arguments (clap requires exactly one).
    fn new(data_dir: Option<PathBuf>, store: Option<String>) -> Source {
        match (data_dir, store) {
            (_, Some(url)) => Source::Store { url, owner: Default::default() },
            (Some(dir), None) => Source::DataDir(dir),
            (None, None) => unreachable!("clap requires --data-dir or --store"),
        }
    }

    /// The shard count of a sharded data dir or store, if this is one.
    fn sharded(&self) -> Result<Option<u32>, String> {
        let shards = match self {
            Source::DataDir(dir) => esim_transport::shards::recorded_shards(dir)?,
            Source::Store { url, .. } => Some(store_pg::read_shard_count(url).map_err(|e| e.to_string())?),
        };
        Ok(shards.filter(|&shards| shards > 1))
    }

    /// Shard `shard` of a sharded data dir or store, read-only.
    fn recover_shard(&self, shard: u32, until: Option<Millis>) -> Result<journal::Recovery, String> {
        match self {
            Source::DataDir(dir) => journal::recover(
                &esim_transport::shards::shard_dir(dir, shard),
                &RecoverOptions { repair: false, until },
            )
            .map_err(|e| e.to_string()),
            Source::Store { url, .. } => {
                let (recovery, _) = store_pg::read_only_shard(url, shard as i32, until).map_err(|e| e.to_string())?;
                Ok(recovery)
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Source::DataDir(dir) => dir.display().to_string(),
            Source::Store { .. } => "the store".into(),
        }
    }

    fn recover(&self, until: Option<Millis>) -> Result<journal::Recovery, String> {
        match self {
            Source::DataDir(dir) => {
                journal::recover(dir, &RecoverOptions { repair: false, until }).map_err(|e| e.to_string())
            }
            Source::Store { url, owner } => {
                let (recovery, found) = store_pg::read_only(url, until).map_err(|e| e.to_string())?;
                *owner.borrow_mut() = found;
                Ok(recovery)
            }
        }
    }

    /// Says on stderr that a live server may be appending while this reads.
    fn note_live(&self) {
        match self {
            Source::DataDir(dir) => note_live(dir),
            Source::Store { owner, .. } => {
                if let Some(owner) = owner.borrow().as_ref().filter(|o| o.lease_left_s > 0.0) {
                    eprintln!(
                        "esim: note: shard 0 of the store is held by {} (epoch {}, lease for {:.1} s more); shown as of \
                         its head when read",
                        owner.owner, owner.epoch, owner.lease_left_s
                    );
                }
            }
        }
    }
}

/// `esim replay` and `esim report` read a data dir without taking it over: on a live one
/// (a server holds its lock) they say so; what they show is as of the last complete
/// record.
fn note_live(data_dir: &Path) {
    if let Some(pid) = esim_transport::lock::DataDirLock::holder(data_dir) {
        eprintln!(
            "esim: note: {} is in use by a running service (pid {pid}); shown as of its last complete journal record",
            data_dir.display()
        );
    }
}

/// Writes a command's output; a reader that went away (`| head -1`) ends it quietly.
fn print_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("esim: cannot write the output: {error}");
            std::process::exit(1)
        }
        Ok(()) => {}
    }
}

fn report_conservation(
    source: Source,
    account: Option<&str>,
    format: &str,
    from: Option<&str>,
    until: Option<&str>,
) -> Result<(), String> {
    let period = esim_engine::finance::Period::parse(from, until)?;
    if let Some(shards) = source.sharded()? {
        let recoveries = recover_shards(&source, shards, None)?;
        let engines: Vec<&Engine> = recoveries.iter().filter_map(|r| r.engine.as_ref()).collect();
        let report = match account {
            // The account's shard shows it as an unsharded service would.
            Some(id) => engines[esim_transport::shards::shard_of_account_id(id, shards as usize)]
                .finance_report(Some(id), period)
                .ok_or_else(|| format!("no account {id}"))?,
            None => {
                let generated_at = engines.iter().map(|e| e.now()).max().expect("at least two shards").to_rfc3339();
                let parts = engines
                    .iter()
                    .enumerate()
                    .map(|(shard, engine)| {
                        (format!("shard-{shard}"), None, engine.finance_report(None, period).expect("all accounts"))
                    })
                    .collect();
                esim_transport::shards::combine_reports(generated_at, parts)
            }
        };
        source.note_live();
        print_out(&report.render(format).expect("format checked by clap"));
        return if report.conserved { Ok(()) } else { Err("money is not conserved: see the difference lines".into()) };
    }
    let recovery = source.recover(None)?;
    let Some(engine) = recovery.engine else { return Err(format!("{} holds no journal", source.name())) };
    let report =
        engine.finance_report(account, period).ok_or_else(|| format!("no account {}", account.unwrap_or("")))?;
    source.note_live();
    print_out(&report.render(format).expect("format checked by clap"));
    if report.conserved {
        Ok(())
    } else {
        Err("money is not conserved: see the difference lines".into())
    }
}

/// Logs on stderr in `format` (`text` or `json`), filtered by RUST_LOG (default
/// `info`); colour only when stderr is a terminal (a file or a pipe gets plain text).
fn init_logging(format: &str, serving: bool, buffer_lines: u32) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let (writer, guard) = if serving {
        // The service writes a line per request: written where it is made, a reader of
        // stderr that stops (a stuck collector, a full pipe) would stop every worker
        // thread in `write` and with them the service (decision 212). A thread of its
        // own writes them from a bounded queue; what does not fit is dropped and counted.
        let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
            .buffered_lines_limit(buffer_lines as usize)
            .lossy(true)
            .thread_name("esim-log")
            .finish(std::io::stderr());
        let dropped = writer.error_counter();
        esim_transport::metrics::count_log_drops(move || dropped.dropped_lines() as u64);
        (BoxMakeWriter::new(writer), Some(guard))
    } else {
        // A one-shot command: its few lines are written where they are made.
        (BoxMakeWriter::new(std::io::stderr), None)
    };
    let logs = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        "json" => logs.json().init(),
        _ => logs.init(),
    }
    guard
}

/// Installs the SIGINT and SIGTERM handlers now, and returns what resolves on either: a
/// caller installs them before it says it listens, so a SIGTERM right after that line is
/// a graceful stop, not the default death.
#[cfg(unix)]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Held to the end: dropping it writes out the lines still queued.
    let log_writer = init_logging(&cli.log_format, matches!(cli.command, Commands::Serve(_)), cli.log_buffer_lines);
    let result = match cli.command {
        Commands::Serve(args) => {
            let served = serve(args);
            // The last line of a service's log says it has stopped, and how.
            match &served {
                Ok(()) => tracing::info!("service stopped"),
                Err(error) => tracing::error!(%error, "service stopped"),
            }
            served
        }
        Commands::Sim(args) => simulate(args),
        Commands::Replay(args) => replay(args),
        Commands::Repair(args) => repair::run(args),
        Commands::Scenario(args) => scenario(args),
        Commands::Report { report: ReportKind::Conservation { data_dir, store, account, format, from, until } } => {
            report_conservation(
                Source::new(data_dir, store),
                account.as_deref(),
                &format,
                from.as_deref(),
                until.as_deref(),
            )
        }
    };
    // The queued lines first, then the last word.
    drop(log_writer);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("esim: {message}");
            ExitCode::FAILURE
        }
    }
}
