//! Admission: who may send a request, decided from its headers alone, before its body
//! is read. A reseller request needs a valid API key (401) and room in its key's rate
//! window (429); an admin or sandbox request needs the admin token (401). So a client
//! without credentials never makes the service read, or hold, a body.
//!
//! The key directory is a copy of the engine's valid key digests, kept in step by the
//! owner of the engine after every command that changes keys; the engine still refuses
//! a key revoked in between. The rate windows, per key and per account, live here (in
//! one table with the directory), not in the engine: they are soft state (never
//! journaled, not in the state digest, decision 53).

use crate::routes::{self, Api, Match};
use esim_engine::{limits, ApiError, Engine, ErrorCode, KeyDigest, Millis};
use std::collections::HashMap;
use std::sync::Mutex;

/// What a request may go on as, once its credentials were checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// A reseller request of this key (hashed once, here).
    Reseller(KeyDigest),
    /// An admin or sandbox request with the right token.
    Operator,
    /// No credential needed (the OpenAPI document).
    Public,
}

/// An account's keys share one window of this many keys' limits: as many as the
/// reseller may hold at once (decision 230), or as many as the account holds when the
/// operator gave it more. A key keeps the spec's own limit; making and revoking keys
/// buys no more than holding the most keys an account may hold.
pub const ACCOUNT_BUDGET_IN_KEYS: u32 = limits::API_KEYS_PER_ACCOUNT_MAX as u32;

/// Windows kept before ended ones are swept out (then again each time their number
/// doubles): a key made, used once and revoked leaves a window behind.
const WINDOWS_SWEEP_MIN: usize = 4_096;

/// A fixed window (of a key or of an account): the first request's time and the
/// requests counted in it.
#[derive(Debug, Clone, Copy)]
struct RateWindow {
    started_at: Millis,
    requests: u32,
}

impl RateWindow {
    /// A window has ended once `RATE_WINDOW_MS` passed since its first request.
    fn ended(&self, now: Millis) -> bool {
        now.0 - self.started_at.0 >= limits::RATE_WINDOW_MS
    }

    /// This window, or a new one from `now` if it ended.
    fn renew(&mut self, now: Millis) -> &mut RateWindow {
        if self.ended(now) {
            *self = RateWindow { started_at: now, requests: 0 };
        }
        self
    }

    /// The window in `slot` at `now`: a new one if there is none (counted in `windows`)
    /// or it ended.
    fn open<'a>(slot: &'a mut Option<RateWindow>, now: Millis, windows: &mut usize) -> &'a mut RateWindow {
        if slot.is_none() {
            *windows += 1;
        }
        slot.get_or_insert(RateWindow { started_at: now, requests: 0 }).renew(now)
    }

    /// The 429 of a full window: whole seconds until it ends, at least 1.
    fn refusal(&self, now: Millis, limit: u32, whose: &str) -> ApiError {
        let retry_after = now.seconds_until_ceil(self.started_at.plus_ms(limits::RATE_WINDOW_MS)).max(1);
        ApiError {
            code: ErrorCode::RateLimited,
            message: format!("more than {limit} requests per minute{whose}; retry in {retry_after} s"),
            retry_after_secs: Some(retry_after),
        }
    }
}

/// The valid keys and the rate windows, under one lock: a request's key, its account and
/// both its windows are found with one lookup in `keys` and one index into `accounts`
/// (where separate maps of keys, of accounts' key counts and of each kind of window,
/// behind a read-write lock and a mutex, took four lookups, each a cache miss at
/// thousands of keys: about twice the time per request).
#[derive(Default)]
struct Table {
    /// Per key: its account while the key is valid (known, not revoked), and its window
    /// while it has one. An entry with neither goes.
    keys: HashMap<KeyDigest, KeyEntry, DigestHash>,
    /// Per account, by its index (dense, made by the engine, never chosen by a client):
    /// its valid keys and its window.
    accounts: Vec<AccountEntry>,
    /// Windows held, of keys and of accounts together.
    windows: usize,
    /// How many windows may be held before the next sweep.
    sweep_at: usize,
}

