//! Ids and randomness: every id, serial and matching id comes from the engine's
//! seeded ChaCha20 streams (kept in the state); hex and ICCID helpers.

use crate::engine::Engine;
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
}

impl Engine {
    pub(crate) fn random_bytes<const N: usize>(&mut self, purpose: Purpose) -> [u8; N] {
        let mut bytes = [0u8; N];
        self.randomness.stream(purpose).fill_bytes(&mut bytes);
        self.mark_shard(purpose, &mut bytes);
        bytes
    }

    /// `prefix` followed by `2 * bytes` lowercase hex characters.
    pub(crate) fn random_id(&mut self, purpose: Purpose, prefix: &str, bytes: usize) -> String {
        let mut raw = vec![0u8; bytes];
        self.randomness.stream(purpose).fill_bytes(&mut raw);
        self.mark_shard(purpose, &mut raw);
        format!("{prefix}{}", hex(&raw))
    }

    /// On a sharded service, the first byte of every id a request routes by (accounts,
    /// eSIM and group UUIDs, webhooks, events) is this engine's shard, so a node reads
    /// the shard from the id without a lookup (decision 168). The draw is made as
    /// before and only that byte replaced: an unsharded engine's ids are unchanged.
    fn mark_shard(&self, purpose: Purpose, bytes: &mut [u8]) {
        if self.config.sharded() && matches!(purpose, Purpose::ResourceId | Purpose::EventId) {
            if let Some(first) = bytes.first_mut() {
                *first = self.config.shard as u8;
            }
        }
    }

    /// A random (version 4) UUID: the ids of eSIMs and groups.
    pub(crate) fn random_uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.random_bytes::<16>(Purpose::ResourceId)).into_uuid().to_string()
    }
}

/// An ICCID as its number (all digits, at most 19 of them); anything else is no ICCID.
/// Every eSIM call looks its ICCID up, and 19 dependent multiply-adds were a tenth of a
/// read: the digits go eight at a time ([`eight_digits`]). 19 digits never overflow a
/// `u64` (10^19 - 1 < 2^64).
pub(crate) fn iccid_number(iccid: &str) -> Option<u64> {
    let bytes = iccid.as_bytes();
    if bytes.is_empty() || bytes.len() > 19 {
        return None;
    }
    let (head, blocks) = bytes.split_at(bytes.len() % 8);
    let head = head.iter().try_fold(0u64, |number, byte| {
        let digit = byte.wrapping_sub(b'0');
        (digit <= 9).then(|| number * 10 + u64::from(digit))
    })?;
    blocks.chunks_exact(8).try_fold(head, |number, block| {
        Some(number * 100_000_000 + eight_digits(block.try_into().expect("chunks of eight"))?)
    })
}

/// Eight ASCII digits, the first the most significant, as their number (None if any
/// byte is not a digit), in one `u64` with three multiplies (Lemire's SWAR method).
fn eight_digits(block: &[u8; 8]) -> Option<u64> {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let word = u64::from_le_bytes(*block);
    // A digit's high nibble is 3, and adding 6 leaves it 3 (a byte that carries into
    // the next one has a high nibble of F: it fails on its own).
    let nibbles = (word & HIGH_NIBBLES) | ((word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES) >> 4);
    if nibbles != 0x3333_3333_3333_3333 {
        return None;
    }
    let digits = word - 0x3030_3030_3030_3030;
    // Pairs, then fours, then all eight.
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    const PAIRS: u64 = 0x0000_00FF_0000_00FF;
    let low = (pairs & PAIRS).wrapping_mul(100 + (1_000_000 << 32));
    let high = ((pairs >> 16) & PAIRS).wrapping_mul(1 + (10_000 << 32));
    Some(low.wrapping_add(high) >> 32)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[(byte >> 4) as usize] as char);
        text.push(DIGITS[(byte & 15) as usize] as char);
    }
    text
}

/// ICCID numbers ([`iccid_number`]) to eSIM indexes, as one sorted list: a lookup on
/// every eSIM call. Provisioning issues consecutive serials, and an ICCID is its serial
/// followed by one check digit, so an ICCID's place is first guessed from its serial's
/// distance to the first one (and checked); anything else is a binary search. Written
/// (state digest, snapshots) as the map `{number: index}` in number order, as the
/// `BTreeMap` it replaces was.
#[derive(Clone, Debug, Default)]
pub(crate) struct IccidIndex {
    entries: Vec<(u64, crate::state::EsimIx)>,
}

