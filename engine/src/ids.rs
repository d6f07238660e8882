//! Ids and randomness: every id, serial and matching id comes from the engine's
//! seeded ChaCha20 RNG (kept in the state); hex and ICCID helpers.

use crate::engine::Engine;
use rand_core::RngCore;

impl Engine {
    pub(crate) fn random_bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut bytes = [0u8; N];
        self.rng.fill_bytes(&mut bytes);
        bytes
    }

    /// `prefix` followed by `2 * bytes` lowercase hex characters.
    pub(crate) fn random_id(&mut self, prefix: &str, bytes: usize) -> String {
        let mut raw = vec![0u8; bytes];
        self.rng.fill_bytes(&mut raw);
        format!("{prefix}{}", hex(&raw))
    }

    pub(crate) fn random_uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.random_bytes::<16>()).into_uuid().to_string()
    }
}

/// An ICCID as its number (all digits, at most 19 of them); anything else is no ICCID.
pub(crate) fn iccid_number(iccid: &str) -> Option<u64> {
    if iccid.is_empty() || iccid.len() > 19 || !iccid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    iccid.parse().ok()
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
