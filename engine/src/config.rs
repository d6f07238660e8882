//! What is fixed when the engine is created: its settings, the limits of the spec,
//! and (with the `test-switches` feature only) the known bugs a test can switch on.

use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Settings fixed when the engine is created (stored in the journal header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    /// Seeds the engine's RNG (ids, serials, matching ids): the same seed and inputs give
    /// the same state, which replay and the simulation rely on.
    pub seed: u64,
    /// Reporting pause after every fund call (spec: about 15 minutes).
    pub reporting_pause_ms: i64,
    /// Time for a defund, move or group defund to settle (spec: about 15 minutes).
    pub settle_delay_ms: i64,
    /// Length of an upstream sync cycle: reported usage moves on cycle boundaries.
    pub sync_interval_ms: i64,
    /// Time for a simulated card charge to settle.
    pub card_settle_ms: i64,
    /// How long group.balance_low waits for an auto-refill credit (spec: about 30 minutes).
    pub group_low_wait_ms: i64,
    /// Accept `http://` and private webhook targets (local development only).
    pub allow_insecure_webhooks: bool,
    /// eSIM profiles in stock on a new service.
    pub initial_inventory: u64,
    /// Requests per minute per API key.
    pub rate_limit_per_minute: u32,
    /// This engine's shard, `0..shard_count` (decision 168). Written only when the
    /// service is sharded, so an unsharded engine's header, snapshots and state digest
    /// keep their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shard: u32,
    /// Shards of the service (1 to [`SHARD_COUNT_MAX`]): with more than one, every id
    /// this engine makes names its shard and ICCID serials step by it (decision 168).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub shard_count: u32,
}

/// Most shards a service may have: a shard index fits in the first random byte of an
/// id, and far more engines than cores would only cost memory.
pub const SHARD_COUNT_MAX: u32 = 64;

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

fn one() -> u32 {
    1
}

impl EngineConfig {
    /// True when this engine is one of several shards (ids then carry its index).
    pub fn sharded(&self) -> bool {
        self.shard_count > 1
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            seed: 0,
            reporting_pause_ms: 15 * Millis::MINUTE,
            settle_delay_ms: 15 * Millis::MINUTE,
            sync_interval_ms: Millis::MINUTE,
            card_settle_ms: 2 * Millis::MINUTE,
            group_low_wait_ms: 30 * Millis::MINUTE,
            allow_insecure_webhooks: false,
            initial_inventory: 100_000,
            rate_limit_per_minute: 100,
            shard: 0,
            shard_count: 1,
        }
    }
}

/// The spec's limits, in their own leaf module (here under their old path too).
pub use crate::limits;

/// Known bugs a test can switch on to prove that the simulation catches them. Only in
/// builds with the `test-switches` feature (tests and the simulation's self-tests): a
/// production build has no bug to switch on (decision 84).
#[cfg(feature = "test-switches")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// An eSIM defund or move settlement credits one cent more than it returns.
    SettlementPaysOneCentMore,
    /// Every eSIM fund panics (a bug in the engine: the server must end, not limp on).
    PanicOnFund,
}