/// A key's place in the [`Table`].
#[derive(Default)]
struct KeyEntry {
    /// The key's account while the key is valid.
    account: Option<u32>,
    /// The key's rate window (kept when the key is revoked: decision 230).
    window: Option<RateWindow>,
}

/// An account's place in the [`Table`].
#[derive(Default)]
struct AccountEntry {
    /// Valid keys of the account (its share of the account window).
    held: u32,
    /// The window its keys share.
    window: Option<RateWindow>,
}

impl Table {
    /// A valid key of `account`.
    fn insert_key(&mut self, digest: KeyDigest, account: u32) {
        if self.keys.entry(digest).or_default().account.replace(account).is_none() {
            let index = account as usize;
            if self.accounts.len() <= index {
                self.accounts.resize_with(index + 1, AccountEntry::default);
            }
            self.accounts[index].held += 1;
        }
    }

    /// A key no longer valid; its window stays.
    fn remove_key(&mut self, digest: &KeyDigest) {
        let Some(entry) = self.keys.get_mut(digest) else { return };
        let Some(account) = entry.account.take() else { return };
        if entry.window.is_none() {
            self.keys.remove(digest);
        }
        let held = &mut self.accounts.get_mut(account as usize).expect("a valid key's account is counted").held;
        assert!(*held > 0, "an account holding a valid key counts it");
        *held -= 1;
    }

    /// Every key no longer valid (before the engine's valid keys are inserted again);
    /// the windows stay.
    fn forget_keys(&mut self) {
        self.keys.retain(|_, entry| {
            entry.account = None;
            entry.window.is_some()
        });
        self.accounts.iter_mut().for_each(|account| account.held = 0);
    }

    /// Every window forgotten (decision 53); the keys stay.
    fn clear_windows(&mut self) {
        self.keys.retain(|_, entry| {
            entry.window = None;
            entry.account.is_some()
        });
        self.accounts.iter_mut().for_each(|account| account.window = None);
        self.windows = 0;
        self.sweep_at = 0;
    }

    /// Drops ended windows once there are many: an ended window and no window mean the
    /// same (the next request starts a new one), so this changes no answer.
    fn sweep_if_large(&mut self, now: Millis) {
        if self.windows > self.sweep_at.max(WINDOWS_SWEEP_MIN) {
            self.sweep(now);
        }
    }

    /// Drops ended windows, and the entries of keys neither valid nor with a window (a
    /// visit of every key and account, spread over as many new windows as were held
    /// after the last sweep).
    fn sweep(&mut self, now: Millis) {
        let mut held = 0;
        let mut sweep = |window: &mut Option<RateWindow>| {
            if window.is_some_and(|window| window.ended(now)) {
                *window = None;
            }
            held += usize::from(window.is_some());
        };
        self.keys.retain(|_, entry| {
            sweep(&mut entry.window);
            entry.account.is_some() || entry.window.is_some()
        });
        self.accounts.iter_mut().for_each(|account| sweep(&mut account.window));
        self.windows = held;
        self.sweep_at = 2 * held;
    }
}

/// Hashes a [`KeyDigest`] for the maps below: a digest is a SHA-256 output, uniform
/// already, so its first eight bytes (mixed with a seed drawn per process) are a hash;
/// SipHash over all 32 bytes would cost more than the lookup. Only valid keys are ever
/// stored, so chosen digests cannot crowd a map.
#[derive(Clone, Copy)]
struct DigestHash {
    seed: u64,
}

impl Default for DigestHash {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new().build_hasher().finish()
        });
        DigestHash { seed }
    }
}

impl std::hash::BuildHasher for DigestHash {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(self.seed)
    }
}

struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only digests are hashed here (their length first, then their bytes): their
        // first eight bytes are as good as all 32.
        let mut word = [0u8; 8];
        let taken = bytes.len().min(8);
        word[..taken].copy_from_slice(&bytes[..taken]);
        self.write_u64(u64::from_le_bytes(word));
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(23) ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

/// The bearer a connection sent last and its digest: a client keeps one key on its
/// connection, so a keep-alive connection hashes its key once instead of on every
/// request. The bearer is compared in constant time (a proxy may carry several
/// clients' requests on one connection: how much of another client's key matches must
/// not show in the time taken).
/// The remembered bearer is wiped when it is replaced or the connection ends.
#[derive(Default)]
pub struct KeyMemo {
    last: Mutex<Option<(Bearer, KeyDigest)>>,
}

