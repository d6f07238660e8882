//! Limits of the spec, as named constants, and the paging rule that applies two of
//! them. A leaf: every part of the engine, and the crates above it, read it.

use crate::error::ApiError;
use crate::time::Millis;

/// Page size of a list without `limit`.
pub const PAGE_DEFAULT: u64 = 50;
/// Largest page: a bigger `limit` is clamped to it (decision 24).
pub const PAGE_MAX: u64 = 100;
/// Groups per account (spec Limits); the operator may set another per account.
pub const MAX_GROUPS: u32 = 10;
/// eSIMs per group, pending moves included (spec Limits).
pub const MAX_GROUP_SIZE: u32 = 500;
/// The largest group limit (`max_groups`, `max_group_size`) the operator may set; the
/// smallest is 1.
pub const OPERATOR_LIMIT_MAX: u32 = 100_000;
/// Webhooks per account: the sixth answers 429 (decision 35).
pub const MAX_WEBHOOKS: usize = 5;
/// Consecutive failed attempts after which a webhook turns inactive (decision 38).
pub const WEBHOOK_DISABLE_AT: u32 = 10;
/// After a secret rotation, how long the previous secret still signs deliveries
/// beside the new one (decision 116).
pub const SECRET_ROTATION_OVERLAP_MS: i64 = 24 * Millis::HOUR;
/// Active API keys per account that the reseller may reach by making keys itself
/// (`POST /keys` past it answers 429, decision 128); the operator's keys are not capped.
pub const API_KEYS_PER_ACCOUNT_MAX: usize = 20;
/// How long a revoked key's record is kept (service time) before a timer drops it:
/// long enough for an operator to tell a revoked key from one never issued and for
/// a repeated revocation to answer as the first did; short enough that key churn
/// cannot grow the state without bound (decision 231).
pub const REVOKED_KEY_RETENTION_MS: i64 = 30 * Millis::DAY;
/// Auto-refill charges in 24 hours: the next one switches auto-refill off (decision 34).
pub const AUTO_REFILL_MAX_PER_DAY: usize = 10;
/// How long an `Idempotency-Key` replays its stored answer (decision 40).
pub const IDEMPOTENCY_TTL_MS: i64 = 24 * Millis::HOUR;
/// Stored answers per account at most: past it the oldest is dropped first, so
/// requests with fresh keys cannot grow the state without bound.
pub const IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX: usize = 10_000;
/// Longest `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
/// Length of a rate-limit window (decision 41).
pub const RATE_WINDOW_MS: i64 = Millis::MINUTE;
/// Webhook retries: 30 s, 1 min, 2 min, ... doubling, each wait capped at 6 hours,
/// given up 3 days after the first attempt.
pub const RETRY_BASE_MS: i64 = 30 * Millis::SECOND;
/// Longest wait between two retries.
pub const RETRY_MAX_WAIT_MS: i64 = 6 * Millis::HOUR;
/// Retries stop this long after the first attempt.
pub const RETRY_WINDOW_MS: i64 = 3 * Millis::DAY;
/// Longest free-text field (labels, references, names, URLs).
pub const MAX_TEXT_LEN: usize = 256;
/// How long the events API keeps an event (decision 113).
pub const EVENT_RETENTION_MS: i64 = 30 * Millis::DAY;
/// Delivery attempts a webhook's log keeps (`GET /webhooks/{id}/deliveries`),
/// newest kept; older ones also leave after `EVENT_RETENTION_MS` (decision 118).
pub const DELIVERY_LOG_PER_WEBHOOK_MAX: usize = 200;
/// Longest error text a delivery log entry keeps (a receiver's or resolver's
/// message is cut there, on a character boundary).
pub const DELIVERY_ERROR_TEXT_MAX: usize = 300;
/// Largest single usage report from a device, in MB.
pub const MAX_USAGE_MB: i64 = 1_000_000;

/// Checks and clamps list paging: limit default 50, 1 to 100 (above 100 is clamped).
pub fn page(limit: Option<u64>, offset: Option<u64>) -> Result<(u64, u64), ApiError> {
    let limit = limit.unwrap_or(PAGE_DEFAULT);
    if limit == 0 {
        return Err(ApiError::validation("limit must be at least 1"));
    }
    Ok((limit.min(PAGE_MAX), offset.unwrap_or(0)))
}
