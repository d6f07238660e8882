//! What the world saw: the [`StepLog`] of one op (its exchanges, events and deliveries)
//! and the typed [`Fact`]s read out of responses, the checkers' only evidence.
//!
//! A leaf of the world's parts: `request`, `receiver`, `observe`, `crash` and `store`
//! each write into the log, and it imports none of them.

use super::compare::Compared;
use super::oracle::Idempotency;
use bytes::Bytes;
use esim_engine::state::WalletOwner;
use esim_engine::{DeliveryResult, Event, EventName, Millis};
use rust_decimal::Decimal;

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

impl Exchange {
    /// A request before its answer: as it is recorded when it cannot even be sent
    /// (status 0, a read that reaches nothing), until the service answers it.
    pub(super) fn unanswered(
        method: http::Method,
        path: String,
        request_body: Bytes,
        key: Option<u32>,
        key_valid: bool,
        at: Millis,
    ) -> Exchange {
        Exchange {
            method,
            path,
            request_body,
            key,
            key_valid,
            engine_bound: false,
            read: true,
            idempotency: Idempotency::None,
            status: 0,
            rate_limited: false,
            body: Bytes::new(),
            retry_after: None,
            at,
            answered: at,
        }
    }
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
