//! An in-memory store with the PostgreSQL store's semantics, for the simulation (issue
//! 17, "the same guarantees in the simulation"; decisions 163-167).
//!
//! One [`MemStore`] is shared by every node of one simulated world (`Arc<Mutex<…>>`):
//! the journal rows, the newest snapshot and the owner row of shard 0 (`epoch`, `head`,
//! `owner`, `lease_until` by the store's clock: virtual milliseconds moved by the world,
//! never the wall clock). Nodes reach it through handles that follow
//! [`crate::store_pg`] step by step:
//!
//! - [`MemNode`], the owner's [`JournalSink`]: an append is the conditional update of
//!   [`fence::append`] (epoch and head must match; the lease renewed) and the rows, in
//!   one critical section, the way PostgreSQL runs it in one transaction. No row
//!   touched: fenced, and it refuses for good. A commit whose outcome is lost is
//!   resolved by reading the row at the batch's first index ([`fence::committed`])
//!   before anything is answered, and the batch is never sent twice.
//! - [`MemStandby`]: follows the journal into an engine of its own (the replay path of
//!   recovery), and takes the shard over once the owner's lease has run out
//!   ([`fence::may_take_over`]): it bumps the epoch, catches up to the head, then serves.
//!
//! Faults, switched by the simulation: [`CommitFault`] (a commit applied or dropped with
//! its outcome lost), a lease left to run out ([`MemStore::advance_ms`] while the owner
//! does not renew: a paused owner), a zombie (an old [`MemNode`] kept after a takeover,
//! whose appends must be fenced) and a standby that is behind (one not asked to
//! [`MemStandby::follow`] for a while: it catches up in [`MemStandby::take_over`]).

use crate::fence::{self, OwnerRow};
use crate::journal::{self, EncodedSnapshot, SegmentHeader, SnapshotPolicy};
use crate::sink::JournalSink;
use esim_api::JournalEntry;
use esim_engine::Engine;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

/// The owner row of shard 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemOwner {
    pub epoch: i64,
    /// Entries appended (the index the next entry gets).
    pub head: u64,
    pub owner: String,
    /// When the lease ends, by the store's clock (ms).
    pub lease_until_ms: i64,
}

impl MemOwner {
    fn fence_row(&self) -> OwnerRow {
        OwnerRow { epoch: self.epoch, head: self.head }
    }
}

/// One journal row: its index, the epoch that wrote it, a CRC-32C of its bytes (what a
/// checker compares) and the entry as JSON (what PostgreSQL's `entry` column holds).
#[derive(Clone, Debug)]
struct MemRow {
    seq: u64,
    epoch: i64,
    crc: u32,
    entry: Vec<u8>,
}

/// What a row looks like to a checker: `(seq, epoch, crc32c of the entry's bytes)`.
pub type RowSum = (u64, i64, u32);

/// A fault of the next commit that would otherwise succeed (armed by the simulation;
/// used once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitFault {
    /// The batch is committed but the committer never hears back (the connection broke
    /// during `COMMIT` after the server committed).
    AppliedOutcomeLost,
    /// The batch is not committed and the committer never hears back.
    DroppedOutcomeLost,
}

/// How one append attempt ended, as the committer sees it (store_pg's `Appended`).
enum Appended {
    Committed,
    Fenced(Option<MemOwner>),
    Unknown,
}

struct Shared {
    header: SegmentHeader,
    owner: Option<MemOwner>,
    rows: Vec<MemRow>,
    /// The newest snapshot: the entries it covers and its bytes (older ones are dropped
    /// when it is written, as decision 141 does).
    snapshot: Option<(u64, Vec<u8>)>,
    now_ms: i64,
    fault: Option<CommitFault>,
}

/// The store shared by the nodes of one world.
#[derive(Clone)]
pub struct MemStore {
    shared: Arc<Mutex<Shared>>,
}

/// How [`MemStore::take_shard`] found shard 0.
pub enum MemOpened {
    /// This node holds the shard: its sink, and the engine recovered from the store.
    Owner(Box<MemNode>, Box<Engine>),
    /// Another node holds a live lease.
    Leased(MemOwner),
}

