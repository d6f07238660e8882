//! API keys: authentication (only a key's digest is kept, looked up by its first half
//! and compared whole in constant time) and the reseller's own key management
//! (decision 128: list, create, revoke by id).

use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::limits;
use crate::reply::{ApiKeyCreated, ApiKeyList, ApiKeyRecord, ApiKeyRevoked, Reply, Response};
use crate::secret::{constant_time_eq, KeyDigest, KEY_ID_PREFIX};
use crate::state::{AccountIx, KeyRecord};

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

    /// A key drawn by the shell from OS entropy (`rsk_` and 64 hex characters): only its
    /// SHA-256 and its first 12 characters reach the engine, and only those are kept.
    pub(crate) fn add_api_key(&mut self, account: AccountIx, digest: KeyDigest, prefix: String) {
        assert!(!digest.is_unset(), "the shell fills in every new key's digest");
        let prefix = (!prefix.is_empty()).then_some(prefix);
        let record =
            KeyRecord { digest, account, revoked: false, prefix, created_at: Some(self.now), revoked_at: None };
        let previous = self.keys.insert(digest.id(), record);
        assert!(previous.is_none(), "a 128-bit key id collision cannot happen by chance");
    }

    /// The account's active keys, oldest first (then by id): read from the account's own
    /// index, so its revoked keys and every other account's are never visited
    /// (decision 232).
    fn active_keys(&self, account: AccountIx) -> Vec<(&u128, &KeyRecord)> {
        let mut keys: Vec<_> = self
            .keys
            .active_ids(account)
            .iter()
            .map(|id| (id, self.keys.get(id).expect("the index names held keys")))
            .collect();
        debug_assert!(keys.iter().all(|(_, record)| record.account == account && !record.revoked));
        keys.sort_by_key(|(id, record)| (record.created_at, **id));
        keys
    }

    /// Revokes a key (if it is not already) and schedules its record's drop after the
    /// retention time (decision 231). Rate windows are the transport's and stay as they
    /// are: a revocation resets nothing.
    pub(crate) fn revoke_key(&mut self, id: u128) {
        if self.keys.revoke(id, self.now) {
            let drop_at = self.now.plus_ms(limits::REVOKED_KEY_RETENTION_MS);
            self.schedule(drop_at, crate::timer::Timer::DropRevokedKey(id));
        }
    }

    /// A revoked key's retention is over: its record goes (it authenticated nothing
    /// since its revocation, so no answer changes but a repeated revocation's, 404).
    pub(crate) fn drop_revoked_key(&mut self, id: u128) {
        let dropped = self.keys.remove(id);
        // Only a revocation schedules this, and nothing else removes a revoked key.
        assert!(dropped.is_some_and(|record| record.revoked), "a drop timer finds its revoked key");
    }

    /// `GET /keys`: the account's active keys, marking the caller's.
    pub(crate) fn list_api_keys(&self, account: AccountIx, caller: &KeyDigest) -> Response {
        let keys = self
            .active_keys(account)
            .into_iter()
            .map(|(_, record)| ApiKeyRecord {
                id: record.digest.key_id(),
                prefix: record.prefix.clone(),
                created_at: record.created_at,
                current: record.digest == *caller,
            })
            .collect();
        Ok(Reply::ApiKeyList(ApiKeyList { keys }))
    }

    /// `POST /keys`: one more key, within the account's cap; the shell shows the key.
    /// A frozen account makes no key (403, decision 233).
    pub(crate) fn create_api_key(&mut self, account: AccountIx, digest: KeyDigest, prefix: String) -> Response {
        self.require_not_frozen(account)?;
        if self.keys.active_ids(account).len() >= limits::API_KEYS_PER_ACCOUNT_MAX {
            return Err(ApiError::new(
                ErrorCode::ApiKeyLimitReached,
                format!(
                    "the account already has {} active API keys; revoke one first",
                    limits::API_KEYS_PER_ACCOUNT_MAX
                ),
            ));
        }
        self.add_api_key(account, digest, prefix.clone());
        assert!(self.keys.active_ids(account).len() <= limits::API_KEYS_PER_ACCOUNT_MAX, "the cap holds");
        Ok(Reply::ApiKeyCreated(ApiKeyCreated { id: digest.key_id(), api_key: None, prefix, created_at: self.now }))
    }

    /// `DELETE /keys/{id}`: refuses an unknown id (another account's is just as unknown)
    /// and the last active key, which would lock the reseller out. A frozen account may
    /// revoke: it only takes access away (decision 233).
    pub(crate) fn revoke_api_key(&mut self, account: AccountIx, key_id: &str) -> Response {
        let not_found = || ApiError::new(ErrorCode::NotFound, format!("no active API key {key_id}"));
        let id = parse_key_id(key_id).ok_or_else(not_found)?;
        match self.keys.get(&id) {
            Some(record) if record.account == account && !record.revoked => {}
            _ => return Err(not_found()),
        }
        if self.keys.active_ids(account).len() == 1 {
            return Err(ApiError::new(
                ErrorCode::LastApiKey,
                "this is the account's last active API key: create another before revoking it",
            ));
        }
        self.revoke_key(id);
        Ok(Reply::ApiKeyRevoked(ApiKeyRevoked { id: key_id.to_string(), revoked: true }))
    }

    /// The digest of one of the account's keys by id (the transport's key directory
    /// follows a revocation by id with it).
    pub fn api_key_digest(&self, key_id: &str) -> Option<KeyDigest> {
        self.keys.get(&parse_key_id(key_id)?).map(|record| record.digest)
    }
}

