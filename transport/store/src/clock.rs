//! The wall clock a store stamps what it writes with (when a snapshot was written). A
//! store is handed one ([`Clock`]) rather than reading the time in place, so that the
//! shell, a test or a simulation decides what "now" is; [`SystemClock`] is the default.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where a store reads the wall time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (0 when the system clock is before it).
    fn unix_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_ms(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
    }
}