/// A bearer's bytes, zeroed when dropped.
type Bearer = zeroize::Zeroizing<Box<[u8]>>;

impl KeyMemo {
    /// [`KeyDigest::of`] `bearer`, from the memo when it is the bearer sent last.
    pub fn digest_of(&self, bearer: &str) -> KeyDigest {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((sent, digest)) = last.as_ref() {
            if esim_engine::engine::constant_time_eq(sent, bearer.as_bytes()) {
                return *digest;
            }
        }
        let digest = KeyDigest::of(bearer);
        *last = Some((Bearer::new(bearer.as_bytes().into()), digest));
        digest
    }
}

pub struct Admission {
    table: Mutex<Table>,
    /// Per key (the spec's limit).
    limit_per_minute: u32,
}

impl Admission {
    pub fn new(engine: &Engine) -> Admission {
        let admission =
            Admission { table: Mutex::new(Table::default()), limit_per_minute: engine.config().rate_limit_per_minute };
        admission.reload_keys(engine);
        admission
    }

    /// Copies the engine's valid keys (at start, and after the engine was replaced).
    pub fn reload_keys(&self, engine: &Engine) {
        let valid: Vec<_> = engine.valid_keys().collect();
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.forget_keys();
        for (digest, account) in valid {
            table.insert_key(digest, account.0);
        }
    }

    /// Brings one key in step with the engine (after a command created or revoked it).
    pub fn refresh_key(&self, engine: &Engine, digest: &KeyDigest) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.remove_key(digest);
        if let Some(account) = engine.key_account(digest) {
            table.insert_key(*digest, account.0);
        }
    }

    /// A restart forgets every rate window (decision 53).
    pub fn clear_windows(&self) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).clear_windows();
    }

    /// Checks a request's credentials from its method, path and headers, at service
    /// time `now`: what it may go on as, or the error to answer without reading its body.
    pub fn screen(
        &self,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
        admin_token: &str,
        now: Millis,
    ) -> Result<Admitted, ApiError> {
        let memo = KeyMemo::default();
        self.screen_matched(&routes::find(method.as_str(), path), path, headers, admin_token, &memo, now)
    }

    /// [`Admission::screen`] for a request already matched against the route table (a
    /// server's connection task matches once, for this and for its log line), with the
    /// connection's [`KeyMemo`].
    pub fn screen_matched(
        &self,
        matched: &Match<'_>,
        path: &str,
        headers: &http::HeaderMap,
        admin_token: &str,
        memo: &KeyMemo,
        now: Millis,
    ) -> Result<Admitted, ApiError> {
        let api = match matched {
            Match::Found(endpoint, _) => endpoint.api(),
            Match::NotFound | Match::WrongMethod(_) => match routes::api_of_path(path) {
                Some(api) => api,
                // Outside every API: answered from the headers, its body never read
                // (decision 215).
                None => return Err(outside_every_api(matched, path)),
            },
        };
        let credential = crate::api::bearer_str(headers);
        match api {
            Api::Public => Ok(Admitted::Public),
            Api::Admin | Api::Sandbox => {
                if esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes()) {
                    Ok(Admitted::Operator)
                } else {
                    Err(ApiError::new(ErrorCode::InvalidAdminToken, "missing or wrong admin token"))
                }
            }
            Api::Reseller => {
                let digest = memo.digest_of(credential);
                self.admit_key(&digest, now).map_err(|refused| match refused.code {
                    ErrorCode::InvalidApiKey => key_refusal(headers, admin_token),
                    _ => refused,
                })?;
                Ok(Admitted::Reseller(digest))
            }
        }
    }

    /// The key must be valid, then its window must have room, then its account's:
    /// 401 before 429 (decision 55); only requests of valid keys are counted, and a
    /// request is counted in both windows or in neither. A revocation touches no window:
    /// a new key of the account starts its own window but shares the account's
    /// (decision 230).
    pub fn admit_key(&self, digest: &KeyDigest, now: Millis) -> Result<(), ApiError> {
        let limit = self.limit_per_minute;
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.sweep_if_large(now);
        let Table { keys, accounts, windows, .. } = &mut *table;
        let Some(KeyEntry { account: Some(account), window: key_window }) = keys.get_mut(digest) else {
            return Err(ApiError::new(ErrorCode::InvalidApiKey, KEY_UNKNOWN));
        };
        let account = &mut accounts[*account as usize];
        let account_limit = limit.saturating_mul(account.held.max(ACCOUNT_BUDGET_IN_KEYS));
        let key_window = RateWindow::open(key_window, now, windows);
        if key_window.requests >= limit {
            return Err(key_window.refusal(now, limit, ""));
        }
        let account_window = RateWindow::open(&mut account.window, now, windows);
        if account_window.requests >= account_limit {
            return Err(account_window.refusal(now, account_limit, " for the account's keys together"));
        }
        key_window.requests += 1;
        account_window.requests += 1;
        assert!(key_window.requests <= limit, "a key's window never admits more than the limit");
        assert!(account_window.requests <= account_limit, "an account's window never admits more than its limit");
        Ok(())
    }
}

