//! What the world saw: the [`StepLog`] of one op (exchanges, events, deliveries) and the
//! typed [`Fact`]s read out of successful responses, the checkers' only evidence.

use super::compare::Compared;
use super::oracle::Idempotency;
use super::receiver::Mode;
use super::request::{Kind, Who};
use super::{AccountRec, Entity, GroupRec, SimRec, WebhookRec, World};
use bytes::Bytes;
use esim_engine::state::{EsimIx, GroupIx, WalletOwner};
use esim_engine::{DeliveryResult, Event, EventName, Millis};
use rust_decimal::Decimal;
use serde_json::Value;
use std::str::FromStr;

/// Something the world read in a response: the checkers' evidence.
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// A manual top-up succeeded (admin API).
    TopUp {
        account: u32,
        amount: Decimal,
    },
    /// A provisioning succeeded (a fee of 1.75).
    Provisioned {
        account: u32,
        sim: u32,
    },
    /// An eSIM fund call succeeded: `amount` left the reseller balance, `shown` is the
    /// wallet balance the response displayed.
    EsimFunded {
        account: u32,
        sim: u32,
        amount: Decimal,
        shown: Decimal,
    },
    GroupFunded {
        account: u32,
        group: u32,
        amount: Decimal,
        shown: Decimal,
    },
    /// A balance return was accepted (eSIM defund, move with balance, group defund).
    ReturnRequested {
        account: u32,
        owner: WalletOwner,
        estimate: Decimal,
    },
    /// A read displayed this eSIM wallet balance.
    EsimShown {
        sim: u32,
        shown: Decimal,
    },
    GroupShown {
        group: u32,
        shown: Decimal,
    },
    /// `GET /wallet/balance` answered these.
    WalletShown {
        account: u32,
        balance: Decimal,
        lifetime_topup: Decimal,
        lifetime_usage: Decimal,
    },
    /// The reseller created, changed or deleted a webhook: its subscription and the
    /// active switch the reseller set (the engine may still disable it after failures).
    WebhookSet {
        webhook: u32,
        account: u32,
        events: Option<Vec<String>>,
        active: Option<bool>,
        deleted: bool,
    },
    /// A webhook's signing secret was shown: at its creation, or by a rotation at `at`.
    SecretShown {
        webhook: u32,
        secret: String,
        rotated_at: Option<Millis>,
    },
    /// A resend was accepted: the event goes to the webhook once, at once.
    Resent {
        event_id: String,
        webhook: u32,
    },
    /// The service restarted (`crash` or `restart`). For a crash, `rebuild` holds the
    /// engine that died compared with the one rebuilt from the journal's bytes (their
    /// digests in that order when they differ), or why the rebuild failed.
    Restarted {
        rebuild: Option<Result<Compared, String>>,
    },
    /// A block of the pool was granted (`grant`): the stock before it, and after it
    /// (`None` when the command was refused, e.g. while the journal refuses changes).
    Granted {
        count: u64,
        before: u64,
        after: Option<u64>,
    },
    /// A node's append to the in-memory store returned success: these entries are
    /// acknowledged (`first` is the index of the first, `crcs` the CRC-32C of each
    /// entry's bytes; `resolved`: its commit's outcome was lost and read back).
    Acknowledged {
        node: String,
        epoch: i64,
        first: u64,
        crcs: Vec<u32>,
        resolved: bool,
    },
    /// The owner's append of entries the world had already seen answered was refused
    /// (or its lease renewal found the shard gone): in the simulation responses go out
    /// before the append, so this is a loss.
    AppendRefused {
        node: String,
        why: String,
    },
    /// The store after the step: the owner row's epoch and head, and every journal row
    /// as `(seq, epoch, crc32c)` in stored order.
    Store {
        epoch: i64,
        head: u64,
        rows: Vec<esim_store::store_mem::RowSum>,
    },
    /// A standby took the shard over (`failover`) at `epoch`, caught up from `from` to
    /// `head` entries.
    TookOver {
        node: String,
        epoch: i64,
        from: u64,
        head: u64,
    },
    /// A paused old owner woke and tried to append (`zombie`): its refusal (none when
    /// it was acknowledged) and whether it then reported itself fenced.
    ZombieTried {
        node: String,
        epoch: i64,
        refusal: Option<String>,
        fenced: bool,
    },
    /// A change's append was held `stall_ms` (`stall`); its client waited `waited_ms`
    /// and, `late`, was answered 503 at the append deadline while the batch committed.
    Stalled {
        stall_ms: i64,
        waited_ms: i64,
        late: bool,
    },
    /// The owner wrote a snapshot covering this many entries (`snapshot`).
    SnapshotWritten {
        covered: u64,
    },
    /// The engine was rebuilt from the store after a crash during a snapshot: from the
    /// newest snapshot written (the entries it covers) and the rows after it, or from
    /// the rows alone.
    RebuiltFromStore {
        from_snapshot: Option<u64>,
    },
    /// The standby and the owner at the same head, their states compared (the
    /// standby's digest first when they differ).
    StandbyAt {
        standby: String,
        head: u64,
        compared: Compared,
    },
}

