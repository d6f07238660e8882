//! What the engine holds of secrets: never a secret itself.
//!
//! API keys and webhook signing secrets are drawn from OS entropy by the shell and enter
//! the engine as command inputs. An API key enters as its SHA-256 ([`KeyDigest`]); a
//! signing secret enters sealed ([`SealedSecret`]: AEAD ciphertext under a key that lives
//! outside the data dir), because the shell needs it back to sign deliveries. So the
//! state, its snapshots and the journal reveal no secret, and the engine's seeded RNG
//! never makes one.

use crate::ids::hex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// SHA-256 of an API key: all the engine and the journal ever hold of a key.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyDigest(pub [u8; 32]);

/// How a key's id starts ([`KeyDigest::key_id`]).
pub const KEY_ID_PREFIX: &str = "key_";

impl KeyDigest {
    /// The digest of a bearer credential (the transport hashes each request's key once).
    pub fn of(api_key: &str) -> KeyDigest {
        KeyDigest(Sha256::digest(api_key.as_bytes()).into())
    }

    /// The index of a key: the first 128 bits of its digest.
    pub fn id(&self) -> u128 {
        u128::from_le_bytes(self.0[..16].try_into().expect("16 bytes"))
    }

    /// The key's id in the API (`key_` and the first 128 bits of the digest in hex,
    /// decision 128): it names a key without being one.
    pub fn key_id(&self) -> String {
        format!("{}{}", KEY_ID_PREFIX, hex(&self.0[..16]))
    }

    /// The all-zero digest: no key hashes to it, so it marks "not filled in".
    pub fn is_unset(&self) -> bool {
        self.0 == [0; 32]
    }
}

impl std::fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyDigest({})", hex(&self.0[..8]))
    }
}

impl Serialize for KeyDigest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for KeyDigest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let bytes = unhex(&text).ok_or_else(|| serde::de::Error::custom("a key digest is 64 hex characters"))?;
        let array: [u8; 32] =
            bytes.try_into().map_err(|_| serde::de::Error::custom("a key digest is 64 hex characters"))?;
        Ok(KeyDigest(array))
    }
}

/// A secret sealed by the shell: opaque bytes to the engine, which stores them and hands
/// them back with each delivery (the sender opens them to sign).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SealedSecret(pub Vec<u8>);

impl SealedSecret {
    /// Nothing sealed yet (the router leaves the field for the shell to fill).
    pub fn is_unset(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedSecret({} bytes)", self.0.len())
    }
}

impl Serialize for SealedSecret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use base64::Engine as _;
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for SealedSecret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use base64::Engine as _;
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(SealedSecret)
            .map_err(|_| serde::de::Error::custom("a sealed secret is base64"))
    }
}

/// Bytes from lowercase or uppercase hex (`None` for anything else); the shell reads
/// its key file with it.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// Compares two byte strings in time independent of where they differ. `#[inline]`: it
/// is called on every request, from other crates too (the transport's admission).
#[inline]
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_sealed_secrets_round_trip_through_json() {
        let digest = KeyDigest::of("rsk_example");
        let json = serde_json::to_string(&digest).unwrap();
        assert_eq!(json.len(), 66, "{json}");
        assert_eq!(serde_json::from_str::<KeyDigest>(&json).unwrap(), digest);
        assert!(!digest.is_unset() && KeyDigest::default().is_unset());
        let sealed = SealedSecret(vec![1, 2, 3, 250]);
        let json = serde_json::to_string(&sealed).unwrap();
        assert_eq!(serde_json::from_str::<SealedSecret>(&json).unwrap(), sealed);
        assert!(serde_json::from_str::<KeyDigest>("\"zz\"").is_err());
    }
}