/// What a reseller request must carry, as its 401s say.
const KEY_EXPECTED: &str = "expected `Authorization: Bearer rsk_…` with an API key of the account";

/// The 401 of a bearer that has an API key's form but is no valid key.
const KEY_UNKNOWN: &str = "invalid or revoked API key";

/// The 401 of a reseller request whose key is refused, saying what was expected given
/// what came (decision 305): no `Authorization` header, a header that is not a bearer
/// token, the admin token (it opens only the admin and sandbox APIs), a bearer that is
/// no API key, or a key that is unknown or revoked. Code and status stay
/// `INVALID_API_KEY` and 401; only the message tells them apart.
pub fn key_refusal(headers: &http::HeaderMap, admin_token: &str) -> ApiError {
    let credential = crate::api::bearer_str(headers);
    let message = match headers.get(http::header::AUTHORIZATION) {
        None => format!("no Authorization header: {KEY_EXPECTED}"),
        Some(_) if credential.is_empty() => {
            format!("the Authorization header is not `Bearer ` and a token: {KEY_EXPECTED}")
        }
        Some(_) if esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes()) => {
            format!("this is the admin token, which opens only the admin and sandbox APIs: {KEY_EXPECTED}")
        }
        Some(_) if !credential.starts_with("rsk_") => {
            format!("the bearer token is not an API key (API keys start with `rsk_`): {KEY_EXPECTED}")
        }
        Some(_) => KEY_UNKNOWN.to_string(),
    };
    ApiError::new(ErrorCode::InvalidApiKey, message)
}

