//! The service's journal in the in-memory store ([`esim_store::store_mem`]), with a
//! hot standby following it and the store's faults (issue 17; decisions 163-167).
//!
//! The world's service is the owner node: after every op its journal entries are
//! appended through the owner's [`JournalSink`] (acknowledged or refused, recorded as
//! facts), the owner renews its lease, and the standby follows unless it was told to
//! lag. The ops `failover`, `zombie`, `lost_commit`, `stall N` and `standby_lag N` switch
//! the faults. In the simulation a response is observed before its entries are appended
//! (except under `stall`, where the request waits for its append up to the deadline), so
//! every append must be acknowledged: a refusal is a loss (`no_acknowledged_loss`).

use super::compare::{compare, Compared};
use super::log::Fact;
use super::World;
use crate::InjectedBug;
use esim_api::service::JOURNAL_RETRY_AFTER_S;
use esim_api::{ClockMode, JournalEntry};
use esim_engine::{ApiError, Engine, ErrorCode};
use esim_store::journal::{self, SegmentHeader};
use esim_store::sink::JournalSink;
use esim_store::store_mem::{CommitFault, MemNode, MemOpened, MemStandby, MemStore};

/// The lease of the simulated nodes, by the store's clock (the PostgreSQL store's
/// default).
pub const STORE_LEASE_MS: i64 = esim_store::store_pg::LEASE_MS as i64;
/// The standby's state is compared with the owner's every this many steps, at every
/// store op and takeover, and at the last step of a run ([`World::compare_standby_next`]).
/// A comparison serializes two whole states (the largest cost of a step), and a standby
/// that diverged stays diverged (it only applies entries), so the last step's comparison
/// proves what the periodic ones did; they report it sooner, in runs longer than the
/// usual 200 steps (decision 290).
pub const STANDBY_DIGEST_EVERY_STEPS: usize = 200;
/// How long a request waits for its batch to be durable: the server's default
/// (`--append-deadline-ms`, decision 220).
pub const APPEND_DEADLINE_MS: i64 = esim_store::sink::APPEND_DEADLINE_MS as i64;

/// The answer a client sees when its append outlasted the deadline.
pub(super) struct LateAnswer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: bytes::Bytes,
}

/// The nodes of one world around its store.
pub(super) struct Nodes {
    store: MemStore,
    /// The node whose engine the world's service runs.
    owner: MemNode,
    standby: Option<MemStandby>,
    /// The previous owner after a takeover: paused, and still believing it owns the shard.
    zombie: Option<MemNode>,
    /// Steps for which the standby does not follow (it is behind).
    lag_steps: u32,
    /// Nodes started so far (their names are `node0`, `node1`, …).
    started: u32,
    /// The head the last `Store` fact reported.
    reported_head: u64,
    /// The entries the newest snapshot the world wrote covers (`snapshot`).
    snapshot_covers: Option<u64>,
    /// Compare the standby's digest with the owner's after the next op.
    compare_next: bool,
    /// `stall N`: the append of the next change's batch is held this many virtual ms.
    stall_ms: Option<i64>,
    /// Test switch: a stalled request waits for its append past the deadline.
    pub(super) ignores_deadline: bool,
}

impl Nodes {
    /// A new store whose journal starts from `header`, its owner and a standby.
    pub(super) fn new(header: SegmentHeader, prepare: &dyn Fn(&mut Engine)) -> Nodes {
        let store = MemStore::new(header);
        let owner = match store.take_shard("node0", STORE_LEASE_MS, true) {
            Ok(MemOpened::Owner(node, _)) => *node,
            Ok(MemOpened::Leased(holder)) => unreachable!("a new store has no owner, yet {holder:?}"),
            Err(why) => unreachable!("a new store cannot fail to load: {why}"),
        };
        let mut nodes = Nodes {
            store,
            owner,
            standby: None,
            zombie: None,
            lag_steps: 0,
            started: 1,
            reported_head: 0,
            snapshot_covers: None,
            compare_next: false,
            stall_ms: None,
            ignores_deadline: false,
        };
        nodes.start_standby(prepare);
        nodes
    }

