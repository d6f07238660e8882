//! `esim`: the Reseller eSIM Connectivity Service.
//!
//! The command line only: each command's arguments are parsed here and handed, as plain
//! options, to one library function (`esim_http::deploy` for the service and its
//! offline tools, `esim_sim` for the simulation). `esim --help` lists the commands.

/// mimalloc instead of the system allocator: the HTTP bench measured reads and durable
/// funds 15 to 20 % faster with it on this machine (decision 162).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod serve_args;

use clap::{Args, Parser, Subcommand};
use esim_http::deploy::{self, LogFormat};
use serve_args::{serve_options, ServeArgs, SERVE_AFTER_HELP};
use std::path::PathBuf;
use std::process::ExitCode;

/// `esim --version`: the crate's version and the interface it implements
/// (`deploy::INTERFACE_VERSION`, checked by tests/cli_help.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (Reseller eSIM Connectivity Service, interface 2.0)");

#[derive(Parser)]
#[command(name = "esim", version = VERSION, about = "Reseller eSIM Connectivity Service v2.0: service, simulation and reports")]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Run the HTTP service (reseller API, admin API and sandbox API on one listener).
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(Box<ServeArgs>),
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
    Repair(RepairArgs),
    /// Replay a scenario script (`scenarios/*.scenario`, or a `violation-seed-N.scenario`
    /// that `esim sim --report DIR` wrote) with every checker after every step; exit 1 on a
    /// failed expectation or a violation.
    Scenario(ScenarioArgs),
}

/// `--log-format`, on the commands that read a data dir or a store.
#[derive(Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format on stderr: `text` for people (colour only on a terminal), `json` for a
    /// log collector (one object per line). Which lines: RUST_LOG (default `info`).
    #[arg(long, env = "ESIM_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

impl LogArgs {
    pub fn format(&self) -> LogFormat {
        if self.log_format == "json" {
            LogFormat::Json
        } else {
            LogFormat::Text
        }
    }
}

/// Where an offline command reads: a data dir (default `./esim-data`, as `esim serve`)
/// or a store.
#[derive(Args)]
struct SourceArgs {
    /// The data dir of `esim serve`.
    #[arg(long, default_value = deploy::DATA_DIR_DEFAULT)]
    data_dir: PathBuf,
    /// A PostgreSQL store (`esim serve --store`), read without taking its shard; instead of --data-dir.
    #[arg(long, conflicts_with = "data_dir")]
    store: Option<String>,
}

#[derive(Args)]
struct ReplayArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Stop before the first entry later than this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    #[command(flatten)]
    log: LogArgs,
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
    Conservation(ConservationArgs),
}

#[derive(Args)]
struct ConservationArgs {
    #[command(flatten)]
    source: SourceArgs,
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
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args)]
struct RepairArgs {
    /// The data dir of `esim serve` (refused while a running process holds it).
    #[arg(long)]
    data_dir: PathBuf,
    /// Cut the damaged segment at the damage offset and remove every later segment,
    /// dropping the entries listed (when entries are missing, a segment deleted or cut
    /// short, every segment after the gap is removed). Without it nothing is changed: the
    /// damage and what cutting would drop are only reported.
    #[arg(long)]
    cut_at_damage: bool,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Args)]
struct SimArgs {
    /// Seeds to run, as A..B (B excluded).
    #[arg(long, conflicts_with = "seed", value_parser = esim_sim::cli::parse_seed_range)]
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

/// The simulation's options from `esim sim`'s flags (default: seeds 0..1000).
fn sim_options(args: SimArgs) -> esim_sim::SimOptions {
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
    options
}

#[derive(Args)]
struct ScenarioArgs {
    /// The script file.
    file: PathBuf,
    /// Print every request, response, event and delivery (ids shown as names).
    #[arg(long)]
    transcript: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (format, serving) = match &cli.command {
        Commands::Serve(args) => (args.log.format(), Some(args.log_buffer_lines)),
        Commands::Replay(ReplayArgs { log, .. })
        | Commands::Repair(RepairArgs { log, .. })
        | Commands::Report { report: ReportKind::Conservation(ConservationArgs { log, .. }) } => (log.format(), None),
        Commands::Sim(_) | Commands::Scenario(_) => (LogFormat::Text, None),
    };
    // Held to the end: dropping it writes out the lines still queued.
    let log_writer = deploy::init_logging(format, serving);
    let result = match cli.command {
        Commands::Serve(args) => {
            let served = deploy::serve(serve_options(*args));
            // The last line of a service's log says it has stopped, and how.
            match &served {
                Ok(()) => tracing::info!("service stopped"),
                Err(error) => tracing::error!(%error, "service stopped"),
            }
            served
        }
        Commands::Sim(args) => esim_sim::cli::simulate(&sim_options(args)),
        Commands::Replay(args) => deploy::replay(deploy::ReplayOptions {
            data_dir: args.source.data_dir,
            store: args.source.store,
            until: args.until,
        }),
        Commands::Repair(args) => {
            deploy::repair(deploy::RepairOptions { data_dir: args.data_dir, cut_at_damage: args.cut_at_damage })
        }
        Commands::Scenario(args) => esim_sim::cli::scenario(&args.file, args.transcript),
        Commands::Report { report: ReportKind::Conservation(args) } => {
            deploy::report_conservation(deploy::ReportOptions {
                data_dir: args.source.data_dir,
                store: args.source.store,
                account: args.account,
                format: args.format,
                from: args.from,
                until: args.until,
            })
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
