//! Ids and index newtypes: the position of a record in its engine list, a ledger slot,
//! a delivery, an event id; and the pure helpers that turn ids into text and ICCIDs
//! into numbers. A leaf: it imports nothing of the engine, so every part may use it.

use serde::{Deserialize, Serialize};

/// An index newtype: the position of a record in its engine list (or of a slot in the
/// ledger), serialized as the bare number (so the state digest and snapshots do not
/// change). The list it indexes says so with an `Index` impl where the record is
/// defined (`state`).
macro_rules! index_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);
        impl $name {
            /// Its place in the list it indexes.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

index_newtype!(
    /// An account: its position in `Engine::accounts`.
    AccountIx(u32)
);
index_newtype!(
    /// An eSIM: its position in `Engine::esims`.
    EsimIx(u32)
);
index_newtype!(
    /// A group: its position in `Engine::groups`.
    GroupIx(u32)
);
index_newtype!(
    /// A webhook: its position in `Engine::webhooks`.
    WebhookIx(u32)
);
index_newtype!(
    /// A ledger slot: its position in the ledger (see `ledger::Ledger`).
    Slot(u32)
);

/// A webhook delivery: the key of `Engine::pending_deliveries`, and the number the
/// shell reports an outcome with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub u64);

impl std::fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Which wallet: a standalone eSIM's own or a group's (what a report timer is for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WalletOwner {
    /// A standalone eSIM's own wallet (written `Sim`, as before).
    #[serde(rename = "Sim")]
    Esim(EsimIx),
    /// A group's wallet.
    Group(GroupIx),
}

/// An event id (`evt_` and 24 lowercase hex digits) as its 12 random bytes: 12 bytes
/// inline instead of a 28-byte heap string plus its 24-byte handle (decision 154).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct EventId(pub(crate) [u8; 12]);

impl EventId {
    /// The id of its text; `None` for anything this build never draws.
    pub(crate) fn parse(text: &str) -> Option<EventId> {
        let digits = text.strip_prefix("evt_")?.as_bytes();
        if digits.len() != 24 {
            return None;
        }
        let nibble = |d: u8| match d {
            b'0'..=b'9' => Some(d - b'0'),
            b'a'..=b'f' => Some(d - b'a' + 10),
            _ => None,
        };
        let mut bytes = [0u8; 12];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(EventId(bytes))
    }

    /// `evt_` and the bytes in lowercase hex, as `random_id` wrote them before.
    pub(crate) fn text(&self) -> String {
        format!("evt_{}", hex(&self.0))
    }

    /// The key of the event log's id index: the first 8 random bytes (two of 2 million
    /// kept ids share one with a chance of about 1 in 10 million; the log keeps those aside).
    pub(crate) fn key(&self) -> u64 {
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(first)
    }
}

impl Serialize for EventId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        EventId::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not an event id")))
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

/// Bytes as lowercase hex text (ids, digests).
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
    entries: Vec<(u64, EsimIx)>,
}

impl IccidIndex {
    pub(crate) fn get(&self, number: u64) -> Option<EsimIx> {
        let &(first, _) = self.entries.first()?;
        if number >= first {
            let guess = (number / 10 - first / 10) as usize;
            if let Some(&(found, esim)) = self.entries.get(guess) {
                if found == number {
                    return Some(esim);
                }
            }
        }
        let at = self.entries.binary_search_by_key(&number, |&(n, _)| n).ok()?;
        Some(self.entries[at].1)
    }

    /// Adds an ICCID; returns the index it had, if it was there already (then unchanged).
    pub(crate) fn insert(&mut self, number: u64, esim: EsimIx) -> Option<EsimIx> {
        match self.entries.binary_search_by_key(&number, |&(n, _)| n) {
            Ok(at) => Some(self.entries[at].1),
            Err(at) => {
                self.entries.insert(at, (number, esim));
                None
            }
        }
    }
}

impl serde::Serialize for IccidIndex {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.entries.iter().map(|(number, esim)| (number, esim)))
    }
}

impl<'de> serde::Deserialize<'de> for IccidIndex {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<u64, EsimIx>::deserialize(deserializer)?;
        Ok(IccidIndex { entries: map.into_iter().collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