/// One HTTP request and its response.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: http::Method,
    pub path: String,
    pub request_body: Bytes,
    /// The world's number of the API key used (for the rate limit), if any.
    pub key: Option<u32>,
    /// The key is known to the engine and not revoked.
    pub key_valid: bool,
    /// The request parsed into a reseller command (so the rate limit counted it).
    pub engine_bound: bool,
    pub read: bool,
    pub idempotency: Idempotency,
    pub status: u16,
    /// A 429 of the rate limit (RATE_LIMITED); other 429s are limits of the account.
    pub rate_limited: bool,
    pub body: Bytes,
    /// The Retry-After header of a 429 or 503.
    pub retry_after: Option<String>,
    /// When the request was sent.
    pub at: Millis,
    /// When its answer came (later than `at` only when its append stalled).
    pub answered: Millis,
}

/// A webhook delivery the engine handed out, and the receiver's answer.
#[derive(Clone, Debug)]
pub struct DeliveryRecord {
    pub delivery_id: u64,
    pub webhook_id: String,
    /// Engine index of the webhook, when the world knows it.
    pub webhook: Option<u32>,
    pub event_id: String,
    pub event: EventName,
    pub attempt: u32,
    /// A manual resend.
    pub manual: bool,
    /// The engine time the attempt was handed out at.
    pub timestamp: Millis,
    /// The signing secrets it carried, opened (the current one, and the previous one
    /// during a rotation's overlap); None when one could not be opened.
    pub secrets: Option<(String, Option<String>)>,
    /// False for a delivery handed out earlier and held, answered now.
    pub handed_out: bool,
    /// None while the receiver holds it.
    pub answer: Option<DeliveryResult>,
    pub body: String,
}

/// Everything observed while applying one op.
#[derive(Clone, Debug, Default)]
pub struct StepLog {
    pub index: usize,
    /// Service time after the op.
    pub now: Millis,
    pub exchanges: Vec<Exchange>,
    pub facts: Vec<Fact>,
    pub events: Vec<Event>,
    pub deliveries: Vec<DeliveryRecord>,
    /// Which webhooks were active when events were emitted: (index in `events` of the
    /// first event of a batch, active flag per engine webhook index). One op can emit
    /// several batches (a long clock advance stops at deadlines, and receivers answer
    /// in between, which can disable a webhook).
    pub webhooks_active: Vec<(usize, Vec<bool>)>,
}

impl StepLog {
    pub(super) fn clear(&mut self, index: usize) {
        self.index = index;
        self.exchanges.clear();
        self.facts.clear();
        self.events.clear();
        self.deliveries.clear();
        self.webhooks_active.clear();
    }

    /// The webhooks' active flags when event `event` (an index in `events`) was emitted.
    pub fn active_at(&self, event: usize) -> Option<&[bool]> {
        self.webhooks_active.iter().rev().find(|(first, _)| *first <= event).map(|(_, flags)| flags.as_slice())
    }
}

