//! `Idempotency-Key`s (decision 40): a POST's final answer is kept for 24 hours per
//! account and replayed byte-identically; the same key with another request is refused.
//! Each account keeps at most a bounded number of answers, oldest dropped first.

use crate::command::ResellerOp;
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::limits;
use crate::reply::{QrCodeDataUrl, Reply, Response};
use crate::secret::SealedSecret;
use crate::state::{AccountIx, IdempotencyEntry, StoredKey};
use crate::time::Millis;
use crate::timer::Timer;
use sha2::{Digest, Sha256};

impl Engine {
    /// A reseller write that carries an `Idempotency-Key`: a live stored answer is
    /// replayed, otherwise the request is dispatched and its final answer stored.
    pub(crate) fn dispatch_idempotent(
        &mut self,
        account: AccountIx,
        caller: &crate::secret::KeyDigest,
        key: String,
        op: &ResellerOp,
    ) -> Response {
        if key.is_empty() || key.len() > limits::IDEMPOTENCY_KEY_LEN_MAX {
            return Err(ApiError::validation(format!(
                "Idempotency-Key must be 1 to {} characters",
                limits::IDEMPOTENCY_KEY_LEN_MAX
            )));
        }
        let fingerprint = request_fingerprint(op);
        if let Some(entry) = self.idempotency.get(&(account, key.clone())) {
            if entry.expires_at > self.now {
                if entry.fingerprint != fingerprint {
                    return Err(ApiError::new(
                        ErrorCode::IdempotencyKeyReused,
                        "this Idempotency-Key was used with a different request",
                    ));
                }
                return Ok(Reply::Replayed {
                    status: entry.status,
                    body: entry.body.clone(),
                    qr_code: entry.qr_text.clone().map(QrCodeDataUrl::new),
                    signing_secret: entry.signing_secret.clone(),
                });
            }
        }
        let response = self.dispatch(account, caller, op);
        if is_final(&response) {
            self.store_idempotent(account, key, fingerprint, &response);
        }
        response
    }

    /// Keeps a final answer for its `Idempotency-Key`, dropping the account's oldest
    /// stored answer when it holds the most it may.
    fn store_idempotent(&mut self, account: AccountIx, key: String, fingerprint: [u8; 32], response: &Response) {
        let (status, body, qr_text, signing_secret) = Reply::stored_form(response);
        let expires_at = self.now.plus_ms(limits::IDEMPOTENCY_TTL_MS);
        let entry = IdempotencyEntry {
            fingerprint,
            status,
            body: String::from_utf8(body).expect("JSON is UTF-8"),
            qr_text,
            signing_secret,
            expires_at,
        };
        // A key found here had expired (a live one was answered above): it is replaced.
        self.idempotency.insert((account, key.clone()), entry);
        let order = self.idempotency_order.entry(account).or_default();
        order.push_back(StoredKey { expires_at, key: key.clone() });
        if order.len() > limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX {
            let oldest = order.pop_front().expect("the queue is over its limit");
            self.forget_idempotent(account, &oldest.key, oldest.expires_at);
        }
        assert!(
            self.idempotency_order[&account].len() <= limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX,
            "the idempotency store of an account is bounded"
        );
        self.schedule(expires_at, Timer::ExpireIdempotency(account, key));
    }

    /// Drops a stored answer, if it is still the one stored with this expiry.
    fn forget_idempotent(&mut self, account: AccountIx, key: &str, expires_at: Millis) {
        let slot = (account, key.to_string());
        if self.idempotency.get(&slot).is_some_and(|entry| entry.expires_at == expires_at) {
            self.idempotency.remove(&slot);
        }
    }

    /// The expiry timer of a stored answer.
    pub(crate) fn expire_idempotent(&mut self, account: AccountIx, key: &str) {
        // Keys expire in the order they were stored (a fixed TTL, time never goes
        // back), so the expired one heads its account's queue unless the bound
        // dropped it already (then this timer is stale: expected).
        let order = self.idempotency_order.entry(account).or_default();
        if order.front().is_some_and(|front| front.expires_at <= self.now && front.key == key) {
            let expired = order.pop_front().expect("checked");
            if order.is_empty() {
                self.idempotency_order.remove(&account);
            }
            self.forget_idempotent(account, &expired.key, expired.expires_at);
        }
    }
}

/// What an `Idempotency-Key` compares: the request, without the secret the shell drew
/// for it (a retry draws a fresh one, which is then never used).
fn request_fingerprint(op: &ResellerOp) -> [u8; 32] {
    let bytes = match op {
        ResellerOp::CreateWebhook { url, events, signing_secret } if !signing_secret.is_unset() => {
            let blank = ResellerOp::CreateWebhook {
                url: url.clone(),
                events: events.clone(),
                signing_secret: SealedSecret::default(),
            };
            serde_json::to_vec(&blank)
        }
        ResellerOp::RotateWebhookSecret { webhook_id, signing_secret } if !signing_secret.is_unset() => {
            let blank = ResellerOp::RotateWebhookSecret {
                webhook_id: webhook_id.clone(),
                signing_secret: SealedSecret::default(),
            };
            serde_json::to_vec(&blank)
        }
        ResellerOp::CreateApiKey { .. } => serde_json::to_vec(&ResellerOp::CreateApiKey {
            api_key_digest: crate::secret::KeyDigest::default(),
            api_key_prefix: String::new(),
        }),
        other => serde_json::to_vec(other),
    };
    Sha256::digest(bytes.expect("commands serialize")).into()
}

/// Only final answers are kept for an `Idempotency-Key`: a webhook test still waits
/// for its outcome, and a server-side or upstream failure (5xx, 502) is worth retrying.
fn is_final(response: &Response) -> bool {
    match response {
        Ok(Reply::WebhookTestDispatched { .. }) => false,
        Ok(_) => true,
        Err(error) => error.status() < 500,
    }
}
