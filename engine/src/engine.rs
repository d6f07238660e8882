//! The engine: the parts it composes (the ledger, the event log, the randomness, the
//! records), its constructor, the inputs, outputs and getters of the contract (see the
//! crate docs), and the dispatch of reseller requests and of timers. The rules of each
//! resource live in their own module (`esim`, `group`, `webhook`, `account`, `network`,
//! `wallet`, `event_api`) as `impl Engine` blocks; idempotency in `idempotency`,
//! authentication in `auth`, emitting events in `emit`. No part imports this module.

pub use crate::config::EngineConfig;
#[cfg(feature = "test-switches")]
pub use crate::config::InjectedBug;
pub use crate::effect::{Delivery, Effect};
pub use crate::limits;
pub use crate::secret::constant_time_eq;

use crate::command::{Command, ResellerOp, ResellerRequest};
use crate::event::Event;
use crate::event_log::EventLog;
use crate::ids::{hex, IccidIndex};
use crate::ledger::Ledger;
use crate::random::{Purpose, Randomness};
use crate::reply::{Reply, Response};
use crate::secret::KeyDigest;
use crate::state::*;
use crate::time::Millis;
use crate::timer::Timer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};

/// The service state machine. See the crate docs for the contract.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Engine {
    pub(crate) config: EngineConfig,
    pub(crate) now: Millis,
    /// One random stream per purpose (ids, serials, matching ids), all from the seed.
    pub(crate) randomness: Randomness,
    pub(crate) ledger: Ledger,
    pub(crate) accounts: Vec<Account>,
    pub(crate) account_index: BTreeMap<String, AccountIx>,
    pub(crate) keys: KeyTable,
    pub(crate) esims: Vec<Esim>,
    /// Per account, how many of its eSIMs have each status (indexed by
    /// [`EsimStatus::index`]), so the account record's active count and a filtered list's
    /// total cost no scan of the account's eSIMs (decision 125). Derived from `esims`, so
    /// not part of the state: empty after a snapshot is read, rebuilt by the next command
    /// ([`Engine::ensure_status_counts`]); until then the counts are taken by a scan.
    #[serde(skip)]
    pub(crate) status_counts: Vec<[u32; 4]>,
    /// ICCIDs are all digits (19 of them), so they are indexed as numbers: cheaper to
    /// compare than strings on every eSIM call.
    pub(crate) iccid_index: IccidIndex,
    pub(crate) groups: Vec<Group>,
    pub(crate) group_index: BTreeMap<String, GroupIx>,
    pub(crate) webhooks: Vec<Webhook>,
    pub(crate) webhook_index: BTreeMap<String, WebhookIx>,
    pub(crate) deliveries: BTreeMap<DeliveryId, DeliveryState>,
    pub(crate) next_delivery_id: u64,
    #[serde(with = "crate::state::map_as_pairs")]
    pub(crate) timers: BTreeMap<(Millis, u64), Timer>,
    pub(crate) next_timer_seq: u64,
    pub(crate) inventory: u64,
    pub(crate) next_serial: u64,
    /// What the events API shows: the last 30 days of events (decision 113).
    pub(crate) event_log: EventLog,
    pub(crate) faults: Faults,
    #[serde(with = "crate::state::map_as_pairs")]
    pub(crate) idempotency: BTreeMap<(AccountIx, String), IdempotencyEntry>,
    /// Per account, its stored keys oldest first (with their expiry, which tells a key
    /// stored again after it expired from the entry it replaced).
    pub(crate) idempotency_order: BTreeMap<AccountIx, VecDeque<StoredKey>>,
    /// Output queues, drained by the shell after every input (not part of the state:
    /// a snapshot is taken with them drained).
    #[serde(skip)]
    pub(crate) effects: VecDeque<Effect>,
    #[serde(skip)]
    pub(crate) events: VecDeque<Event>,
    /// A deliberately broken rule, switched on only by tests of the checkers.
    #[cfg(feature = "test-switches")]
    #[serde(skip)]
    pub(crate) injected_bug: Option<InjectedBug>,
}

