//! # The deployment wiring: what each `esim` command does, as library functions
//!
//! The binary (`src/main.rs`) parses its arguments into the plain options structs of this
//! module and calls one function per command: [`serve()`], [`replay()`],
//! [`report_conservation`], [`repair()`]. Nothing here knows the command line, so every
//! start check and rule below is reachable from a unit test, not only from a process.
//!
//! - [`serve()`]: the start of `esim serve` in its order (decision 237): the settings,
//!   the key file, the lock, the listener, the recovered state checked, and only then the
//!   first write. One engine on a data dir or a one-shard store here; a sharded data dir
//!   in `sharded`, a sharded store's node in [`store_shards`], the standbys in
//!   [`standby_shard`].
//! - [`key_file`]: the secret key file a start must open every sealed secret with.
//! - [`start_checks`]: the settings and the recovered state's time against the wall clock.
//! - `engine_start`: the journal header, engine and service a start continues from or
//!   makes; the demo account and the admin token.
//! - [`replay`](mod@replay): `esim replay` and `esim report conservation`, read-only.
//! - [`logging`]: stderr's log, written by a thread of its own while serving.

mod engine_start;
pub mod key_file;
pub mod logging;
mod repair;
pub mod replay;
mod serve;
mod sharded;
pub mod standby_shard;
mod start;
pub mod start_checks;
pub mod store_shards;

pub use engine_start::{new_header, shard_header, DEMO_EMAIL};
pub use logging::{init_logging, LogFormat, LogGuard};
pub use repair::{repair, RepairOptions};
pub use replay::{replay, report_conservation, ReplayOptions, ReportOptions, Source};
pub use serve::serve;

use crate::ClockMode;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

/// The interface version of the service (the reseller API and the operator interface it
/// implements), shown by `esim --version` next to the crate's own version.
pub const INTERFACE_VERSION: &str = "2.0";

/// The default of `--listen`.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8080";

/// The default data dir of `esim serve`, `esim replay` and `esim report`.
pub const DATA_DIR_DEFAULT: &str = "./esim-data";

/// Everything `esim serve` is told (`esim serve --help` documents each one).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Bind address; port 0 picks a free port.
    pub listen: String,
    /// Journal, snapshots and the admin token file (with a store: the token file only).
    pub data_dir: PathBuf,
    /// Service time from the wall clock, or moved only by the sandbox's clock advance.
    pub clock: ClockMode,
    /// Wall clock only: service time runs this many times faster (`None`: 1).
    pub speed: Option<u32>,
    /// Start even when the state's service time is far ahead of the wall clock.
    pub allow_time_ahead: bool,
    /// Seed of a new state's randomness (`None`: from the OS).
    pub seed: Option<u64>,
    /// The admin token (`None` or empty: the data dir's token file, made when missing).
    pub admin_token: Option<String>,
    /// The sealing key's file (`None`: the per-user default).
    pub secret_key_file: Option<PathBuf>,
    /// Accept http:// webhooks and private targets (local development only).
    pub allow_insecure_webhooks: bool,
    /// The demo account: `None` makes it on a new state only.
    pub demo: Option<bool>,
    /// The journal in PostgreSQL instead of the data dir.
    pub store: Option<String>,
    /// The owner's lease on a store's shard.
    pub lease_ms: u64,
    /// With a store: take a shard even while another process's lease is live.
    pub take_over: bool,
    /// How long a request waits for its change to be durable.
    pub append_deadline_ms: u64,
    /// Engines the accounts are spread over (`None`: what the data dir or store holds).
    pub shards: Option<u32>,
    /// eSIMs a shard takes from the global inventory pool at once.
    pub pool_block: u64,
    /// With a sharded store: the shards this node owns (`None`: every one).
    pub own_shards: Option<Vec<u32>>,
    /// With a sharded store: the shards this node follows as their hot standby.
    pub standby_shards: Option<Vec<u32>>,
    /// With a sharded store: the URL other nodes forward to (`None`: the bound address).
    pub advertise_url: Option<String>,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections at most from one client address.
    pub max_connections_per_address: usize,
}

impl Default for ServeOptions {
    /// The defaults of `esim serve` without any flag.
    fn default() -> ServeOptions {
        ServeOptions {
            listen: LISTEN_DEFAULT.into(),
            data_dir: PathBuf::from(DATA_DIR_DEFAULT),
            clock: ClockMode::Wall,
            speed: None,
            allow_time_ahead: false,
            seed: None,
            admin_token: None,
            secret_key_file: None,
            allow_insecure_webhooks: false,
            demo: None,
            store: None,
            lease_ms: crate::store_pg::LEASE_MS,
            take_over: false,
            append_deadline_ms: crate::server::APPEND_DEADLINE_MS,
            shards: None,
            pool_block: crate::pool::BLOCK_ESIMS,
            own_shards: None,
            standby_shards: None,
            advertise_url: None,
            max_connections: crate::edge::CONNECTIONS_MAX,
            max_connections_per_address: crate::edge::CONNECTIONS_PER_ADDRESS_MAX,
        }
    }
}

/// What ends a serving process gracefully (SIGINT or SIGTERM).
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()>>>;

/// How long the end of `esim serve` waits for the runtime's blocking tasks (an append
/// stuck in a frozen disk or store): what they did not confirm was never acknowledged.
const RUNTIME_STOP_WAIT: Duration = Duration::from_secs(2);

/// Installs the SIGINT and SIGTERM handlers now, and returns what resolves on either: a
/// caller installs them before it says it listens, so a SIGTERM right after that line is
/// a graceful stop, not the default death.
#[cfg(unix)]
fn shutdown_signal() -> Result<Shutdown, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    Ok(Box::pin(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }))
}

#[cfg(not(unix))]
fn shutdown_signal() -> Result<Shutdown, String> {
    Ok(Box::pin(async {
        let _ = tokio::signal::ctrl_c().await;
    }))
}

/// Writes a command's output; a reader that went away (`| head -1`) ends it quietly.
pub fn print_out(text: &str) {
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