impl MemStore {
    /// An empty store whose journal starts from `header` (its configuration and start).
    pub fn new(header: SegmentHeader) -> MemStore {
        let shared = Shared { header, owner: None, rows: Vec::new(), snapshot: None, now_ms: 0, fault: None };
        MemStore { shared: Arc::new(Mutex::new(shared)) }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The store's clock (ms).
    pub fn now_ms(&self) -> i64 {
        self.lock().now_ms
    }

    /// Moves the store's clock (a lease runs out when its owner stops renewing).
    pub fn advance_ms(&self, ms: i64) {
        self.lock().now_ms += ms.max(0);
    }

    /// The owner row, if the shard was ever taken.
    pub fn owner(&self) -> Option<MemOwner> {
        self.lock().owner.clone()
    }

    /// Rows in the journal (the head, for a correct store).
    pub fn rows(&self) -> u64 {
        self.lock().rows.len() as u64
    }

    /// Every row as a checker sees it, in stored order.
    pub fn row_sums(&self) -> Vec<RowSum> {
        self.lock().rows.iter().map(|row| (row.seq, row.epoch, row.crc)).collect()
    }

    /// Arms a fault for the next commit that would succeed.
    pub fn arm(&self, fault: CommitFault) {
        self.lock().fault = Some(fault);
    }

    /// The armed fault not used yet, if any.
    pub fn armed(&self) -> Option<CommitFault> {
        self.lock().fault
    }

    /// Takes shard 0 for `name` with a lease of `lease_ms`: creates the owner row at the
    /// first epoch in a new store, else bumps the epoch; when `respect_lease`, a live
    /// lease of another node leaves the row alone. Then reads the state (newest snapshot
    /// and the entries after it).
    pub fn take_shard(&self, name: &str, lease_ms: i64, respect_lease: bool) -> Result<MemOpened, String> {
        let (epoch, head) = {
            let mut shared = self.lock();
            let lease_until_ms = shared.now_ms + lease_ms;
            let epoch = match &shared.owner {
                Some(holder)
                    if respect_lease
                        && !fence::may_take_over(holder.epoch, holder.epoch, holder.lease_until_ms, shared.now_ms) =>
                {
                    return Ok(MemOpened::Leased(holder.clone()));
                }
                Some(holder) => holder.epoch + 1,
                None => 1,
            };
            let head = shared.owner.as_ref().map_or(0, |holder| holder.head);
            shared.owner = Some(MemOwner { epoch, head, owner: name.to_string(), lease_until_ms });
            (epoch, head)
        };
        let (engine, next_index) = self.load(Some(head))?;
        Ok(MemOpened::Owner(Box::new(self.node(name, epoch, next_index, lease_ms)), Box::new(engine)))
    }

    /// A standby for `name`: the state of the store as it is now, followed from there.
    pub fn standby(&self, name: &str) -> Result<MemStandby, String> {
        self.standby_with(name, &|_| {})
    }

    /// [`MemStore::standby`] whose engine is handed to `prepare` as soon as it is made
    /// (before any entry is applied): the simulation's test switches.
    pub fn standby_with(&self, name: &str, prepare: &dyn Fn(&mut Engine)) -> Result<MemStandby, String> {
        let (engine, applied) = self.load_with(None, prepare)?;
        Ok(MemStandby { store: self.clone(), name: name.to_string(), engine: Box::new(engine), applied })
    }

    fn node(&self, name: &str, epoch: i64, next_index: u64, lease_ms: i64) -> MemNode {
        let header = self.lock().header.clone();
        MemNode {
            store: self.clone(),
            name: name.to_string(),
            epoch,
            next_index,
            lease_ms,
            lost: None,
            header,
            policy: SnapshotPolicy::default(),
            entries_since_snapshot: 0,
            bytes_since_snapshot: 0,
            last_ack: None,
        }
    }

    /// Rebuilds the state in one consistent read: the newest snapshot covering at most
    /// `max_entries` (the head when `None`), then the entries after it up to there.
    /// Returns the engine and the entries it has applied.
    pub fn load(&self, max_entries: Option<u64>) -> Result<(Engine, u64), String> {
        self.load_with(max_entries, &|_| {})
    }

    fn load_with(&self, max_entries: Option<u64>, prepare: &dyn Fn(&mut Engine)) -> Result<(Engine, u64), String> {
        let shared = self.lock();
        let head = shared.owner.as_ref().map_or(0, |owner| owner.head);
        let until = max_entries.map_or(head, |max| max.min(head));
        let (mut engine, mut next) = match &shared.snapshot {
            Some((covered, bytes)) if *covered <= until => {
                let decoded = journal::decode_snapshot(bytes, "in the in-memory store").map_err(|e| e.0)?;
                if decoded.covered_entries != *covered {
                    return Err(format!("the snapshot covering {covered} entries says {}", decoded.covered_entries));
                }
                (decoded.engine, *covered)
            }
            _ => (Engine::new(shared.header.config.clone(), shared.header.start), 0),
        };
        prepare(&mut engine);
        while next < until {
            let Some(row) = shared.row(next) else { return Err(format!("the journal has no entry {next} of {until}")) };
            decode(row)?.replay(&mut engine);
            next += 1;
        }
        Ok((engine, next))
    }

    /// The conditional append of one batch (the rows of `entries` at `old_head`),
    /// with the commit fault applied.
    fn append(&self, epoch: i64, old_head: u64, entries: Vec<Vec<u8>>, lease_ms: i64) -> Appended {
        let mut shared = self.lock();
        let row = shared.owner.as_ref().map(MemOwner::fence_row);
        if fence::append(row, epoch, old_head) == fence::Append::Fenced {
            return Appended::Fenced(shared.owner.clone());
        }
        let fault = shared.fault.take();
        if fault == Some(CommitFault::DroppedOutcomeLost) {
            return Appended::Unknown;
        }
        let count = entries.len() as u64;
        for (i, entry) in entries.into_iter().enumerate() {
            let crc = crc32c::crc32c(&entry);
            shared.rows.push(MemRow { seq: old_head + i as u64, epoch, crc, entry });
        }
        let lease_until_ms = shared.now_ms + lease_ms;
        let owner = shared.owner.as_mut().expect("the fence found the row");
        owner.head = old_head + count;
        owner.lease_until_ms = lease_until_ms;
        match fault {
            Some(CommitFault::AppliedOutcomeLost) => Appended::Unknown,
            _ => Appended::Committed,
        }
    }

    /// Reads back whether the batch of `epoch` at `old_head` committed (the outcome of
    /// every earlier call is final here: nothing runs concurrently inside the lock).
    fn resolve(&self, epoch: i64, old_head: u64) -> bool {
        let shared = self.lock();
        let written_by = shared.row(old_head).map(|row| row.epoch);
        fence::committed(written_by, epoch)
    }

    /// Entries `from..to` of the journal.
    fn entries(&self, from: u64, to: u64) -> Result<Vec<JournalEntry>, String> {
        let shared = self.lock();
        (from..to)
            .map(|seq| match shared.row(seq) {
                Some(row) => decode(row),
                None => Err(format!("a gap in the journal at entry {seq}")),
            })
            .collect()
    }

    /// Removes the row at `seq` behind every node's back (a broken store, for the
    /// tests of the checkers that must notice).
    #[doc(hidden)]
    pub fn drop_row_for_test(&self, seq: u64) {
        self.lock().rows.retain(|row| row.seq != seq);
    }
}

impl Shared {
    /// The row at `seq` (rows are kept in index order).
    fn row(&self, seq: u64) -> Option<&MemRow> {
        self.rows.binary_search_by_key(&seq, |row| row.seq).ok().map(|at| &self.rows[at])
    }
}

fn decode(row: &MemRow) -> Result<JournalEntry, String> {
    serde_json::from_slice(&row.entry).map_err(|e| format!("journal entry {} cannot be read: {e}", row.seq))
}

/// What the last successful append of a node acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemAck {
    pub node: String,
    pub epoch: i64,
    /// The index of the batch's first entry.
    pub first: u64,
    /// CRC-32C of each entry's bytes, in order.
    pub crcs: Vec<u32>,
    /// Its commit's outcome was lost and read back from the store.
    pub resolved: bool,
}