impl Engine {
    /// A new service at `start`, with an empty state and the inventory of `config`.
    pub fn new(config: EngineConfig, start: Millis) -> Engine {
        Engine {
            randomness: Randomness::new(config.seed),
            inventory: config.initial_inventory,
            config,
            now: start,
            ledger: Ledger::default(),
            accounts: Vec::new(),
            account_index: BTreeMap::new(),
            keys: KeyTable::default(),
            esims: Vec::new(),
            status_counts: Vec::new(),
            iccid_index: IccidIndex::default(),
            groups: Vec::new(),
            group_index: BTreeMap::new(),
            webhooks: Vec::new(),
            webhook_index: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            next_delivery_id: 1,
            timers: BTreeMap::new(),
            next_timer_seq: 0,
            next_serial: 0,
            event_log: EventLog::default(),
            faults: Faults::default(),
            idempotency: BTreeMap::new(),
            idempotency_order: BTreeMap::new(),
            effects: VecDeque::new(),
            events: VecDeque::new(),
            #[cfg(feature = "test-switches")]
            injected_bug: None,
        }
    }

    /// Test-only switch: turn on a known bug (see [`InjectedBug`]).
    #[cfg(feature = "test-switches")]
    pub fn inject_bug_for_test(&mut self, bug: Option<InjectedBug>) {
        self.injected_bug = bug;
    }

    // ----- read-only views (for observers: the simulation's checkers, reports) -----

    /// Every account, by index (for observers: reports, the simulation's checkers).
    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    /// eSIM profiles this engine may still provision: the whole stock unsharded, this
    /// shard's block of the global pool when sharded (decision 185). For observers and
    /// the shell's refill.
    pub fn inventory(&self) -> u64 {
        self.inventory
    }

    /// Every eSIM, by index, terminated ones included (for observers).
    pub fn esims(&self) -> &[Esim] {
        &self.esims
    }

    /// Every group, by index (for observers).
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Every webhook, by index, deleted ones included (for observers and the sealing-key
    /// check at start).
    pub fn webhooks(&self) -> &[Webhook] {
        &self.webhooks
    }

    /// The API keys (for observers and tests: how many records are held, and each
    /// account's index of active keys).
    pub fn api_keys(&self) -> &KeyTable {
        &self.keys
    }

    /// Deliveries the engine still owns (in flight or waiting for a retry).
    pub fn pending_deliveries(&self) -> &BTreeMap<DeliveryId, DeliveryState> {
        &self.deliveries
    }

    /// Displayed wallet balance of an eSIM (what the API shows).
    pub fn esim_displayed_balance(&self, esim: EsimIx) -> rust_decimal::Decimal {
        self.shown_balance(WalletOwner::Esim(esim))
    }

    /// The settings it was created with (the journal header keeps them).
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
        self.handle_ref(now, &command)
    }

    /// [`Engine::handle`] of a borrowed command, with the same outcome: the shell keeps
    /// the command (its journal entry) and the engine copies only what it stores.
    pub fn handle_ref(&mut self, now: Millis, command: &Command) -> Response {
        self.ensure_status_counts();
        self.handle_timeout(now);
        match command {
            Command::Reseller(request) => self.handle_reseller(request),
            Command::Admin(op) => self.handle_admin(op.clone()),
            Command::Sandbox(op) => self.handle_sandbox(op),
            Command::DeliveryOutcome { delivery_id, result, duration_ms } => {
                self.record_delivery_outcome(DeliveryId(*delivery_id), result.clone(), *duration_ms)
            }
        }
    }

    /// The account holding a valid (known, not revoked) API key: a read-only lookup,
    /// for the transport's authentication before it reads a request's body.
    pub fn key_account(&self, digest: &KeyDigest) -> Option<AccountIx> {
        self.key_holder(digest).ok()
    }

