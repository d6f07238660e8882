//! What every path of `esim serve` shares once its settings are read ([`Start`]), and
//! how a path runs to its end.

use super::key_file::KeyFile;
use super::{ServeOptions, Shutdown, RUNTIME_STOP_WAIT};
use crate::journal::SegmentHeader;
use std::future::Future;
use tokio::net::TcpListener;

/// What every path of a start shares once the settings are read: the options, the key
/// file (read, not yet made), the header of a new state, the runtime and the signals.
pub(crate) struct Start {
    pub options: ServeOptions,
    pub keys: KeyFile,
    /// The header a new journal starts with (drawn once: a new store records it when
    /// this process takes its shard, a new data dir in its first segment).
    pub fresh: SegmentHeader,
    pub runtime: tokio::runtime::Runtime,
    /// SIGINT and SIGTERM, handled from the start on (a standby stops on them too).
    pub shutdown: Shutdown,
}

impl Start {
    /// The listener, bound on the runtime.
    pub fn bind(&self) -> Result<TcpListener, String> {
        let listen = &self.options.listen;
        self.runtime.block_on(crate::edge::listen(listen)).map_err(|e| format!("cannot listen on {listen}: {e}"))
    }
}

/// Runs `served` on `runtime` to its end; a blocking task stuck in a frozen disk or
/// store is not waited for at exit.
pub(crate) fn run_to_end(
    runtime: tokio::runtime::Runtime,
    served: impl Future<Output = Result<(), String>>,
) -> Result<(), String> {
    let result = runtime.block_on(served);
    runtime.shutdown_timeout(RUNTIME_STOP_WAIT);
    result
}