    fn start_standby(&mut self, prepare: &dyn Fn(&mut Engine)) {
        let name = format!("node{}", self.started);
        self.started += 1;
        // A store the world appended to always loads; if not, the next failover says so.
        self.standby = self.store.standby_with(&name, prepare).ok();
    }

    pub(super) fn has_zombie(&self) -> bool {
        self.zombie.is_some()
    }
}

pub(super) fn header(config: &esim_engine::EngineConfig) -> SegmentHeader {
    SegmentHeader {
        version: journal::FORMAT_VERSION,
        config: config.clone(),
        clock: ClockMode::Virtual,
        start: esim_engine::Millis::VIRTUAL_EPOCH,
        first_index: 0,
    }
}

/// The hook every engine the store builds for a world gets: the world's test switch, as
/// a standby running the same binary would have it (decision 167).
#[cfg_attr(not(feature = "test-switches"), allow(unused_variables))]
pub(super) fn prepare(bug: Option<InjectedBug>) -> impl Fn(&mut Engine) {
    move |_engine: &mut Engine| {
        #[cfg(feature = "test-switches")]
        _engine.inject_bug_for_test(bug);
    }
}

impl World {
    /// Hands the service's new journal entries to the owner node (after every op, and
    /// before a restart or takeover), then renews the lease and lets the standby follow.
    pub(super) fn commit_journal(&mut self) {
        let entries = self.service.drain_journal();
        if !entries.is_empty() {
            self.append_to_store(&entries);
            self.journal.extend(entries);
        }
        let nodes = &mut self.nodes;
        // The renewal thread's tick: the current owner is never fenced in a correct store.
        if let Err(why) = nodes.owner.renew() {
            self.log.facts.push(Fact::AppendRefused { node: nodes.owner.name().to_string(), why });
        }
        if nodes.lag_steps > 0 {
            nodes.lag_steps -= 1;
        } else if let Some(standby) = nodes.standby.as_mut() {
            // A standby that cannot read the store stays where it is; a failover says why.
            let _ = standby.follow();
        }
    }

    fn append_to_store(&mut self, entries: &[JournalEntry]) {
        let owner = &mut self.nodes.owner;
        match owner.append(entries) {
            Ok(()) => {
                if let Some(ack) = owner.take_ack() {
                    let fact = Fact::Acknowledged {
                        node: ack.node,
                        epoch: ack.epoch,
                        first: ack.first,
                        crcs: ack.crcs,
                        resolved: ack.resolved,
                    };
                    self.log.facts.push(fact);
                }
            }
            Err(error) => {
                let fact = Fact::AppendRefused { node: owner.name().to_string(), why: error.to_string() };
                self.log.facts.push(fact);
            }
        }
    }

    /// The facts about the store a step ends with: its rows when the head moved (or a
    /// store op ran), and the standby's digest beside the owner's at intervals.
    pub(super) fn report_store(&mut self, store_op: bool) {
        let nodes = &mut self.nodes;
        let owner = nodes.store.owner();
        let (epoch, head) = owner.map_or((0, 0), |o| (o.epoch, o.head));
        if store_op || head != nodes.reported_head {
            nodes.reported_head = head;
            self.log.facts.push(Fact::Store { epoch, head, rows: nodes.store.row_sums() });
        }
        let due = store_op
            || self.steps.is_multiple_of(STANDBY_DIGEST_EVERY_STEPS)
            || std::mem::take(&mut nodes.compare_next);
        if let Some(standby) = nodes.standby.as_ref().filter(|s| due && s.applied() == head) {
            let compared = compare(standby.engine(), self.service.engine());
            self.log.facts.push(Fact::StandbyAt { standby: standby.name().to_string(), head, compared });
        }
    }