/// A node that holds (or held) shard 0: the owner's journal sink.
pub struct MemNode {
    store: MemStore,
    name: String,
    epoch: i64,
    next_index: u64,
    lease_ms: i64,
    /// Why this node appends no more (fenced, for good), if so.
    lost: Option<String>,
    header: SegmentHeader,
    policy: SnapshotPolicy,
    entries_since_snapshot: u64,
    bytes_since_snapshot: u64,
    last_ack: Option<MemAck>,
}

impl MemNode {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The epoch this node took the shard at.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Entries acknowledged (the index the next one gets).
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Snapshots after this many entries (the PostgreSQL store's policy by default).
    pub fn set_snapshot_policy(&mut self, policy: SnapshotPolicy) {
        self.policy = policy;
    }

    /// What the last append acknowledged (taken: each ack is reported once).
    pub fn take_ack(&mut self) -> Option<MemAck> {
        self.last_ack.take()
    }

    /// The lease renewal (`UPDATE … SET lease_until = now + lease WHERE epoch = mine`):
    /// no row touched means another node took the shard, and this one is lost.
    pub fn renew(&mut self) -> Result<(), String> {
        if let Some(why) = &self.lost {
            return Err(why.clone());
        }
        let renewed = {
            let mut shared = self.store.lock();
            let until = shared.now_ms + self.lease_ms;
            match shared.owner.as_mut() {
                Some(owner) if owner.epoch == self.epoch => {
                    owner.lease_until_ms = until;
                    true
                }
                _ => false,
            }
        };
        if renewed {
            Ok(())
        } else {
            Err(self.lose(format!("the lease renewal of {} with epoch {} touched no owner row", self.name, self.epoch)))
        }
    }

    fn lose(&mut self, why: String) -> String {
        if self.lost.is_none() {
            self.lost = Some(why.clone());
        }
        why
    }
}

impl JournalSink for MemNode {
    fn append(&mut self, entries: &[JournalEntry]) -> io::Result<()> {
        self.last_ack = None;
        if let Some(why) = &self.lost {
            return Err(io::Error::other(why.clone()));
        }
        if entries.is_empty() {
            return Ok(());
        }
        let old_head = self.next_index;
        let payloads: Vec<Vec<u8>> = entries
            .iter()
            .map(|entry| serde_json::to_vec(entry).map_err(io::Error::other))
            .collect::<io::Result<_>>()?;
        let crcs: Vec<u32> = payloads.iter().map(|p| crc32c::crc32c(p)).collect();
        let bytes: u64 = payloads.iter().map(|p| p.len() as u64).sum();
        let resolved = match self.store.append(self.epoch, old_head, payloads, self.lease_ms) {
            Appended::Committed => false,
            Appended::Fenced(owner) => {
                let now = owner.map_or_else(
                    || "no owner row".to_string(),
                    |o| format!("the store says epoch {}, head {}, owner {:?}", o.epoch, o.head, o.owner),
                );
                let why = format!(
                    "shard 0 was taken by another node: the append of {} at head {old_head} with epoch {} touched no \
                     owner row ({now})",
                    self.name, self.epoch
                );
                return Err(io::Error::other(self.lose(why)));
            }
            // Never answered from a guess: read back, and never send the batch again.
            Appended::Unknown if self.store.resolve(self.epoch, old_head) => true,
            Appended::Unknown => {
                return Err(io::Error::other(format!(
                    "the commit's outcome was lost and the batch at head {old_head} is not in the store"
                )))
            }
        };
        self.next_index += entries.len() as u64;
        self.entries_since_snapshot += entries.len() as u64;
        self.bytes_since_snapshot += bytes;
        self.last_ack = Some(MemAck { node: self.name.clone(), epoch: self.epoch, first: old_head, crcs, resolved });
        Ok(())
    }

