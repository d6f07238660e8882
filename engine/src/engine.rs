//! The engine: state, the command dispatcher, timers, events and the output queues.
//! The rules of each resource live in their own module (`esim`, `group`, `webhook`,
//! `account`, `network`) as `impl Engine` blocks.

use crate::command::{Command, DeliveryResult, ResellerOp, ResellerRequest};
use crate::error::{ApiError, ErrorCode};
use crate::event::{Event, EventName};
use crate::ledger::Ledger;
use crate::reply::{QrCodeDataUrl, Reply, Response};
use crate::secret::{KeyDigest, SealedSecret};
use crate::state::*;
use crate::time::Millis;
use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};

/// Settings fixed when the engine is created (stored in the journal header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineConfig {
    pub seed: u64,
    /// Reporting pause after every fund call (spec: about 15 minutes).
    pub reporting_pause_ms: i64,
    /// Time for a defund, move or group defund to settle (spec: about 15 minutes).
    pub settle_delay_ms: i64,
    /// Length of an upstream sync cycle: reported usage moves on cycle boundaries.
    pub sync_interval_ms: i64,
    /// Time for a simulated card charge to settle.
    pub card_settle_ms: i64,
    /// How long group.balance_low waits for an auto-refill credit (spec: about 30 minutes).
    pub group_low_wait_ms: i64,
    /// Accept `http://` and private webhook targets (local development only).
    pub allow_insecure_webhooks: bool,
    /// eSIM profiles in stock on a new service.
    pub initial_inventory: u64,
    /// Requests per minute per API key.
    pub rate_limit_per_minute: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            seed: 0,
            reporting_pause_ms: 15 * Millis::MINUTE,
            settle_delay_ms: 15 * Millis::MINUTE,
            sync_interval_ms: Millis::MINUTE,
            card_settle_ms: 2 * Millis::MINUTE,
            group_low_wait_ms: 30 * Millis::MINUTE,
            allow_insecure_webhooks: false,
            initial_inventory: 100_000,
            rate_limit_per_minute: 100,
        }
    }
}

/// Limits of the spec, as named constants.
pub mod limits {
    pub const PAGE_DEFAULT: u64 = 50;
    pub const PAGE_MAX: u64 = 100;
    pub const MAX_GROUPS: u32 = 10;
    pub const MAX_GROUP_SIZE: u32 = 500;
    pub const MAX_WEBHOOKS: usize = 5;
    pub const WEBHOOK_DISABLE_AT: u32 = 10;
    pub const AUTO_REFILL_MAX_PER_DAY: usize = 10;
    pub const IDEMPOTENCY_TTL_MS: i64 = 24 * crate::Millis::HOUR;
    /// Stored answers per account at most: past it the oldest is dropped first, so
    /// requests with fresh keys cannot grow the state without bound.
    pub const IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX: usize = 10_000;
    /// Longest `Idempotency-Key`.
    pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 255;
    pub const RATE_WINDOW_MS: i64 = crate::Millis::MINUTE;
    /// Webhook retries: 30 s, 1 min, 2 min, ... doubling, each wait capped at 6 hours,
    /// given up 3 days after the first attempt.
    pub const RETRY_BASE_MS: i64 = 30 * crate::Millis::SECOND;
    pub const RETRY_MAX_WAIT_MS: i64 = 6 * crate::Millis::HOUR;
    pub const RETRY_WINDOW_MS: i64 = 3 * crate::Millis::DAY;
    /// Longest free-text field (labels, references, names, URLs).
    pub const MAX_TEXT_LEN: usize = 256;
    /// Largest single usage report from a device, in MB.
    pub const MAX_USAGE_MB: i64 = 1_000_000;
}

/// Something the shell must carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Effect {
    /// POST `body` to `url` with the headers of [`Delivery::headers`], then report the
    /// outcome with [`Command::DeliveryOutcome`].
    Deliver(Delivery),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    pub delivery_id: u64,
    pub webhook_id: String,
    pub url: String,
    pub event_id: String,
    pub event: EventName,
    pub body: String,
    /// The webhook's signing secret, sealed: the sender opens it and signs `body`
    /// (the engine never holds the secret itself).
    pub signing_secret: SealedSecret,
    pub timestamp: Millis,
    pub attempt: u32,
}