impl World {
    /// Reads the facts out of a successful, freshly executed response.
    pub(super) fn observe(&mut self, who: Who, kind: &Kind, body: &Bytes) {
        if matches!(kind, Kind::TestWebhook | Kind::Raw | Kind::Other | Kind::Deliveries) {
            return;
        }
        let Ok(fields) = serde_json::from_slice::<Fields>(body) else { return };
        let account = match who {
            Who::Account(i) => Some(self.accounts[i].engine),
            _ => None,
        };
        let caller = match who {
            Who::Account(i) => Some(i),
            _ => None,
        };
        let text = |field: &str| fields.text(field);
        let money = |field: &str| fields.money(field);
        match kind {
            Kind::Provision { bind } => {
                let (Some(iccid), Some(owner), Some(account)) = (text("iccid"), caller, account) else { return };
                let engine = self.engine();
                let Some(sim) = engine.esims().iter().rposition(|e| *e.iccid == *iccid) else { return };
                let name = bind.clone().unwrap_or_else(|| iccid.clone());
                self.bind(&name, iccid.clone(), Entity::Sim(self.sims.len()));
                self.sims.push(SimRec { name, iccid, engine: sim as u32, owner });
                self.log.facts.push(Fact::Provisioned { account, sim: sim as u32 });
            }
            Kind::Fund => {
                let (Some(account), Some(sim), Some(amount), Some(shown)) =
                    (account, self.sim_by_id(text("iccid")), money("funded_usd"), money("wallet_balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::EsimFunded { account, sim, amount, shown });
            }
            Kind::Defund | Kind::Add => {
                let (Some(account), Some(sim)) = (account, self.sim_by_id(text("iccid"))) else { return };
                if let Some(estimate) = money("estimated_return_usd") {
                    self.log.facts.push(Fact::ReturnRequested {
                        account,
                        owner: WalletOwner::Esim(EsimIx(sim)),
                        estimate,
                    });
                }
            }
            Kind::FundGroup => {
                let (Some(account), Some(group), Some(amount), Some(shown)) =
                    (account, self.group_by_id(text("group_id")), money("funded_usd"), money("balance_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::GroupFunded { account, group, amount, shown });
            }
            Kind::DefundGroup => {
                let (Some(account), Some(group), Some(estimate)) =
                    (account, self.group_by_id(text("group_id")), money("estimated_return_usd"))
                else {
                    return;
                };
                self.log.facts.push(Fact::ReturnRequested {
                    account,
                    owner: WalletOwner::Group(GroupIx(group)),
                    estimate,
                });
            }
            Kind::CreateGroup { bind } => {
                let (Some(id), Some(owner)) = (text("id"), caller) else { return };
                let Some(group) = self.engine().groups().iter().rposition(|g| g.id == id) else { return };
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Group(self.groups.len()));
                self.groups.push(GroupRec { name, id, engine: group as u32, owner });
            }
            Kind::ShowGroup => {
                if let (Some(group), Some(shown)) = (self.group_by_id(text("id")), money("balance_usd")) {
                    self.log.facts.push(Fact::GroupShown { group, shown });
                }
            }
            Kind::ShowEsim => {
                if let (Some(sim), Some(shown)) = (self.sim_by_id(text("iccid")), money("wallet_balance_usd")) {
                    self.log.facts.push(Fact::EsimShown { sim, shown });
                }
            }
            Kind::Wallet => {
                if let (Some(account), Some(balance), Some(lifetime_topup), Some(lifetime_usage)) =
                    (account, money("balance_usd"), money("lifetime_topup_usd"), money("lifetime_usage_usd"))
                {
                    self.log.facts.push(Fact::WalletShown { account, balance, lifetime_topup, lifetime_usage });
                }
            }
            Kind::CreateWebhook { bind } => {
                let (Some(id), Some(owner), Some(account)) = (text("id"), caller, account) else { return };
                let Some(webhook) = self.engine().webhooks().iter().rposition(|w| w.id == id) else { return };
                let events = fields.events.clone();
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Webhook(self.webhooks.len()));
                self.webhooks.push(WebhookRec {
                    name,
                    id,
                    engine: webhook as u32,
                    owner,
                    mode: Mode::Ok,
                    deleted: false,
                });
                let webhook = webhook as u32;
                self.log.facts.push(Fact::WebhookSet { webhook, account, events, active: Some(true), deleted: false });
                if let Some(secret) = fields.signing_secret.clone() {
                    self.log.facts.push(Fact::SecretShown { webhook, secret, rotated_at: None });
                }
            }
            Kind::RotateSecret => {
                let (Some(Entity::Webhook(i)), Some(secret)) =
                    (text("id").and_then(|id| self.ids.get(&id).copied()), fields.signing_secret.clone())
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::SecretShown { webhook, secret, rotated_at: Some(self.now) });
            }
            Kind::Resend => {
                let (Some(event_id), Some(Entity::Webhook(i))) =
                    (fields.event_id.clone(), fields.webhook_id.as_ref().and_then(|id| self.ids.get(id).copied()))
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::Resent { event_id, webhook });
            }
            Kind::UpdateWebhook { events, active } => {
                let (Some(Entity::Webhook(i)), Some(account)) =
                    (text("id").and_then(|id| self.ids.get(&id).copied()), account)
                else {
                    return;
                };
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::WebhookSet {
                    webhook,
                    account,
                    events: events.clone(),
                    active: *active,
                    deleted: false,
                });
            }
            Kind::DeleteWebhook { id } => {
                let (Some(Entity::Webhook(i)), Some(account)) = (self.ids.get(id).copied(), account) else { return };
                self.webhooks[i].deleted = true;
                let webhook = self.webhooks[i].engine;
                self.log.facts.push(Fact::WebhookSet { webhook, account, events: None, active: None, deleted: true });
            }
            Kind::CreateAccount { bind } => {
                let (Some(id), Some(key)) = (text("account_id"), text("api_key")) else { return };
                let Some(engine) = self.engine().accounts().iter().rposition(|a| a.id == id) else { return };
                let key_number = self.keys.len() as u32;
                self.keys.push(key);
                let name = bind.clone().unwrap_or_else(|| id.clone());
                self.bind(&name, id.clone(), Entity::Account(self.accounts.len()));
                self.accounts.push(AccountRec { name, id, engine: engine as u32, key: key_number, revoked: false });
            }
            Kind::TopUp { account_id } => {
                if let (Some(Entity::Account(i)), Some(amount)) = (self.ids.get(account_id), money("amount_usd")) {
                    let account = self.accounts[*i].engine;
                    self.log.facts.push(Fact::TopUp { account, amount });
                }
            }
            Kind::NewKey { account_id } => {
                if let (Some(&Entity::Account(i)), Some(key)) = (self.ids.get(account_id), text("api_key")) {
                    self.accounts[i].key = self.keys.len() as u32;
                    self.accounts[i].revoked = false;
                    self.keys.push(key);
                }
            }
            Kind::Revoke { key } => {
                for account in self.accounts.iter_mut().filter(|a| &self.keys[a.key as usize] == key) {
                    account.revoked = true;
                }
            }
            Kind::MadeKey => {
                if let (Some(i), Some(key)) = (caller, text("api_key")) {
                    self.accounts[i].key = self.keys.len() as u32;
                    self.keys.push(key);
                }
            }
            Kind::RevokedOwnKey => {
                if let Some(i) = caller {
                    self.accounts[i].revoked = true;
                }
            }
            Kind::TestWebhook | Kind::Raw | Kind::Other | Kind::Deliveries => {}
        }
    }
}