    fn snapshot(&self, engine: &Engine, pending_entries: u64) -> Option<io::Result<EncodedSnapshot>> {
        let due = self.policy.due(self.entries_since_snapshot, self.bytes_since_snapshot);
        due.then(|| journal::encode_snapshot(&self.header, engine, self.next_index + pending_entries))
    }

    /// Written only while this epoch owns the shard (`INSERT … WHERE EXISTS (owner row
    /// of my epoch)`); it replaces the older snapshot.
    fn write_snapshot(&mut self, snapshot: EncodedSnapshot) -> io::Result<()> {
        if let Some(why) = &self.lost {
            return Err(io::Error::other(why.clone()));
        }
        let covered = snapshot.covered_entries();
        if covered != self.next_index {
            return Err(io::Error::other(format!(
                "a snapshot covering {covered} entries cannot follow a journal of {}",
                self.next_index
            )));
        }
        let mut shared = self.store.lock();
        if shared.owner.as_ref().is_none_or(|owner| owner.epoch != self.epoch) {
            return Err(io::Error::other("the snapshot was not written: the shard has another owner"));
        }
        shared.snapshot = Some((covered, snapshot.bytes().to_vec()));
        drop(shared);
        self.entries_since_snapshot = 0;
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    fn reload(&mut self) -> Result<Engine, String> {
        let (engine, next) = self.store.load(Some(self.next_index))?;
        if next != self.next_index {
            return Err(format!("the store holds {next} entries but {} were acknowledged", self.next_index));
        }
        Ok(engine)
    }

    fn wedged(&self) -> Option<String> {
        self.lost.clone()
    }

    fn fenced(&self) -> Option<String> {
        self.lost.clone()
    }

    fn probe(&mut self) -> io::Result<()> {
        if let Some(why) = &self.lost {
            return Err(io::Error::other(why.clone()));
        }
        let row = self.store.owner().map(|owner| owner.fence_row());
        if fence::still_owns(row, self.epoch, self.next_index) {
            return Ok(());
        }
        let why = format!("shard 0 moved on: {row:?} (this node: epoch {} head {})", self.epoch, self.next_index);
        Err(io::Error::other(self.lose(why)))
    }

    fn blocks(&self) -> bool {
        false
    }
}

/// A standby: an engine that follows the store's journal.
pub struct MemStandby {
    store: MemStore,
    name: String,
    /// Boxed: a standby is handed back by value when it may not take over.
    engine: Box<Engine>,
    applied: u64,
}

impl std::fmt::Debug for MemStandby {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStandby").field("name", &self.name).field("applied", &self.applied).finish()
    }
}

impl std::fmt::Debug for MemNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemNode")
            .field("name", &self.name)
            .field("epoch", &self.epoch)
            .field("next_index", &self.next_index)
            .field("lost", &self.lost)
            .finish()
    }
}