/// The answer to a request outside every API (what the router would say: 404, or 405
/// with the methods allowed), given from its method and path alone.
pub fn outside_every_api(matched: &Match<'_>, path: &str) -> ApiError {
    match matched {
        Match::WrongMethod(allowed) => ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("this method is not allowed here; use {}", allowed.join(", ")),
        ),
        _ => ApiError::new(ErrorCode::RouteNotFound, routes::not_found_message(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esim_engine::{AdminOp, Command, EngineConfig, Reply};

    fn engine_with_key() -> (Engine, KeyDigest) {
        let mut engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
        let digest = KeyDigest::of("rsk_test");
        let created = engine.handle(
            Millis::VIRTUAL_EPOCH,
            Command::Admin(AdminOp::CreateAccount {
                contact_email: "a@b.example".into(),
                company_name: None,
                api_key_digest: digest,
                api_key_prefix: String::new(),
            }),
        );
        assert!(matches!(created, Ok(Reply::AccountCreated(_))));
        (engine, digest)
    }

    #[test]
    fn the_key_directory_counts_each_accounts_valid_keys() {
        let mut keys = Table::default();
        let (a, b) = (KeyDigest::of("rsk_a"), KeyDigest::of("rsk_b"));
        keys.insert_key(a, 7);
        keys.insert_key(a, 7);
        keys.insert_key(b, 7);
        assert_eq!(keys.accounts[7].held, 2, "a key inserted twice counts once");
        keys.remove_key(&a);
        keys.remove_key(&a);
        assert_eq!(keys.accounts[7].held, 1, "a key removed twice counts once");
        keys.remove_key(&b);
        assert!(keys.accounts.iter().all(|account| account.held == 0) && keys.keys.is_empty());
    }

    #[test]
    fn a_key_memo_gives_each_bearer_its_own_digest() {
        let memo = KeyMemo::default();
        for bearer in ["rsk_a", "rsk_a", "rsk_b", "rsk_a", "", "rsk_ab", "rsk_a"] {
            assert_eq!(memo.digest_of(bearer), KeyDigest::of(bearer), "{bearer:?}");
        }
    }

    #[test]
    fn the_rate_limit_is_100_per_minute_with_retry_after() {
        let (engine, digest) = engine_with_key();
        let admission = Admission::new(&engine);
        let start = Millis::VIRTUAL_EPOCH;
        for _ in 0..100 {
            admission.admit_key(&digest, start).unwrap();
        }
        let refused = admission.admit_key(&digest, start.plus_ms(20_000)).unwrap_err();
        assert_eq!((refused.code, refused.status()), (ErrorCode::RateLimited, 429));
        assert_eq!(refused.retry_after_secs, Some(40));
        admission.admit_key(&digest, start.plus_ms(60_000)).unwrap();
        // A restart forgets the windows (decision 53).
        for _ in 0..99 {
            admission.admit_key(&digest, start.plus_ms(60_000)).unwrap();
        }
        assert!(admission.admit_key(&digest, start.plus_ms(60_000)).is_err());
        admission.clear_windows();
        admission.admit_key(&digest, start.plus_ms(60_000)).unwrap();
    }

    /// A new key made for account 0 of `engine` (and followed by `admission`).
    fn add_key(engine: &mut Engine, admission: &Admission, key: &str, now: Millis) -> KeyDigest {
        let digest = KeyDigest::of(key);
        let account_id = engine.accounts()[0].id.clone();
        let op = AdminOp::CreateKey { account_id, api_key_digest: digest, api_key_prefix: String::new() };
        engine.handle(now, Command::Admin(op)).unwrap();
        admission.refresh_key(engine, &digest);
        digest
    }

    #[test]
    fn an_accounts_keys_share_one_window_that_no_revocation_resets() {
        let (mut engine, first) = engine_with_key();
        let admission = Admission::new(&engine);
        let start = Millis::VIRTUAL_EPOCH;
        let budget = 100 * ACCOUNT_BUDGET_IN_KEYS;
        // Churn: each new key revokes the one before and spends its own 100.
        let (mut current, mut admitted, mut made) = (first, 0, 0);
        let refused = 'churn: loop {
            made += 1;
            let now = start.plus_ms(100 * made);
            let next = add_key(&mut engine, &admission, &format!("rsk_{made}"), now);
            engine.handle(now, Command::Admin(AdminOp::RevokeKey { api_key_digest: current })).unwrap();
            admission.refresh_key(&engine, &current);
            assert_eq!(admission.admit_key(&current, now).unwrap_err().code, ErrorCode::InvalidApiKey);
            current = next;
            for _ in 0..100 {
                match admission.admit_key(&current, now) {
                    Ok(()) => admitted += 1,
                    Err(refused) => break 'churn (refused, now),
                }
            }
        };
        assert_eq!(admitted, budget, "the account's keys together get its budget, no more");
        let (error, at) = refused;
        assert_eq!((error.code, error.status()), (ErrorCode::RateLimited, 429));
        // The account's window began with its first request, at start + 100 ms.
        let window_end = start.plus_ms(100 + limits::RATE_WINDOW_MS);
        assert_eq!(error.retry_after_secs, Some(at.seconds_until_ceil(window_end)), "until the account's window ends");
        assert_eq!(made, i64::from(ACCOUNT_BUDGET_IN_KEYS) + 1, "each key got its own 100 until then");
        // A fresh key of the account is refused too; its window counted nothing.
        let fresh = add_key(&mut engine, &admission, "rsk_fresh", at);
        assert_eq!(admission.admit_key(&fresh, at).unwrap_err().code, ErrorCode::RateLimited);
        // The account's window ends a minute after its first request.
        for _ in 0..100 {
            admission.admit_key(&fresh, window_end).unwrap();
        }
        assert!(admission.admit_key(&fresh, window_end).is_err(), "the key's own limit still holds");
    }

    #[test]
    fn only_ended_windows_are_swept_and_only_when_many() {
        let start = Millis::VIRTUAL_EPOCH;
        let window = |at: Millis, requests: u32| RateWindow { started_at: at, requests };
        let mut windows = Table::default();
        let put = |windows: &mut Table, digest: KeyDigest, window: RateWindow| {
            windows.keys.entry(digest).or_default().window = Some(window);
            windows.windows += 1;
        };
        let key_windows = |windows: &Table| windows.keys.values().filter(|key| key.window.is_some()).count();
        for n in 0..WINDOWS_SWEEP_MIN {
            put(&mut windows, KeyDigest::of(&format!("rsk_{n}")), window(start, 1));
        }
        let running = KeyDigest::of("rsk_running");
        put(&mut windows, running, window(start.plus_ms(30_000), 100));
        windows.accounts.push(AccountEntry { held: 0, window: Some(window(start, 2_000)) });
        windows.windows += 1;
        windows.sweep_if_large(start.plus_ms(limits::RATE_WINDOW_MS - 1));
        assert_eq!(key_windows(&windows), WINDOWS_SWEEP_MIN + 1, "nothing has ended yet");
        windows.sweep_at = 0; // as if the last sweep were long ago
        windows.sweep_if_large(start.plus_ms(limits::RATE_WINDOW_MS));
        assert_eq!(key_windows(&windows), 1, "the ended key windows went");
        assert!(windows.accounts[0].window.is_none(), "the ended account window went");
        assert_eq!(
            windows.keys[&running].window.map(|w| w.requests),
            Some(100),
            "a running window stays, with its count"
        );
        assert_eq!((windows.keys.len(), windows.windows), (1, 1), "entries of neither a valid key nor a window went");
        // Few windows are never swept: the sweep's cost is spread over many requests.
        put(&mut windows, KeyDigest::of("rsk_old"), window(start, 1));
        windows.sweep_if_large(start.plus_ms(10 * limits::RATE_WINDOW_MS));
        assert_eq!(key_windows(&windows), 2);
    }

    /// The admission rules as they were first written (a key directory and per-account
    /// counts behind a read-write lock, key and account windows in two maps behind a
    /// mutex), never swept: the answers the one table must give.
    #[derive(Default)]
    struct Reference {
        accounts: HashMap<KeyDigest, u32>,
        held: HashMap<u32, u32>,
        by_key: HashMap<KeyDigest, RateWindow>,
        by_account: HashMap<u32, RateWindow>,
    }

    impl Reference {
        fn insert(&mut self, digest: KeyDigest, account: u32) {
            if self.accounts.insert(digest, account).is_none() {
                *self.held.entry(account).or_insert(0) += 1;
            }
        }

        fn remove(&mut self, digest: &KeyDigest) {
            let Some(account) = self.accounts.remove(digest) else { return };
            let held = self.held.get_mut(&account).unwrap();
            *held -= 1;
            if *held == 0 {
                self.held.remove(&account);
            }
        }

        fn reload_keys(&mut self, engine: &Engine) {
            self.accounts.clear();
            self.held.clear();
            for (digest, account) in engine.valid_keys() {
                self.insert(digest, account.0);
            }
        }

        fn refresh_key(&mut self, engine: &Engine, digest: &KeyDigest) {
            self.remove(digest);
            if let Some(account) = engine.key_account(digest) {
                self.insert(*digest, account.0);
            }
        }

        fn admit_key(&mut self, limit: u32, digest: &KeyDigest, now: Millis) -> Result<(), ApiError> {
            let Some(&account) = self.accounts.get(digest) else {
                return Err(ApiError::new(ErrorCode::InvalidApiKey, KEY_UNKNOWN));
            };
            let held = self.held.get(&account).copied().unwrap_or(1);
            let account_limit = limit.saturating_mul(held.max(ACCOUNT_BUDGET_IN_KEYS));
            let fresh = RateWindow { started_at: now, requests: 0 };
            let key_window = self.by_key.entry(*digest).or_insert(fresh).renew(now);
            if key_window.requests >= limit {
                return Err(key_window.refusal(now, limit, ""));
            }
            let account_window = self.by_account.entry(account).or_insert(fresh).renew(now);
            if account_window.requests >= account_limit {
                return Err(account_window.refusal(now, account_limit, " for the account's keys together"));
            }
            key_window.requests += 1;
            account_window.requests += 1;
            Ok(())
        }
    }

    /// The one table (keys, accounts and windows under one lock) answers as the
    /// reference does, through long seeded runs of requests of valid, revoked and unknown
    /// keys among key churn, new accounts, engines replaced by earlier copies (keys
    /// revoked since valid again, keys made since unknown), restarts, and sweeps at any
    /// time.
    #[test]
    fn the_one_table_answers_as_the_separate_maps_did() {
        let limit = 2;
        let config = EngineConfig { rate_limit_per_minute: limit, ..EngineConfig::default() };
        let create_account = |engine: &mut Engine, digest: KeyDigest| {
            let op = AdminOp::CreateAccount {
                contact_email: "a@b.example".into(),
                company_name: None,
                api_key_digest: digest,
                api_key_prefix: String::new(),
            };
            engine.handle(engine.now(), Command::Admin(op)).unwrap();
        };
        for seed in 1..=4u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut draw = |below: usize| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % below as u64) as usize
            };
            let mut engine = Engine::new(config.clone(), Millis::VIRTUAL_EPOCH);
            let mut digests = vec![KeyDigest::of("rsk_first"), KeyDigest::of("rsk_second"), KeyDigest::of("rsk_none")];
            create_account(&mut engine, digests[0]);
            create_account(&mut engine, digests[1]);
            let admission = Admission::new(&engine);
            let mut reference = Reference::default();
            reference.reload_keys(&engine);
            let (mut now, mut copy) = (engine.now(), None);
            let (mut admitted, mut limited, mut by_account) = (0, 0, 0);
            for step in 0..20_000 {
                now = now.plus_ms(draw(100) as i64);
                // The first two accounts' valid keys (their windows fill) and any key.
                let valid: Vec<_> =
                    engine.valid_keys().filter(|(_, account)| account.0 < 2).map(|(digest, _)| digest).collect();
                let any = digests[digests.len() - 1 - draw(digests.len()).min(draw(32))];
                let some_valid = if valid.is_empty() || draw(8) == 0 { any } else { valid[draw(valid.len())] };
                let mut refresh = |engine: &Engine, digest: &KeyDigest| {
                    admission.refresh_key(engine, digest);
                    reference.refresh_key(engine, digest);
                };
                match draw(1_000) {
                    0..=699 => {
                        let answer = admission.admit_key(&some_valid, now);
                        assert_eq!(answer, reference.admit_key(limit, &some_valid, now), "seed {seed}, step {step}");
                        admitted += usize::from(answer.is_ok());
                        limited += usize::from(answer.as_ref().is_err_and(|e| e.code == ErrorCode::RateLimited));
                        by_account += usize::from(answer.is_err_and(|e| e.message.contains("the account's keys")));
                    }
                    700..=799 => {
                        let digest = KeyDigest::of(&format!("rsk_{step}"));
                        let account_id = engine.accounts()[draw(2)].id.clone();
                        let op =
                            AdminOp::CreateKey { account_id, api_key_digest: digest, api_key_prefix: String::new() };
                        engine.handle(now, Command::Admin(op)).unwrap();
                        refresh(&engine, &digest);
                        digests.push(digest);
                    }
                    800..=909 => {
                        let _ = engine.handle(now, Command::Admin(AdminOp::RevokeKey { api_key_digest: some_valid }));
                        refresh(&engine, &some_valid);
                    }
                    910..=919 => {
                        let digest = KeyDigest::of(&format!("rsk_account_{step}"));
                        create_account(&mut engine, digest);
                        refresh(&engine, &digest);
                        digests.push(digest);
                    }
                    920..=949 => copy = Some(engine.clone()),
                    950..=954 if copy.is_some() => {
                        engine = copy.take().unwrap();
                        admission.reload_keys(&engine);
                        reference.reload_keys(&engine);
                    }
                    955 => {
                        admission.clear_windows();
                        reference.by_key.clear();
                        reference.by_account.clear();
                    }
                    _ => admission.table.lock().unwrap().sweep(now),
                }
            }
            let reached = (admitted, limited, by_account);
            assert!(admitted > 1_000 && limited > 1_000 && by_account > 100, "seed {seed}: {reached:?}");
        }
    }

    #[test]
    fn credentials_come_from_the_headers_before_anything_else() {
        let (mut engine, digest) = engine_with_key();
        let admission = Admission::new(&engine);
        let now = Millis::VIRTUAL_EPOCH;
        let headers = |token: &str| {
            let mut map = http::HeaderMap::new();
            map.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            map
        };
        let post = http::Method::POST;
        let status = |r: Result<Admitted, ApiError>| r.err().map(|e| e.status());
        let ok = |r: Result<Admitted, ApiError>| r.ok();
        let fund = "/api/v2/reseller/esim/89/fund";
        assert_eq!(
            ok(admission.screen(&post, fund, &headers("rsk_test"), "adm", now)),
            Some(Admitted::Reseller(digest))
        );
        assert_eq!(status(admission.screen(&post, fund, &headers("rsk_other"), "adm", now)), Some(401));
        // Unknown routes of an API still ask for its credential first (decision 55).
        assert_eq!(status(admission.screen(&post, "/api/v2/reseller/nothing", &headers("x"), "adm", now)), Some(401));
        assert_eq!(status(admission.screen(&post, "//admin/v1/nothing", &headers("rsk_test"), "adm", now)), Some(401));
        assert_eq!(
            ok(admission.screen(&post, "/admin/v1/accounts", &headers("adm"), "adm", now)),
            Some(Admitted::Operator)
        );
        let get = http::Method::GET;
        let openapi = "/api/v2/reseller/openapi.json";
        assert_eq!(ok(admission.screen(&get, openapi, &http::HeaderMap::new(), "adm", now)), Some(Admitted::Public));
        // Outside every API: 404 from the headers, before any body is read.
        assert_eq!(status(admission.screen(&post, "/elsewhere", &http::HeaderMap::new(), "adm", now)), Some(404));
        // A revoked key is refused once the directory follows the engine.
        engine.handle(now, Command::Admin(AdminOp::RevokeKey { api_key_digest: digest })).unwrap();
        admission.refresh_key(&engine, &digest);
        assert_eq!(status(admission.screen(&post, fund, &headers("rsk_test"), "adm", now)), Some(401));
    }

    /// Each way of getting the reseller credential wrong has its own message; the code
    /// and status stay.
    #[test]
    fn a_refused_key_says_what_was_expected() {
        let (engine, _) = engine_with_key();
        let admission = Admission::new(&engine);
        let refusal = |authorization: Option<&str>| {
            let mut headers = http::HeaderMap::new();
            if let Some(value) = authorization {
                headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
            }
            let path = "/api/v2/reseller/wallet/balance";
            let refused = admission.screen(&http::Method::GET, path, &headers, "adm-token", Millis::VIRTUAL_EPOCH);
            let refused = refused.expect_err("refused");
            assert_eq!((refused.code, refused.status()), (ErrorCode::InvalidApiKey, 401));
            refused.message
        };
        let messages = [
            (None, "no Authorization header"),
            (Some("rsk_test"), "is not `Bearer ` and a token"),
            (Some("Token rsk_test"), "is not `Bearer ` and a token"),
            (Some("Bearer adm-token"), "this is the admin token"),
            (Some("Bearer key-123"), "not an API key"),
            (Some("Bearer rsk_revoked"), "invalid or revoked API key"),
        ];
        for (authorization, expected) in messages {
            let message = refusal(authorization);
            assert!(message.contains(expected), "{authorization:?}: {message}");
            let guided = authorization != Some("Bearer rsk_revoked");
            assert_eq!(message.contains("expected `Authorization: Bearer rsk_…`"), guided, "{message}");
        }
    }
}