/// The service state machine. See the crate docs for the contract.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Engine {
    pub(crate) config: EngineConfig,
    pub(crate) now: Millis,
    pub(crate) rng: ChaCha20Rng,
    pub(crate) ledger: Ledger,
    pub(crate) accounts: Vec<Account>,
    pub(crate) account_index: BTreeMap<String, u32>,
    #[serde(with = "crate::state::map_as_pairs")]
    pub(crate) keys: BTreeMap<u128, KeyRecord>,
    pub(crate) esims: Vec<Esim>,
    /// ICCIDs are all digits (19 of them), so they are indexed as numbers: cheaper to
    /// compare than strings on every eSIM call.
    pub(crate) iccid_index: BTreeMap<u64, u32>,
    pub(crate) groups: Vec<Group>,
    pub(crate) group_index: BTreeMap<String, u32>,
    pub(crate) webhooks: Vec<Webhook>,
    pub(crate) webhook_index: BTreeMap<String, u32>,
    pub(crate) deliveries: BTreeMap<u64, DeliveryState>,
    pub(crate) next_delivery_id: u64,
    #[serde(with = "crate::state::map_as_pairs")]
    pub(crate) timers: BTreeMap<(Millis, u64), Timer>,
    pub(crate) next_timer_seq: u64,
    pub(crate) inventory: u64,
    pub(crate) next_serial: u64,
    pub(crate) faults: Faults,
    #[serde(with = "crate::state::map_as_pairs")]
    pub(crate) idempotency: BTreeMap<(u32, String), IdempotencyEntry>,
    /// Per account, its stored keys oldest first (with their expiry, which tells a key
    /// stored again after it expired from the entry it replaced).
    pub(crate) idempotency_order: BTreeMap<u32, VecDeque<(Millis, String)>>,
    /// Output queues, drained by the shell after every input (not part of the state:
    /// a snapshot is taken with them drained).
    #[serde(skip)]
    pub(crate) effects: VecDeque<Effect>,
    #[serde(skip)]
    pub(crate) events: VecDeque<Event>,
    /// A deliberately broken rule, switched on only by tests of the checkers.
    #[serde(skip)]
    pub(crate) injected_bug: Option<InjectedBug>,
}

/// Known bugs a test can switch on to prove that the simulation catches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// An eSIM defund or move settlement credits one cent more than it returns.
    SettlementPaysOneCentMore,
    /// Every eSIM fund panics (a bug in the engine: the server must end, not limp on).
    PanicOnFund,
}

impl Engine {
    pub fn new(config: EngineConfig, start: Millis) -> Engine {
        Engine {
            rng: ChaCha20Rng::seed_from_u64(config.seed),
            inventory: config.initial_inventory,
            config,
            now: start,
            ledger: Ledger::default(),
            accounts: Vec::new(),
            account_index: BTreeMap::new(),
            keys: BTreeMap::new(),
            esims: Vec::new(),
            iccid_index: BTreeMap::new(),
            groups: Vec::new(),
            group_index: BTreeMap::new(),
            webhooks: Vec::new(),
            webhook_index: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            next_delivery_id: 1,
            timers: BTreeMap::new(),
            next_timer_seq: 0,
            next_serial: 0,
            faults: Faults::default(),
            idempotency: BTreeMap::new(),
            idempotency_order: BTreeMap::new(),
            effects: VecDeque::new(),
            events: VecDeque::new(),
            injected_bug: None,
        }
    }

    /// Test-only switch: turn on a known bug (see [`InjectedBug`]).
    #[doc(hidden)]
    pub fn inject_bug_for_test(&mut self, bug: Option<InjectedBug>) {
        self.injected_bug = bug;
    }

    // ----- read-only views (for observers: the simulation's checkers, reports) -----

    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    pub fn esims(&self) -> &[Esim] {
        &self.esims
    }

    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub fn webhooks(&self) -> &[Webhook] {
        &self.webhooks
    }

    /// Deliveries the engine still owns (in flight or waiting for a retry).
    pub fn pending_deliveries(&self) -> &BTreeMap<u64, DeliveryState> {
        &self.deliveries
    }

    /// Displayed wallet balance of an eSIM (what the API shows).
    pub fn esim_displayed_balance(&self, sim: u32) -> rust_decimal::Decimal {
        self.shown_balance(WalletOwner::Sim(sim))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The service time of the last input.
    pub fn now(&self) -> Millis {
        self.now
    }

    // ----- inputs -----

    /// Applies one command at `now`. Timers due at or before `now` fire first. A
    /// reseller request comes already admitted by the transport (key known, rate limit
    /// passed: see [`Engine::key_account`]); the engine still refuses a key that is
    /// unknown or revoked by now. Replaying a journal is calling this with its entries.
    pub fn handle(&mut self, now: Millis, command: Command) -> Response {
        self.handle_timeout(now);
        match command {
            Command::Reseller(request) => self.handle_reseller(request),
            Command::Admin(op) => self.handle_admin(op),
            Command::Sandbox(op) => self.handle_sandbox(op),
            Command::DeliveryOutcome { delivery_id, result } => self.delivery_outcome(delivery_id, result),
        }
    }

    /// The account holding a valid (known, not revoked) API key: a read-only lookup,
    /// for the transport's authentication before it reads a request's body.
    pub fn key_account(&self, digest: &KeyDigest) -> Option<u32> {
        self.key_holder(digest).ok()
    }

    /// Every valid key's digest with its account (the transport's key directory).
    pub fn valid_keys(&self) -> impl Iterator<Item = (KeyDigest, u32)> + '_ {
        self.keys.values().filter(|record| !record.revoked).map(|record| (record.digest, record.account))
    }