impl MemStandby {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The engine as far as it has followed.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Entries applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Applies the entries appended since, up to the head; returns the head reached.
    pub fn follow(&mut self) -> Result<u64, String> {
        let head = self.store.owner().map_or(0, |owner| owner.head);
        self.catch_up(head)?;
        Ok(self.applied)
    }

    fn catch_up(&mut self, head: u64) -> Result<(), String> {
        if head < self.applied {
            return Err(format!("the journal's head {head} is behind the {} entries applied", self.applied));
        }
        for entry in self.store.entries(self.applied, head)? {
            entry.replay(&mut self.engine);
            self.applied += 1;
        }
        Ok(())
    }

    /// Takes the shard over if the owner's lease has run out by the store's clock: the
    /// conditional update of [`fence::may_take_over`] (epoch + 1, this node as owner, a
    /// lease of `lease_ms`), then the catch-up to the head it returned (which cannot
    /// move after it: the old epoch's appends are fenced). `Err(self)` when the lease
    /// is live or another standby won: keep following.
    pub fn take_over(mut self, lease_ms: i64) -> Result<Result<(MemNode, Engine), MemStandby>, String> {
        let taken = {
            let mut shared = self.store.lock();
            let now_ms = shared.now_ms;
            match shared.owner.as_mut() {
                Some(owner) if fence::may_take_over(owner.epoch, owner.epoch, owner.lease_until_ms, now_ms) => {
                    owner.epoch += 1;
                    owner.owner = self.name.clone();
                    owner.lease_until_ms = now_ms + lease_ms;
                    Some((owner.epoch, owner.head))
                }
                _ => None,
            }
        };
        let Some((epoch, head)) = taken else { return Ok(Err(self)) };
        self.catch_up(head)?;
        let node = self.store.node(&self.name, epoch, head, lease_ms);
        Ok(Ok((node, *self.engine)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use esim_api::ClockMode;
    use esim_engine::{Command, EngineConfig, Millis};

    const LEASE_MS: i64 = 3_000;

    fn store() -> MemStore {
        MemStore::new(SegmentHeader {
            version: journal::FORMAT_VERSION,
            config: EngineConfig { seed: 7, ..EngineConfig::default() },
            clock: ClockMode::Virtual,
            start: Millis::VIRTUAL_EPOCH,
            first_index: 0,
        })
    }

    fn owner(store: &MemStore, name: &str) -> (MemNode, Engine) {
        match store.take_shard(name, LEASE_MS, true).unwrap() {
            MemOpened::Owner(node, engine) => (*node, *engine),
            MemOpened::Leased(holder) => panic!("leased by {holder:?}"),
        }
    }

    /// `count` entries that change the state (accounts made by the admin API).
    fn batch(engine: &mut Engine, count: usize) -> Vec<JournalEntry> {
        (0..count)
            .map(|_| {
                let at = Millis(engine.now().0 + 1_000);
                let n = engine.accounts().len();
                let command = Command::Admin(esim_engine::AdminOp::CreateAccount {
                    contact_email: format!("ops{n}@example.com"),
                    company_name: None,
                    api_key_digest: esim_engine::KeyDigest::of(&format!("rsk_test{n}")),
                    api_key_prefix: String::new(),
                });
                let entry = JournalEntry::Command { at, command };
                entry.clone().replay(engine);
                entry
            })
            .collect()
    }

    #[test]
    fn appends_commit_in_order_and_a_standby_follows_to_the_same_digest() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        assert_eq!(node.epoch(), 1);
        let first = batch(&mut engine, 3);
        node.append(&first).unwrap();
        let ack = node.take_ack().unwrap();
        assert_eq!((ack.epoch, ack.first, ack.crcs.len(), ack.resolved), (1, 0, 3, false));
        node.append(&batch(&mut engine, 2)).unwrap();
        assert_eq!(node.take_ack().unwrap().first, 3);
        assert_eq!(store.owner().unwrap().head, 5);
        let seqs: Vec<u64> = store.row_sums().iter().map(|r| r.0).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        let mut standby = store.standby("b").unwrap();
        assert_eq!(standby.applied(), 5);
        node.append(&batch(&mut engine, 1)).unwrap();
        assert_eq!(standby.follow().unwrap(), 6);
        assert_eq!(standby.engine().state_digest(), engine.state_digest());
        assert_eq!(node.reload().unwrap().state_digest(), engine.state_digest());
        // A second node may not start while the lease is live.
        assert!(matches!(store.take_shard("c", LEASE_MS, true).unwrap(), MemOpened::Leased(h) if h.owner == "a"));
    }

    #[test]
    fn a_commit_applied_with_its_outcome_lost_is_read_back_and_acknowledged_once() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        store.arm(CommitFault::AppliedOutcomeLost);
        let entries = batch(&mut engine, 2);
        node.append(&entries).unwrap();
        let ack = node.take_ack().unwrap();
        assert!(ack.resolved, "the outcome was read back");
        assert_eq!(store.armed(), None, "used once");
        assert_eq!(store.rows(), 2, "applied once, never sent again");
        assert_eq!(node.next_index(), 2);
        node.append(&batch(&mut engine, 1)).unwrap();
        assert_eq!(store.rows(), 3);
        assert_eq!(node.reload().unwrap().state_digest(), engine.state_digest());
    }

    #[test]
    fn a_commit_dropped_with_its_outcome_lost_is_not_acknowledged_and_the_node_goes_on_from_the_store() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        node.append(&batch(&mut engine, 1)).unwrap();
        let durable = engine.state_digest();
        store.arm(CommitFault::DroppedOutcomeLost);
        let error = node.append(&batch(&mut engine, 2)).unwrap_err();
        assert!(error.to_string().contains("not in the store"), "{error}");
        assert!(node.take_ack().is_none(), "nothing acknowledged");
        assert_eq!((store.rows(), node.next_index()), (1, 1));
        assert!(node.fenced().is_none(), "a failed append, not a lost shard");
        node.probe().unwrap();
        // What a server does after a failed append: continue from the durable state.
        let mut engine = node.reload().unwrap();
        assert_eq!(engine.state_digest(), durable);
        node.append(&batch(&mut engine, 1)).unwrap();
        assert_eq!(node.take_ack().unwrap().first, 1);
    }