    /// `failover`: the owner pauses (renews no more) until its lease has run out; the
    /// standby takes the shard over (a new epoch), catches up to the head, and serves:
    /// the world's service continues with its engine, and what any restart loses is
    /// lost (deliveries in flight are handed out again). The paused owner is kept as the
    /// zombie; a new standby starts from the store.
    pub(super) fn failover(&mut self) {
        self.commit_journal();
        self.nodes.store.advance_ms(STORE_LEASE_MS + 1);
        let prepare = prepare(self.bug);
        if self.nodes.standby.is_none() {
            self.nodes.start_standby(&prepare);
        }
        let taken = match self.nodes.standby.take() {
            None => Err("no standby could load the store".to_string()),
            Some(standby) => {
                let from = standby.applied();
                match standby.take_over(STORE_LEASE_MS) {
                    Ok(Ok((node, engine))) => Ok((node, engine, from)),
                    Ok(Err(standby)) => {
                        let why = format!("{} could not take the shard over: the lease is live", standby.name());
                        self.nodes.standby = Some(standby);
                        Err(why)
                    }
                    Err(why) => Err(why),
                }
            }
        };
        match taken {
            Ok((node, engine, from)) => {
                // The engine that caught up against the paused owner's (unchanged since).
                let compared = compare(&engine, self.service.engine());
                let head = node.next_index();
                self.log.facts.push(Fact::TookOver { node: node.name().to_string(), epoch: node.epoch(), from, head });
                self.log.facts.push(Fact::StandbyAt {
                    standby: node.name().to_string(),
                    head,
                    compared: compared.clone(),
                });
                // A crash compares the engine that died first.
                let rebuilt = match compared {
                    Compared::Differ(standby, owner) => Compared::Differ(owner, standby),
                    Compared::Same => Compared::Same,
                };
                self.log.facts.push(Fact::Restarted { rebuild: Some(Ok(rebuilt)) });
                self.service.replace_engine(engine);
                let old = std::mem::replace(&mut self.nodes.owner, node);
                self.nodes.zombie = Some(old);
                self.nodes.lag_steps = 0;
                self.nodes.start_standby(&prepare);
            }
            Err(why) => self.log.facts.push(Fact::Restarted { rebuild: Some(Err(why)) }),
        }
        self.held.clear();
        self.service.restart();
    }

    /// `zombie`: the paused old owner wakes and appends an entry (a copy of the newest
    /// one) as if it still owned the shard. It must be refused and know it is fenced.
    /// Without a zombie (no failover yet) nothing happens.
    pub(super) fn zombie_append(&mut self) {
        self.commit_journal();
        let entry = self.journal.last().cloned().unwrap_or(JournalEntry::Tick { at: self.now });
        let Some(zombie) = self.nodes.zombie.as_mut() else { return };
        let tried = zombie.append(&[entry]);
        if let Some(ack) = zombie.take_ack() {
            self.log.facts.push(Fact::Acknowledged {
                node: ack.node,
                epoch: ack.epoch,
                first: ack.first,
                crcs: ack.crcs,
                resolved: ack.resolved,
            });
        }
        self.log.facts.push(Fact::ZombieTried {
            node: zombie.name().to_string(),
            epoch: zombie.epoch(),
            refusal: tried.err().map(|e| e.to_string()),
            fenced: zombie.fenced().is_some(),
        });
    }

    /// `stall N`: the store holds the append of the next change's batch for `ms`.
    pub(super) fn arm_stall(&mut self, ms: i64) {
        self.nodes.stall_ms = Some(ms.max(1));
    }

    /// The stalled append of the request just handled, if a stall is armed and the
    /// request made a batch: the batch commits when the stall ends, and the request is
    /// answered when it commits or at the append deadline, whichever comes first (503
    /// with Retry-After at the deadline, as the server does; decision 220). Returns the
    /// answer that replaces the engine's, if any, and how long the client waited.
    pub(super) fn stall_answer(&mut self) -> (Option<LateAnswer>, i64) {
        let Some(stall_ms) = self.nodes.stall_ms else { return (None, 0) };
        let entries = self.service.drain_journal();
        if entries.is_empty() {
            return (None, 0);
        }
        self.nodes.stall_ms = None;
        let late = stall_ms > APPEND_DEADLINE_MS && !self.nodes.ignores_deadline;
        let waited_ms = if late { APPEND_DEADLINE_MS } else { stall_ms };
        self.append_to_store(&entries);
        self.journal.extend(entries);
        self.log.facts.push(Fact::Stalled { stall_ms, waited_ms, late });
        if !late {
            return (None, waited_ms);
        }
        // The server's answer to a late append (`server::journal_late`), built from the
        // API layer as the shell builds it.
        let mut error = ApiError::new(
            ErrorCode::ServiceUnavailable,
            format!(
                "the journal did not confirm this request within {APPEND_DEADLINE_MS} ms (the store or the disk \
                 stalls); a change it made may still become durable: retry with the same Idempotency-Key"
            ),
        );
        error.retry_after_secs = Some(JOURNAL_RETRY_AFTER_S);
        let response = esim_api::api::error_response(error);
        let retry_after =
            response.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let answer = LateAnswer { status: response.status().as_u16(), retry_after, body: response.into_body() };
        (Some(answer), waited_ms)
    }

