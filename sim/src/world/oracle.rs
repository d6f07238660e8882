//! The idempotency oracle: what the engine must do with a request carrying an
//! `Idempotency-Key`, worked out from the world's own record of what it stored.

use bytes::Bytes;
use esim_engine::Millis;
use std::collections::BTreeMap;

/// Idempotency-Key entries live this long (the engine's `IDEMPOTENCY_TTL_MS`).
const IDEMPOTENCY_TTL_MS: i64 = esim_engine::limits::IDEMPOTENCY_TTL_MS;

/// What the world expected of a request with an `Idempotency-Key`.
#[derive(Clone, Debug, PartialEq)]
pub enum Idempotency {
    /// No key, or one the engine cannot store (reads, unknown keys).
    None,
    /// First use of the key: executed, and stored if final.
    Fresh,
    /// The same request again within 24 hours: the stored status and bytes, exactly.
    Replay { status: u16, body: Bytes },
    /// The same key with another request: 409 IDEMPOTENCY_KEY_REUSED.
    Conflict,
}

/// A request as the engine compares it under one key: method, path (with the query) and
/// body.
pub(super) type Fingerprint = (http::Method, String, Bytes);

/// An Idempotency-Key the engine stored, as the world saw it.
struct Stored {
    request: Fingerprint,
    status: u16,
    body: Bytes,
    at: Millis,
}

/// Every Idempotency-Key the engine stored, by (engine account, key).
#[derive(Default)]
pub(super) struct IdempotencyOracle {
    stored: BTreeMap<(u32, String), Stored>,
}

impl IdempotencyOracle {
    /// What a request under `key` of `account` must get at `now` (the caller has checked
    /// that it is a write that reaches the engine's store with a valid key).
    pub(super) fn expect(&self, account: u32, key: &str, request: &Fingerprint, now: Millis) -> Idempotency {
        match self.stored.get(&(account, key.to_string())) {
            Some(stored) if now.0 < stored.at.0 + IDEMPOTENCY_TTL_MS => {
                if stored.request == *request {
                    Idempotency::Replay { status: stored.status, body: stored.body.clone() }
                } else {
                    Idempotency::Conflict
                }
            }
            _ => Idempotency::Fresh,
        }
    }

    /// Records the answer to a fresh request under `key` of `account`.
    pub(super) fn store(
        &mut self,
        account: u32,
        key: &str,
        request: Fingerprint,
        status: u16,
        body: Bytes,
        at: Millis,
    ) {
        self.stored.insert((account, key.to_string()), Stored { request, status, body, at });
    }
}

/// Whether the engine keeps an answer under its key. Only final answers are kept: never
/// a 5xx (an upstream 502 is worth a retry), a 401, a 429 of the rate limit or the
/// answer of a webhook test.
pub(super) fn is_final(status: u16, rate_limited: bool, webhook_test: bool) -> bool {
    status != 401 && status < 500 && !rate_limited && !webhook_test
}