    #[test]
    fn a_lease_left_to_run_out_lets_the_standby_take_over_and_the_zombie_is_fenced_for_good() {
        let store = store();
        let (mut zombie, mut engine) = owner(&store, "a");
        zombie.append(&batch(&mut engine, 2)).unwrap();
        let standby = store.standby("b").unwrap();
        // A live lease: no takeover.
        store.advance_ms(LEASE_MS);
        let standby = store_take_over(standby).unwrap_err();
        // The owner pauses: it renews no more, and its lease runs out.
        store.advance_ms(1);
        let (mut node, mut taken) = store_take_over(standby).unwrap();
        assert_eq!(node.epoch(), 2);
        assert_eq!(taken.state_digest(), engine.state_digest());
        node.append(&batch(&mut taken, 1)).unwrap();
        // The zombie wakes and tries to acknowledge a write: fenced, nothing in the store.
        let error = zombie.append(&batch(&mut engine, 1)).unwrap_err();
        assert!(error.to_string().contains("taken by another node"), "{error}");
        assert!(zombie.take_ack().is_none());
        assert!(zombie.fenced().is_some());
        assert_eq!(store.rows(), 3);
        // For good: a renewal, a probe or another append all refuse without trying.
        assert!(zombie.renew().is_err() && zombie.probe().is_err());
        assert!(zombie.append(&batch(&mut engine, 1)).is_err());
        assert_eq!(store.owner().unwrap().epoch, 2);
        let epochs: Vec<i64> = store.row_sums().iter().map(|r| r.1).collect();
        assert_eq!(epochs, [1, 1, 2]);
    }

