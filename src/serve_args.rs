//! `esim serve`'s flags, grouped as its help shows them, and their mapping into the
//! library's [`ServeOptions`].

use crate::LogArgs;
use clap::Args;
use esim_http::deploy::{self, logging::LOG_BUFFER_LINES_DEFAULT, ServeOptions};
use esim_http::{edge, pool, server, store_pg, ClockMode};
use std::path::PathBuf;

/// The end of `esim serve --help`: what the log lines carry, and the operator endpoints.
pub const SERVE_AFTER_HELP: &str = "\
Logs (stderr):
  RUST_LOG   which lines, e.g. RUST_LOG=warn, RUST_LOG=info,esim_http=debug (tracing's
             EnvFilter syntax; default info); --log-format text|json (ESIM_LOG_FORMAT) how.
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

/// `esim serve`'s flags, in the groups of its help: what a first start needs, then the
/// state's keys and time, the store, the shards, the limits, the logs.
#[derive(Args)]
pub struct ServeArgs {
    /// Bind address; port 0 picks a free port.
    #[arg(long, env = "ESIM_LISTEN", default_value = deploy::LISTEN_DEFAULT, help_heading = "Essentials")]
    listen: String,
    /// Journal and snapshots; created when missing. With `--store`, only the generated
    /// admin token file is kept here (no journal, no lock).
    #[arg(long, env = "ESIM_DATA_DIR", default_value = deploy::DATA_DIR_DEFAULT, help_heading = "Essentials")]
    data_dir: PathBuf,
    /// `virtual`: time moves only through POST /sandbox/v1/clock/advance.
    #[arg(long, env = "ESIM_CLOCK", default_value = "wall", value_parser = ["wall", "virtual"], help_heading = "Essentials")]
    clock: String,
    /// Wall clock only: service time runs N times faster than real time (default 1;
    /// refused with `--clock virtual`, where only clock/advance moves time).
    #[arg(long, env = "ESIM_SPEED", value_parser = clap::value_parser!(u32).range(1..=100_000), help_heading = "Essentials")]
    speed: Option<u32>,
    /// Token of the admin and sandbox APIs (default: generated into DIR/admin-token).
    #[arg(long, env = "ESIM_ADMIN_TOKEN", hide_env_values = true, help_heading = "Essentials")]
    admin_token: Option<String>,
    /// Create a demo account with a $100 top-up and print its API key (default: on a new
    /// data dir; `--demo=false` or ESIM_DEMO=0 turns it off).
    #[arg(long, env = "ESIM_DEMO", num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new(), help_heading = "Essentials")]
    demo: Option<bool>,
    /// Seed of the engine's randomness on a new data dir (default: from the OS).
    #[arg(long, env = "ESIM_SEED", help_heading = "Keys, seed and time")]
    seed: Option<u64>,
    /// The 256-bit key that seals webhook signing secrets at rest; kept outside the data
    /// dir (a copy of the data dir then reveals no secret). Made, mode 0600, by a start
    /// that holds no sealed secret yet, once its other checks have passed; never by a
    /// standby, which needs the owner's key file. A file its group or others may read is
    /// refused. Default: $XDG_CONFIG_HOME/esim/secret-key, else ~/.config/esim/secret-key.
    /// A data dir must always be served with the key file it was made with.
    #[arg(long, env = "ESIM_SECRET_KEY_FILE", help_heading = "Keys, seed and time")]
    secret_key_file: Option<PathBuf>,
    /// Accept http:// webhook URLs and loopback or private targets (local development only).
    #[arg(long, env = "ESIM_ALLOW_INSECURE_WEBHOOKS", value_parser = clap::builder::FalseyValueParser::new(), help_heading = "Keys, seed and time")]
    allow_insecure_webhooks: bool,
    /// Start on the wall clock even when the state's last service time is more than 5
    /// minutes ahead of it (made on the virtual clock, or at a higher speed): service
    /// time then continues from there, that far ahead for good. Without it such a start
    /// is refused, naming both times.
    #[arg(long, env = "ESIM_ALLOW_TIME_AHEAD", value_parser = clap::builder::FalseyValueParser::new(), help_heading = "Keys, seed and time")]
    allow_time_ahead: bool,
    /// The journal and snapshots in PostgreSQL instead of the data dir: a `postgres://`
    /// URL (or libpq `key=value` settings). The schema is migrated on start and this
    /// process takes the store's shard: a process that served it before acknowledges no
    /// more changes. Default: the data dir's file journal.
    #[arg(long, env = "ESIM_STORE", hide_env_values = true, help_heading = "Store (PostgreSQL) and standby")]
    store: Option<String>,
    /// With `--store`: the owner's lease in milliseconds (default 3000). The owner renews
    /// it every third of it; a standby takes the shard over once it has run out. Every
    /// process on one store should use the same value.
    #[arg(long, env = "ESIM_LEASE_MS", default_value_t = store_pg::LEASE_MS, help_heading = "Store (PostgreSQL) and standby",
          value_parser = clap::value_parser!(u64).range(*store_pg::LEASE_MS_RANGE.start()..=*store_pg::LEASE_MS_RANGE.end()))]
    lease_ms: u64,
    /// With `--store`: take the shard even while another process's lease is live (a
    /// planned switch-over; the other process is fenced at its next append or renewal).
    /// Without it, such a start becomes a standby. Refused (nothing taken) when this
    /// process could not serve the shard: its key file does not open the sealed secrets.
    #[arg(long, env = "ESIM_TAKE_OVER", value_parser = clap::builder::FalseyValueParser::new(), help_heading = "Store (PostgreSQL) and standby")]
    take_over: bool,
    /// Accounts spread over this many engines (1 to 64), each with its own journal in
    /// DIR/shard-<k>/ and its own owner task; every id names its shard, so requests
    /// route without a lookup. Fixed when the data dir is made (recorded in DIR/shards);
    /// a later start with another count is refused. Default: what the data dir holds (1
    /// for a new one, which is the unsharded layout). With `--store`, the count is
    /// recorded in the store when it is made, and each shard has its own owner row,
    /// journal and snapshots there.
    #[arg(long, env = "ESIM_SHARDS", value_parser = clap::value_parser!(u32).range(1..=64), help_heading = "Shards and nodes")]
    shards: Option<u32>,
    /// With --shards above 1: eSIMs a shard takes from the global inventory pool at once
    /// (DIR/pool on the data dir's file journals, the `inventory_pool` row of a
    /// `--store`); it takes the next block when its own count falls to a quarter of this
    /// (decisions 185-191).
    #[arg(long, env = "ESIM_POOL_BLOCK", default_value_t = pool::BLOCK_ESIMS,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000), help_heading = "Shards and nodes")]
    pool_block: u64,
    /// With `--store`: the shards this node takes and serves, e.g. `0,1` (default: every
    /// shard). A request for another shard is forwarded to its owner, whose address the
    /// store holds, so clients may call any node.
    #[arg(long, env = "ESIM_OWN_SHARDS", value_delimiter = ',', num_args = 1.., help_heading = "Shards and nodes")]
    own_shards: Option<Vec<u32>>,
    /// With `--store` and shards: the shards this node follows as their hot standby, e.g.
    /// `2,3`: it keeps each one's engine current from the store's journal, forwards its
    /// requests to its owner meanwhile, and takes the shard over once the owner's lease
    /// runs out (the owner died or stalled), serving it from then on. None of them may be
    /// in `--own-shards`; without `--own-shards` the node owns no shard at start.
    #[arg(long, env = "ESIM_STANDBY_SHARDS", value_delimiter = ',', num_args = 1.., help_heading = "Shards and nodes")]
    standby_shards: Option<Vec<u32>>,
    /// With `--store` and shards: the URL other nodes forward this node's shards'
    /// requests to, written to each owner row it takes (default: `http://` and the bound
    /// listen address; set it when listening on 0.0.0.0 or behind a NAT).
    #[arg(long, env = "ESIM_ADVERTISE_URL", help_heading = "Shards and nodes")]
    advertise_url: Option<String>,
    /// Open connections at most (lowered to fit the descriptor limit, `ulimit -n`); at
    /// the cap, new connections wait in the listen backlog.
    #[arg(long, env = "ESIM_MAX_CONNECTIONS", default_value_t = edge::CONNECTIONS_MAX, help_heading = "Limits",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Open connections at most from one client address (an IPv6 /64), never more than
    /// three quarters of --max-connections; over it, new connections are closed at once
    /// (decision 216). Raise it for a reverse proxy on the same host (one address).
    #[arg(long, env = "ESIM_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = edge::CONNECTIONS_PER_ADDRESS_MAX,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..), help_heading = "Limits")]
    max_connections_per_address: usize,
    /// How long a request waits for its change to be durable (the journal's append)
    /// before it is answered 503 with `Retry-After` (its change may still become durable:
    /// a retry with the same Idempotency-Key finds out). With `--store`, an append's
    /// transaction is also given up after it and its outcome read back.
    #[arg(long, env = "ESIM_APPEND_DEADLINE_MS", default_value_t = server::APPEND_DEADLINE_MS, help_heading = "Limits",
          value_parser = clap::value_parser!(u64).range(*server::APPEND_DEADLINE_MS_RANGE.start()..=*server::APPEND_DEADLINE_MS_RANGE.end()))]
    append_deadline_ms: u64,
    #[command(flatten)]
    pub log: LogArgs,
    /// Log lines held for stderr's reader at most: they are written by a thread of their
    /// own, and while the reader lags further behind, new lines are dropped (and counted
    /// in `esim_log_lines_dropped_total` on /metrics), never waited for.
    #[arg(long, env = "ESIM_LOG_BUFFER_LINES", default_value_t = LOG_BUFFER_LINES_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..), help_heading = "Logging")]
    pub log_buffer_lines: u32,
}

/// The library's options from `esim serve`'s flags.
pub fn serve_options(args: ServeArgs) -> ServeOptions {
    ServeOptions {
        listen: args.listen,
        data_dir: args.data_dir,
        clock: if args.clock == "virtual" { ClockMode::Virtual } else { ClockMode::Wall },
        speed: args.speed,
        allow_time_ahead: args.allow_time_ahead,
        seed: args.seed,
        admin_token: args.admin_token,
        secret_key_file: args.secret_key_file,
        allow_insecure_webhooks: args.allow_insecure_webhooks,
        demo: args.demo,
        store: args.store,
        lease_ms: args.lease_ms,
        take_over: args.take_over,
        append_deadline_ms: args.append_deadline_ms,
        shards: args.shards,
        pool_block: args.pool_block,
        own_shards: args.own_shards,
        standby_shards: args.standby_shards,
        advertise_url: args.advertise_url,
        max_connections: args.max_connections,
        max_connections_per_address: args.max_connections_per_address,
    }
}
