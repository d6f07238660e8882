//! Authentication of reseller API keys: only a key's digest is kept, looked up by its
//! first half and compared whole in constant time.

use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::secret::KeyDigest;
use crate::state::AccountIx;

impl Engine {
    /// The account holding a valid (known, not revoked) API key.
    pub(crate) fn key_holder(&self, digest: &KeyDigest) -> Result<AccountIx, ApiError> {
        match self.keys.get(&digest.id()) {
            // The map is keyed by the first half of the digest; the whole digest is then
            // compared in constant time.
            Some(record) if !record.revoked && constant_time_eq(&record.digest.0, &digest.0) => Ok(record.account),
            _ => Err(ApiError::new(ErrorCode::InvalidApiKey, "missing, invalid or revoked API key")),
        }
    }
}

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