    #[test]
    fn a_zombie_is_fenced_by_its_lease_renewal_too() {
        let store = store();
        let (mut zombie, mut engine) = owner(&store, "a");
        zombie.append(&batch(&mut engine, 1)).unwrap();
        let standby = store.standby("b").unwrap();
        store.advance_ms(LEASE_MS + 1);
        let (mut node, mut taken) = store_take_over(standby).unwrap();
        node.append(&batch(&mut taken, 1)).unwrap();
        // The renewal thread wakes first and finds the shard gone.
        assert!(zombie.renew().unwrap_err().contains("touched no owner row"));
        assert!(zombie.append(&batch(&mut engine, 1)).is_err());
        assert_eq!(store.rows(), 2);
    }

    #[test]
    fn a_standby_that_is_behind_catches_up_before_it_serves() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        let standby = store.standby("b").unwrap();
        for _ in 0..4 {
            node.append(&batch(&mut engine, 2)).unwrap();
        }
        assert_eq!(standby.applied(), 0, "it has not followed");
        store.advance_ms(LEASE_MS + 1);
        let (mut taken_node, taken) = store_take_over(standby).unwrap();
        assert_eq!(taken_node.next_index(), 8);
        assert_eq!(taken.state_digest(), engine.state_digest());
        taken_node.probe().unwrap();
    }

    #[test]
    fn a_snapshot_is_written_only_by_the_owner_and_recovery_starts_from_it() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        node.set_snapshot_policy(SnapshotPolicy { every_entries: 3, every_bytes: u64::MAX });
        node.append(&batch(&mut engine, 2)).unwrap();
        assert!(node.snapshot(&engine, 0).is_none(), "not due");
        node.append(&batch(&mut engine, 2)).unwrap();
        let snapshot = node.snapshot(&engine, 0).expect("due").unwrap();
        node.write_snapshot(snapshot).unwrap();
        node.append(&batch(&mut engine, 1)).unwrap();
        // The rows before the snapshot are not read: dropping one changes nothing.
        store.drop_row_for_test(0);
        let (loaded, next) = store.load(None).unwrap();
        assert_eq!((next, loaded.state_digest()), (5, engine.state_digest()));
        // A fenced node writes none.
        let standby = store.standby("b").unwrap();
        store.advance_ms(LEASE_MS + 1);
        let (_node, _) = store_take_over(standby).unwrap();
        let stale = node.snapshot(&engine, 0);
        assert!(stale.is_none() || node.write_snapshot(stale.unwrap().unwrap()).is_err());
        let late = journal::encode_snapshot(&node.header, &engine, 5).unwrap();
        assert!(node.write_snapshot(late).unwrap_err().to_string().contains("another owner"));
    }

    fn store_take_over(standby: MemStandby) -> Result<(MemNode, Engine), MemStandby> {
        standby.take_over(LEASE_MS).unwrap()
    }

    #[test]
    fn a_store_missing_a_row_is_an_error_not_a_panic() {
        let store = store();
        let (mut node, mut engine) = owner(&store, "a");
        node.append(&batch(&mut engine, 3)).unwrap();
        store.drop_row_for_test(1);
        assert!(store.load(None).unwrap_err().contains("no entry 1"));
        assert!(store.standby("b").is_err());
    }
}
