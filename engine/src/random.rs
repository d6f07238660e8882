//! The engine's randomness: every id, serial and matching id comes from seeded ChaCha20
//! streams kept in the state, one stream per [`Purpose`]. A part of the engine that owns
//! its streams; the engine asks it for bytes (`Engine::random_bytes` and its kin).

use crate::ids::hex;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

/// What a random draw is for. Each purpose draws from its own ChaCha20 stream of the
/// seed (same key, its own stream number), so a new draw for one purpose leaves every
/// other purpose's values as they were: an extra event no longer renumbers the eSIMs
/// and groups made after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Ids of things resellers keep: accounts, eSIMs, groups, webhooks.
    ResourceId,
    /// Event ids (`evt_`), which every state change draws.
    EventId,
    /// Ids of money movements: top-ups (`top_`) and card charges (`pi_`).
    PaymentId,
    /// The first ICCID serial.
    Serial,
    /// The matching ids of activation codes.
    MatchingId,
}

impl Purpose {
    /// Ids a request routes by (accounts, eSIM and group UUIDs, webhooks, events): on a
    /// sharded service their first byte names the shard (decision 168).
    fn routes(self) -> bool {
        matches!(self, Purpose::ResourceId | Purpose::EventId)
    }
}

/// The engine's random streams, one per [`Purpose`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Randomness {
    resource_ids: ChaCha20Rng,
    event_ids: ChaCha20Rng,
    payment_ids: ChaCha20Rng,
    serials: ChaCha20Rng,
    matching_ids: ChaCha20Rng,
}

impl Randomness {
    /// The streams of `seed`: one ChaCha20 key, stream numbers 1 to 5.
    pub(crate) fn new(seed: u64) -> Randomness {
        let stream = |number: u64| {
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            rng.set_stream(number);
            rng
        };
        Randomness {
            resource_ids: stream(1),
            event_ids: stream(2),
            payment_ids: stream(3),
            serials: stream(4),
            matching_ids: stream(5),
        }
    }

    fn stream(&mut self, purpose: Purpose) -> &mut ChaCha20Rng {
        match purpose {
            Purpose::ResourceId => &mut self.resource_ids,
            Purpose::EventId => &mut self.event_ids,
            Purpose::PaymentId => &mut self.payment_ids,
            Purpose::Serial => &mut self.serials,
            Purpose::MatchingId => &mut self.matching_ids,
        }
    }

    /// Fills `bytes` from `purpose`'s stream. With a `shard` (a sharded service), the
    /// first byte of an id a request routes by is that shard, so a node reads the shard
    /// from the id without a lookup (decision 168). The draw is made as before and only
    /// that byte replaced: an unsharded engine's ids are unchanged.
    pub(crate) fn fill(&mut self, purpose: Purpose, shard: Option<u8>, bytes: &mut [u8]) {
        self.stream(purpose).fill_bytes(bytes);
        if let (Some(shard), true, Some(first)) = (shard, purpose.routes(), bytes.first_mut()) {
            *first = shard;
        }
    }

    /// `prefix` followed by `2 * bytes` lowercase hex characters.
    pub(crate) fn id(&mut self, purpose: Purpose, shard: Option<u8>, prefix: &str, bytes: usize) -> String {
        let mut raw = vec![0u8; bytes];
        self.fill(purpose, shard, &mut raw);
        format!("{prefix}{}", hex(&raw))
    }
}