    /// The account holding a valid (known, not revoked) API key.
    fn key_holder(&self, digest: &KeyDigest) -> Result<u32, ApiError> {
        match self.keys.get(&digest.id()) {
            // The map is keyed by the first half of the digest; the whole digest is then
            // compared in constant time.
            Some(record) if !record.revoked && constant_time_eq(&record.digest.0, &digest.0) => Ok(record.account),
            _ => Err(ApiError::new(ErrorCode::InvalidApiKey, "missing, invalid or revoked API key")),
        }
    }

    /// Fires every timer due at or before `now`, in deadline order, each at its own
    /// deadline. Calling it early or twice is a harmless no-op.
    pub fn handle_timeout(&mut self, now: Millis) {
        while let Some((&(deadline, seq), _)) = self.timers.iter().next() {
            if deadline > now {
                break;
            }
            let timer = self.timers.remove(&(deadline, seq)).expect("first timer exists");
            self.now = self.now.max(deadline);
            self.fire(timer);
        }
        self.now = self.now.max(now);
    }

    /// What a restart of the shell does to the state it recovered (or kept): deliveries
    /// handed out before it are handed out again, with their ids and attempt numbers.
    pub fn restart(&mut self) {
        self.redeliver_in_flight();
    }

    // ----- outputs -----