    /// Test switch (a planted bug for `deadline_bounded`): stalled requests wait for
    /// their append however long it takes.
    #[cfg(feature = "test-switches")]
    pub fn ignore_append_deadline_for_test(&mut self) {
        self.nodes.ignores_deadline = true;
    }

    /// `lost_commit`: the next commit is applied but its outcome is lost.
    pub(super) fn lose_commit_outcome(&mut self) {
        self.nodes.store.arm(CommitFault::AppliedOutcomeLost);
    }

    /// `snapshot` / `snapshot_crash` (see [`Op::Snapshot`](crate::op::Op::Snapshot)): the
    /// owner encodes a snapshot covering every entry appended so far; it writes it, or the
    /// process dies before it does and the engine is rebuilt from the store alone.
    pub(super) fn snapshot(&mut self, crash: bool) {
        self.commit_journal();
        let covered = self.nodes.owner.next_index();
        let encoded = journal::encode_snapshot(&header(&self.config), self.service.engine(), covered);
        let owner = &mut self.nodes.owner;
        let written = match encoded {
            Ok(snapshot) if !crash => owner.write_snapshot(snapshot).map(|()| true),
            Ok(_) => Ok(false),
            Err(error) => Err(error),
        };
        match written {
            Ok(true) => {
                self.nodes.snapshot_covers = Some(covered);
                self.log.facts.push(Fact::SnapshotWritten { covered });
            }
            Ok(false) => {}
            // The owner of the shard is never refused a snapshot in a correct store.
            Err(error) => {
                let why = format!("the snapshot covering {covered} entries: {error}");
                self.log.facts.push(Fact::AppendRefused { node: owner.name().to_string(), why });
            }
        }
        if crash {
            self.rebuild_from_store();
        }
    }

    /// A restart whose engine is read back from the store (its newest snapshot and the
    /// rows after it), compared with the one that died (`crash_recovery`).
    fn rebuild_from_store(&mut self) {
        let from_snapshot = self.nodes.snapshot_covers;
        let rebuilt = match self.nodes.store.load(None) {
            #[cfg_attr(not(feature = "test-switches"), allow(unused_mut))]
            Ok((mut engine, _)) => {
                #[cfg(feature = "test-switches")]
                engine.inject_bug_for_test(self.bug);
                let compared = compare(self.service.engine(), &engine);
                self.service.replace_engine(engine);
                Ok(compared)
            }
            Err(why) => Err(why),
        };
        self.log.facts.push(Fact::RebuiltFromStore { from_snapshot });
        self.log.facts.push(Fact::Restarted { rebuild: Some(rebuilt) });
        self.held.clear();
        self.service.restart();
    }

    /// `standby_lag N`: the standby follows nothing for the next `steps` steps.
    pub(super) fn lag_standby(&mut self, steps: u32) {
        self.nodes.lag_steps = steps;
    }

    /// The next op ends with the standby's digest compared with the owner's (the
    /// runner calls it before a run's last op).
    pub fn compare_standby_next(&mut self) {
        self.nodes.compare_next = true;
    }

    /// Whether a paused old owner is around (for the generator's `zombie`).
    pub fn has_zombie(&self) -> bool {
        self.nodes.has_zombie()
    }

    /// The store (for tests that break it on purpose).
    pub fn store(&self) -> &MemStore {
        &self.nodes.store
    }
}