/// The response fields the world reads; everything else is skipped, not parsed.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Fields {
    id: Option<String>,
    iccid: Option<String>,
    group_id: Option<String>,
    account_id: Option<String>,
    api_key: Option<String>,
    events: Option<Vec<String>>,
    funded_usd: Option<serde_json::Number>,
    wallet_balance_usd: Option<serde_json::Number>,
    balance_usd: Option<serde_json::Number>,
    estimated_return_usd: Option<serde_json::Number>,
    lifetime_topup_usd: Option<serde_json::Number>,
    lifetime_usage_usd: Option<serde_json::Number>,
    amount_usd: Option<serde_json::Number>,
    signing_secret: Option<String>,
    event_id: Option<String>,
    webhook_id: Option<String>,
}

impl Fields {
    fn text(&self, name: &str) -> Option<String> {
        match name {
            "id" => self.id.clone(),
            "iccid" => self.iccid.clone(),
            "group_id" => self.group_id.clone(),
            "account_id" => self.account_id.clone(),
            "api_key" => self.api_key.clone(),
            _ => None,
        }
    }

    fn money(&self, name: &str) -> Option<Decimal> {
        let number = match name {
            "funded_usd" => &self.funded_usd,
            "wallet_balance_usd" => &self.wallet_balance_usd,
            "balance_usd" => &self.balance_usd,
            "estimated_return_usd" => &self.estimated_return_usd,
            "lifetime_topup_usd" => &self.lifetime_topup_usd,
            "lifetime_usage_usd" => &self.lifetime_usage_usd,
            "amount_usd" => &self.amount_usd,
            _ => return None,
        };
        decimal(&Value::Number(number.clone()?))
    }
}

/// A JSON number or string as a decimal (exact: numbers keep their digits).
pub fn decimal(value: &Value) -> Option<Decimal> {
    let text = match value {
        Value::Number(number) => number.to_string(),
        Value::String(text) => text.clone(),
        _ => return None,
    };
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}