    /// The next deadline at which the engine wants [`Engine::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.timers.keys().next().map(|(deadline, _)| *deadline)
    }

    /// The next effect for the shell (webhook deliveries to make).
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The next emitted event (for observers: logs, tests, the simulation).
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// SHA-256 of the whole durable state (everything but the rate-limit windows and
    /// the output queues), lowercase hex.
    pub fn state_digest(&self) -> String {
        let mut hasher = Sha256::new();
        serde_json::to_writer(HashWriter(&mut hasher), self).expect("state serializes");
        hex(&hasher.finalize())
    }

    // ----- the reseller API: authentication, rate limit, idempotency, dispatch -----

    fn handle_reseller(&mut self, request: ResellerRequest) -> Response {
        let ResellerRequest { key_digest, idempotency_key, op } = request;
        let account = self.key_holder(&key_digest)?;
        let Some(key) = idempotency_key.filter(|_| !op.is_read()) else {
            return self.dispatch(account, op);
        };
        if key.is_empty() || key.len() > limits::IDEMPOTENCY_KEY_LEN_MAX {
            return Err(ApiError::validation(format!(
                "Idempotency-Key must be 1 to {} characters",
                limits::IDEMPOTENCY_KEY_LEN_MAX
            )));
        }
        let fingerprint = request_fingerprint(&op);
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
        let response = self.dispatch(account, op);
        if is_final(&response) {
            self.store_idempotent(account, key, fingerprint, &response);
        }
        response
    }

    /// Keeps a final answer for its `Idempotency-Key`, dropping the account's oldest
    /// stored answer when it holds the most it may.
    fn store_idempotent(&mut self, account: u32, key: String, fingerprint: [u8; 32], response: &Response) {
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
        order.push_back((expires_at, key.clone()));
        if order.len() > limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX {
            let (oldest_expiry, oldest) = order.pop_front().expect("the queue is over its limit");
            self.forget_idempotent(account, &oldest, oldest_expiry);
        }
        assert!(
            self.idempotency_order[&account].len() <= limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX,
            "the idempotency store of an account is bounded"
        );
        self.schedule(expires_at, Timer::ExpireIdempotency(account, key));
    }

    /// Drops a stored answer, if it is still the one stored with this expiry.
    fn forget_idempotent(&mut self, account: u32, key: &str, expires_at: Millis) {
        let slot = (account, key.to_string());
        if self.idempotency.get(&slot).is_some_and(|entry| entry.expires_at == expires_at) {
            self.idempotency.remove(&slot);
        }
    }

    fn dispatch(&mut self, account: u32, op: ResellerOp) -> Response {
        use ResellerOp::*;
        match op {
            Provision { end_user_reference, label, group_id } => {
                self.provision(account, end_user_reference, label, group_id)
            }
            ListEsims { status, limit, offset } => self.list_esims(account, status, limit, offset),
            GetEsim { iccid } => self.get_esim(account, &iccid),
            Enable { iccid } => self.enable(account, &iccid),
            Disable { iccid } => self.disable(account, &iccid),
            Terminate { iccid } => self.terminate(account, &iccid),
            Throttle { iccid, speed } => self.throttle(account, &iccid, speed),
            Fund { iccid, amount } => self.fund(account, &iccid, amount),
            Defund { iccid } => self.defund(account, &iccid),
            ListGroups => self.list_groups(account),
            CreateGroup { name, low_balance_threshold_usd, refill_amount_usd } => {
                self.create_group(account, name, low_balance_threshold_usd, refill_amount_usd)
            }
            GetGroup { group_id } => self.get_group(account, &group_id),
            UpdateGroup { group_id, name, low_balance_threshold_usd, refill_amount_usd } => {
                self.update_group(account, &group_id, name, low_balance_threshold_usd, refill_amount_usd)
            }
            FundGroup { group_id, amount } => self.fund_group(account, &group_id, amount),
            DefundGroup { group_id } => self.defund_group(account, &group_id),
            ListGroupEsims { group_id, limit, offset } => self.list_group_esims(account, &group_id, limit, offset),
            AddGroupEsim { group_id, iccid } => self.add_group_esim(account, &group_id, &iccid),
            RemoveGroupEsim { group_id, iccid } => self.remove_group_esim(account, &group_id, &iccid),
            WalletBalance => self.wallet_balance(account),
            Rates { country, continent } => Ok(crate::rates_reply(country.as_deref(), continent.as_deref())),
            Account => self.account_record(account).map(Reply::Account),
            ListWebhooks => self.list_webhooks(account),
            CreateWebhook { url, events, signing_secret } => self.create_webhook(account, url, events, signing_secret),
            GetWebhook { webhook_id } => self.get_webhook(account, &webhook_id),
            UpdateWebhook { webhook_id, url, events, active } => {
                self.update_webhook(account, &webhook_id, url, events, active)
            }
            DeleteWebhook { webhook_id } => self.delete_webhook(account, &webhook_id),
            TestWebhook { webhook_id } => self.test_webhook(account, &webhook_id),
        }
    }

    // ----- timers -----

    pub(crate) fn schedule(&mut self, deadline: Millis, timer: Timer) {
        let seq = self.next_timer_seq;
        self.next_timer_seq += 1;
        self.timers.insert((deadline.max(self.now), seq), timer);
    }

    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::Report(owner) => self.report_usage(owner),
            Timer::SettleReturn(sim) => self.settle_return(WalletOwner::Sim(sim)),
            Timer::SettleGroupDefund(group) => self.settle_return(WalletOwner::Group(group)),
            Timer::RetryDelivery(id) => self.retry_delivery(id),
            Timer::CardSettles(account) => self.card_settles(account),
            Timer::GroupLowDeadline(group) => self.group_low_deadline(group),
            Timer::ExpireIdempotency(account, key) => {
                // Keys expire in the order they were stored (a fixed TTL, time never goes
                // back), so the expired one heads its account's queue unless the bound
                // dropped it already (then this timer is stale: expected).
                let order = self.idempotency_order.entry(account).or_default();
                if order.front().is_some_and(|(expiry, front)| *expiry <= self.now && *front == key) {
                    let (expiry, key) = order.pop_front().expect("checked");
                    if order.is_empty() {
                        self.idempotency_order.remove(&account);
                    }
                    self.forget_idempotent(account, &key, expiry);
                }
            }
        }
    }

    // ----- events -----

    /// Emits an event of an account: queued for observers, and handed to every active
    /// webhook of the account subscribed to it.
    pub(crate) fn emit(&mut self, account: u32, name: EventName, data: serde_json::Value) {
        let event = Event { id: self.random_id("evt_", 12), account, name, created_at: self.now, data };
        let body = String::from_utf8(event.envelope_bytes()).expect("JSON is UTF-8");
        let targets: Vec<u32> = self.accounts[account as usize]
            .webhooks
            .iter()
            .copied()
            .filter(|&w| {
                let webhook = &self.webhooks[w as usize];
                webhook.active && !webhook.deleted && webhook.subscription.covers(name)
            })
            .collect();
        for webhook in targets {
            self.start_delivery(webhook, &event, body.clone(), false);
        }
        self.events.push_back(event);
    }

    // ----- randomness -----

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

    /// Test hook: the ledger, to corrupt it and see the checkers fire.
    #[doc(hidden)]
    pub fn ledger_mut_for_test(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Outcome of a delivery handed out as an effect.
    fn delivery_outcome(&mut self, delivery_id: u64, result: DeliveryResult) -> Response {
        self.record_delivery_outcome(delivery_id, result)
    }
}

/// Feeds serialized bytes straight into a hasher (no buffer of the whole state).
struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