    /// Every valid key's digest with its account (the transport's key directory).
    pub fn valid_keys(&self) -> impl Iterator<Item = (KeyDigest, AccountIx)> + '_ {
        self.keys
            .sorted()
            .into_iter()
            .filter(|(_, record)| !record.revoked)
            .map(|(_, record)| (record.digest, record.account))
    }

    /// Fires every timer due at or before `now`, in deadline order, each at its own
    /// deadline. Calling it early or twice is a harmless no-op.
    pub fn handle_timeout(&mut self, now: Millis) {
        while let Some((&(deadline, seq), _)) = self.timers.iter().next() {
            if deadline > now {
                break;
            }
            let timer = self.timers.remove(&(deadline, seq)).expect("first timer exists");
            // A timer is never scheduled before the time of its input, and every timer
            // due by an input fires before the time moves past it.
            assert!(deadline >= self.now, "timers fire in non-decreasing deadline order");
            self.now = deadline;
            self.ledger.set_day(self.now.day_number());
            self.fire(timer);
        }
        self.now = self.now.max(now);
        self.ledger.set_day(self.now.day_number());
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

    /// How many timers are pending (for benchmarks and observers: a sync cycle's or a
    /// clock advance's work is proportional to the timers it fires).
    pub fn pending_timer_count(&self) -> usize {
        self.timers.len()
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

    // ----- the reseller API: authentication, idempotency, dispatch -----

    fn handle_reseller(&mut self, request: &ResellerRequest) -> Response {
        let ResellerRequest { key_digest, idempotency_key, op } = request;
        let account = self.key_holder(key_digest)?;
        match idempotency_key {
            Some(key) if !op.is_read() => self.dispatch_idempotent(account, key_digest, key.clone(), op),
            _ => self.dispatch(account, key_digest, op),
        }
    }

    /// Runs a reseller request of `caller`'s key; what a rule stores is copied out of the
    /// borrowed request.
    pub(crate) fn dispatch(&mut self, account: AccountIx, caller: &KeyDigest, op: &ResellerOp) -> Response {
        use ResellerOp::*;
        match op {
            Provision { end_user_reference, label, group_id } => {
                self.provision(account, end_user_reference.clone(), label.clone(), group_id.clone())
            }
            ListEsims { status, limit, offset } => self.list_esims(account, status.as_deref(), *limit, *offset),
            GetEsim { iccid } => self.get_esim(account, iccid),
            EsimQrCode { iccid } => self.esim_qr_code(account, iccid),
            Enable { iccid } => self.enable(account, iccid),
            Disable { iccid } => self.disable(account, iccid),
            Terminate { iccid } => self.terminate(account, iccid),
            Throttle { iccid, speed } => self.throttle(account, iccid, speed.clone()),
            Fund { iccid, amount } => self.fund(account, iccid, *amount),
            Defund { iccid } => self.defund(account, iccid),
            ListGroups => self.list_groups(account),
            CreateGroup { name, low_balance_threshold_usd, refill_amount_usd } => {
                self.create_group(account, name.clone(), *low_balance_threshold_usd, *refill_amount_usd)
            }
            GetGroup { group_id } => self.get_group(account, group_id),
            UpdateGroup { group_id, name, low_balance_threshold_usd, refill_amount_usd } => {
                self.update_group(account, group_id, name.clone(), *low_balance_threshold_usd, *refill_amount_usd)
            }
            FundGroup { group_id, amount } => self.fund_group(account, group_id, *amount),
            DefundGroup { group_id } => self.defund_group(account, group_id),
            ListGroupEsims { group_id, limit, offset } => self.list_group_esims(account, group_id, *limit, *offset),
            AddGroupEsim { group_id, iccid } => self.add_group_esim(account, group_id, iccid),
            RemoveGroupEsim { group_id, iccid } => self.remove_group_esim(account, group_id, iccid),
            WalletBalance => self.wallet_balance(account),
            Rates { country, continent } => Ok(rates_reply(country.as_deref(), continent.as_deref())),
            Account => self.account_record(account).map(Reply::Account),
            ListWebhooks => self.list_webhooks(account),
            CreateWebhook { url, events, signing_secret } => {
                self.create_webhook(account, url.clone(), events.clone(), signing_secret.clone())
            }
            GetWebhook { webhook_id } => self.get_webhook(account, webhook_id),
            UpdateWebhook { webhook_id, url, events, active } => {
                self.update_webhook(account, webhook_id, url.clone(), events.clone(), *active)
            }
            DeleteWebhook { webhook_id } => self.delete_webhook(account, webhook_id),
            TestWebhook { webhook_id } => self.test_webhook(account, webhook_id),
            RotateWebhookSecret { webhook_id, signing_secret } => {
                self.rotate_webhook_secret(account, webhook_id, signing_secret.clone())
            }
            ListEvents { filter, limit, offset } => self.list_events(account, filter, *limit, *offset),
            GetEvent { event_id } => self.get_event(account, event_id),
            ResendEvent { event_id, webhook_id } => self.resend_event(account, event_id, webhook_id),
            ListDeliveries { webhook_id, event_id, limit, offset } => {
                self.list_deliveries(account, webhook_id, event_id.as_deref(), *limit, *offset)
            }
            ListApiKeys => self.list_api_keys(account, caller),
            CreateApiKey { api_key_digest, api_key_prefix } => {
                self.create_api_key(account, *api_key_digest, api_key_prefix.clone())
            }
            RevokeApiKey { key_id } => self.revoke_api_key(account, key_id),
            GetAutoRefill => self.auto_refill_settings(account),
            UpdateAutoRefill { enabled, amount_usd } => self.update_auto_refill(account, *enabled, *amount_usd),
        }
    }

    /// Test hook: the ledger, to corrupt it and see the checkers fire.
    #[cfg(feature = "test-switches")]
    pub fn ledger_mut_for_test(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    /// The ledger: every balance and flow (for reports and the conservation checkers).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// The engine's draws of its randomness and its timers: thin, the parts hold the rules.
impl Engine {
    /// The shard an id a request routes by names, on a sharded service (decision 168).
    fn id_shard(&self) -> Option<u8> {
        self.config.sharded().then_some(self.config.shard as u8)
    }

    pub(crate) fn random_bytes<const N: usize>(&mut self, purpose: Purpose) -> [u8; N] {
        let mut bytes = [0u8; N];
        let shard = self.id_shard();
        self.randomness.fill(purpose, shard, &mut bytes);
        bytes
    }

    /// `prefix` followed by `2 * bytes` lowercase hex characters.
    pub(crate) fn random_id(&mut self, purpose: Purpose, prefix: &str, bytes: usize) -> String {
        let shard = self.id_shard();
        self.randomness.id(purpose, shard, prefix, bytes)
    }

    /// A random (version 4) UUID: the ids of eSIMs and groups.
    pub(crate) fn random_uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.random_bytes::<16>(Purpose::ResourceId)).into_uuid().to_string()
    }

    /// Waits for `deadline` (never earlier than now); ties fire in scheduling order.
    pub(crate) fn schedule(&mut self, deadline: Millis, timer: Timer) {
        let seq = self.next_timer_seq;
        self.next_timer_seq += 1;
        self.timers.insert((deadline.max(self.now), seq), timer);
    }

    /// Carries out a timer due now (`handle_timeout` set the time to its deadline): the
    /// rule it waited for, in the part that owns it.
    fn fire(&mut self, timer: Timer) {
        match timer {
            Timer::Report(owner) => self.report_usage(owner),
            Timer::SettleReturn(esim) => self.settle_return(WalletOwner::Esim(esim)),
            Timer::SettleGroupDefund(group) => self.settle_return(WalletOwner::Group(group)),
            Timer::RetryDelivery(id) => self.retry_delivery(id),
            Timer::CardSettles(account) => self.card_settles(account),
            Timer::GroupLowDeadline(group) => self.group_low_deadline(group),
            Timer::ExpireIdempotency(account, key) => self.expire_idempotent(account, &key),
            Timer::DropRevokedKey(id) => self.drop_revoked_key(id),
        }
    }
}

/// The rates endpoint: the built-in table filtered by country and continent.
fn rates_reply(country: Option<&str>, continent: Option<&str>) -> Reply {
    let countries = crate::rates::RateTable::builtin().filter(country, continent);
    let total_countries = countries.len() as u64;
    Reply::Rates(crate::reply::Rates { total_countries, discount: crate::rates::DISCOUNT_TEXT, countries })
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