/// The index ([`KeyDigest::id`]) a key id ([`KeyDigest::key_id`]) names; `None` for anything that is not `key_` and 32 hex digits.
fn parse_key_id(key_id: &str) -> Option<u128> {
    let hex = key_id.strip_prefix(KEY_ID_PREFIX)?;
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(u128::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{AdminOp, Command, ResellerOp, ResellerRequest};
    use crate::{EngineConfig, Millis};

    /// Key operations read the account's index only: a record planted in the table
    /// without an index entry (as every other account's key and every revoked key is,
    /// for this account) is never visited by the list, the cap or the last-key rule.
    #[test]
    fn key_operations_visit_only_the_accounts_index() {
        let mut engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
        let digest = KeyDigest::of("rsk_first");
        let created = engine.handle(
            Millis::VIRTUAL_EPOCH,
            Command::Admin(AdminOp::CreateAccount {
                contact_email: "a@b.example".into(),
                company_name: None,
                api_key_digest: digest,
                api_key_prefix: String::new(),
            }),
        );
        assert!(created.is_ok());
        let planted = KeyDigest::of("rsk_planted");
        let record = KeyRecord {
            digest: planted,
            account: AccountIx(0),
            revoked: false,
            prefix: None,
            created_at: Some(Millis::VIRTUAL_EPOCH),
            revoked_at: None,
        };
        engine.keys.insert_unindexed(planted.id(), record);
        let call = |engine: &mut Engine, op| {
            let request = ResellerRequest { key_digest: digest, idempotency_key: None, op };
            engine.handle(Millis::VIRTUAL_EPOCH, Command::Reseller(request))
        };
        let Ok(Reply::ApiKeyList(list)) = call(&mut engine, ResellerOp::ListApiKeys) else { panic!("the list") };
        assert_eq!(list.keys.iter().map(|k| k.id.clone()).collect::<Vec<_>>(), [digest.key_id()]);
        let last = call(&mut engine, ResellerOp::RevokeApiKey { key_id: digest.key_id() });
        assert_eq!(last.unwrap_err().code, ErrorCode::LastApiKey, "the planted key is not counted");
    }

    #[test]
    fn key_ids_round_trip_and_refuse_anything_else() {
        for key in ["rsk_a", "rsk_b", "rsk_0000"] {
            let digest = KeyDigest::of(key);
            let id = digest.key_id();
            assert_eq!(id.len(), 36);
            assert_eq!(parse_key_id(&id), Some(digest.id()), "{id} names the key's index");
        }
        for bad in
            ["", "key_", "key_00", "rsk_00000000000000000000000000000000", "key_0000000000000000000000000000000G"]
        {
            assert_eq!(parse_key_id(bad), None, "{bad}");
        }
        assert_eq!(parse_key_id("key_0000000000000000000000000000000A"), None, "upper case is not an id");
    }
}