impl IccidIndex {
    pub(crate) fn get(&self, number: u64) -> Option<crate::state::EsimIx> {
        let &(first, _) = self.entries.first()?;
        if number >= first {
            let guess = (number / 10 - first / 10) as usize;
            if let Some(&(found, sim)) = self.entries.get(guess) {
                if found == number {
                    return Some(sim);
                }
            }
        }
        let at = self.entries.binary_search_by_key(&number, |&(n, _)| n).ok()?;
        Some(self.entries[at].1)
    }

    /// Adds an ICCID; returns the index it had, if it was there already (then unchanged).
    pub(crate) fn insert(&mut self, number: u64, sim: crate::state::EsimIx) -> Option<crate::state::EsimIx> {
        match self.entries.binary_search_by_key(&number, |&(n, _)| n) {
            Ok(at) => Some(self.entries[at].1),
            Err(at) => {
                self.entries.insert(at, (number, sim));
                None
            }
        }
    }
}

impl serde::Serialize for IccidIndex {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.entries.iter().map(|(number, sim)| (number, sim)))
    }
}

impl<'de> serde::Deserialize<'de> for IccidIndex {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<u64, crate::state::EsimIx>::deserialize(deserializer)?;
        Ok(IccidIndex { entries: map.into_iter().collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::EsimIx;

    /// The one-pass parse takes exactly what "at most 19 ASCII digits, parsed" takes.
    #[test]
    fn an_iccid_number_is_at_most_19_digits_and_nothing_else() {
        fn by_std(iccid: &str) -> Option<u64> {
            if iccid.is_empty() || iccid.len() > 19 || !iccid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            iccid.parse().ok()
        }
        let fixed = ["", "0", "9999999999999999999", "99999999999999999999", "8944100000000000018", "+1", "12a", "١٢"];
        for text in fixed {
            assert_eq!(iccid_number(text), by_std(text), "{text:?}");
        }
        // Every length, with a non-digit (each byte a digit's neighbour or far off) at
        // each place.
        for length in 1..=20 {
            let digits: String = (0..length).map(|i| char::from(b'0' + (i * 7 % 10) as u8)).collect();
            assert_eq!(iccid_number(&digits), by_std(&digits), "{digits}");
            for place in 0..length {
                for bad in [b'/', b':', 0x00, 0x7f, 0xc3, 0xff - 5, b' '] {
                    let mut bytes = digits.clone().into_bytes();
                    bytes[place] = bad;
                    let text = String::from_utf8_lossy(&bytes);
                    assert_eq!(iccid_number(&text), by_std(&text), "{text:?}");
                }
            }
        }
        quickcheck::quickcheck((|text: String| iccid_number(&text) == by_std(&text)) as fn(String) -> bool);
        quickcheck::quickcheck(
            (|n: u64| {
                let text = n.to_string();
                iccid_number(&text) == by_std(&text)
            }) as fn(u64) -> bool,
        );
    }

    #[test]
    fn the_iccid_index_finds_what_a_map_finds_and_writes_as_one() {
        let mut index = IccidIndex::default();
        let mut map = std::collections::BTreeMap::new();
        // Consecutive serials (the guess), then a gap, then one out of order.
        let numbers: Vec<u64> = (0..50)
            .map(|serial| crate::codes::iccid_for_serial(1_000 + serial).to_string())
            .chain(["8944100000000999991".to_string(), crate::codes::iccid_for_serial(7).to_string()])
            .map(|iccid| iccid_number(&iccid).unwrap())
            .collect();
        for (i, &number) in numbers.iter().enumerate() {
            assert_eq!(index.insert(number, EsimIx(i as u32)), None);
            map.insert(number, EsimIx(i as u32));
        }
        assert_eq!(index.insert(numbers[3], EsimIx(99)), Some(EsimIx(3)));
        for probe in numbers.iter().flat_map(|&n| [n - 1, n, n + 1, n + 10]).chain([0, 1, u64::MAX]) {
            assert_eq!(index.get(probe), map.get(&probe).copied(), "{probe}");
        }
        let written = serde_json::to_string(&index).unwrap();
        assert_eq!(written, serde_json::to_string(&map).unwrap());
        let back: IccidIndex = serde_json::from_str(&written).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), written);
    }
}
