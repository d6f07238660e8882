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

/// Limits of the spec, as named constants.
pub mod limits {
    /// Page size of a list without `limit`.
    pub const PAGE_DEFAULT: u64 = 50;
    /// Largest page: a bigger `limit` is clamped to it (decision 24).
    pub const PAGE_MAX: u64 = 100;
    /// Groups per account (spec Limits); the operator may set another per account.
    pub const MAX_GROUPS: u32 = 10;
    /// eSIMs per group, pending moves included (spec Limits).
    pub const MAX_GROUP_SIZE: u32 = 500;
    /// Webhooks per account: the sixth answers 429 (decision 35).
    pub const MAX_WEBHOOKS: usize = 5;
    /// Consecutive failed attempts after which a webhook turns inactive (decision 38).
    pub const WEBHOOK_DISABLE_AT: u32 = 10;
    /// After a secret rotation, how long the previous secret still signs deliveries
    /// beside the new one (decision 116).
    pub const SECRET_ROTATION_OVERLAP_MS: i64 = 24 * crate::Millis::HOUR;
    /// Active API keys per account that the reseller may reach by making keys itself
    /// (`POST /keys` past it answers 429, decision 128); the operator's keys are not capped.
    pub const API_KEYS_PER_ACCOUNT_MAX: usize = 20;
    /// How long a revoked key's record is kept (service time) before a timer drops it:
    /// long enough for an operator to tell a revoked key from one never issued and for
    /// a repeated revocation to answer as the first did; short enough that key churn
    /// cannot grow the state without bound (decision 231).
    pub const REVOKED_KEY_RETENTION_MS: i64 = 30 * crate::Millis::DAY;
    /// Auto-refill charges in 24 hours: the next one switches auto-refill off (decision 34).
    pub const AUTO_REFILL_MAX_PER_DAY: usize = 10;
    /// How long an `Idempotency-Key` replays its stored answer (decision 40).
    pub const IDEMPOTENCY_TTL_MS: i64 = 24 * crate::Millis::HOUR;
    /// Stored answers per account at most: past it the oldest is dropped first, so
    /// requests with fresh keys cannot grow the state without bound.
    pub const IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX: usize = 10_000;
    /// Longest `Idempotency-Key`.
    pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
    /// Length of a rate-limit window (decision 41).
    pub const RATE_WINDOW_MS: i64 = crate::Millis::MINUTE;
    /// Webhook retries: 30 s, 1 min, 2 min, ... doubling, each wait capped at 6 hours,
    /// given up 3 days after the first attempt.
    pub const RETRY_BASE_MS: i64 = 30 * crate::Millis::SECOND;
    /// Longest wait between two retries.
    pub const RETRY_MAX_WAIT_MS: i64 = 6 * crate::Millis::HOUR;
    /// Retries stop this long after the first attempt.
    pub const RETRY_WINDOW_MS: i64 = 3 * crate::Millis::DAY;
    /// Longest free-text field (labels, references, names, URLs).
    pub const MAX_TEXT_LEN: usize = 256;
    /// How long the events API keeps an event (decision 113).
    pub const EVENT_RETENTION_MS: i64 = 30 * crate::Millis::DAY;
    /// Delivery attempts a webhook's log keeps (`GET /webhooks/{id}/deliveries`),
    /// newest kept; older ones also leave after `EVENT_RETENTION_MS` (decision 118).
    pub const DELIVERY_LOG_PER_WEBHOOK_MAX: usize = 200;
    /// Longest error text a delivery log entry keeps (a receiver's or resolver's
    /// message is cut there, on a character boundary).
    pub const DELIVERY_ERROR_TEXT_MAX: usize = 300;
    /// Largest single usage report from a device, in MB.
    pub const MAX_USAGE_MB: i64 = 1_000_000;
}

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
