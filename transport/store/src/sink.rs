//! The contract the owner task appends through ([`JournalSink`]): every store implements
//! it (the file journal here, [`crate::store_pg::PgStore`], [`crate::store_mem::MemNode`]),
//! and the shell's owner task (`esim_http::server`) only ever calls it.

use crate::journal::{EncodedSnapshot, FileJournal, JournalHealth, SnapshotWritten};
use esim_api::JournalEntry;
use esim_engine::Engine;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

/// The default of `esim serve --append-deadline-ms`: how long a request waits for the
/// journal to make its batch durable before it is answered 503 with `Retry-After`
/// (decision 220). A PostgreSQL store also gives up an append's transaction after it
/// and reads its outcome back.
pub const APPEND_DEADLINE_MS: u64 = 5_000;
/// The deadlines `--append-deadline-ms` accepts.
pub const APPEND_DEADLINE_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=600_000;

/// Where journal entries go before a response is sent: a small trait, so that a
/// replicated log can back it later without touching the engine or the server.
pub trait JournalSink: Send + 'static {
    /// Makes the entries durable; only then are their responses sent.
    fn append(&mut self, entries: &[JournalEntry]) -> std::io::Result<()>;
    /// When a snapshot is due: the snapshot of `engine`, which has applied every
    /// appended entry and then `pending_entries` more (those the owner task hands over
    /// next), to write once they are appended.
    fn snapshot(&self, _engine: &Engine, _pending_entries: u64) -> Option<std::io::Result<EncodedSnapshot>> {
        None
    }
    /// Writes a snapshot from [`JournalSink::snapshot`] after its entries were appended.
    fn write_snapshot(&mut self, _snapshot: EncodedSnapshot) -> std::io::Result<()> {
        Ok(())
    }
    /// After a failed append: the durable state to continue from.
    fn reload(&mut self) -> Result<Engine, String>;
    /// Why no append can ever succeed again in this process (a failed append could not
    /// be cut back, a store's commit whose outcome could not be learnt), if so: the
    /// process then drains and exits non-zero (the shell's `server::LOST_DRAIN`), as a
    /// restart continues from what is durable.
    fn wedged(&self) -> Option<String> {
        None
    }
    /// Why this process may never append again because another process took the
    /// journal over (a store's shard with a newer epoch), if so: a node with a forwarder
    /// forwards the shard's requests to the new owner; a process without one drains and
    /// exits non-zero (restarted, it becomes a standby).
    fn fenced(&self) -> Option<String> {
        None
    }
    /// Whether appends would succeed again (a full disk has room), without appending.
    fn probe(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    /// Appends wait on a disk (or a network): the owner task runs them on tokio's
    /// blocking pool and applies the next requests meanwhile.
    fn blocks(&self) -> bool {
        true
    }
    /// When the newest snapshot it holds was written (Unix ms), if any: where the
    /// snapshot age of `GET /metrics` starts.
    fn newest_snapshot_unix_ms(&self) -> Option<i64> {
        None
    }
    /// What the journal's own threads raise for `/readyz` (a store's lease renewals).
    fn alarm(&self) -> Option<Arc<JournalAlarm>> {
        None
    }
    /// Whom to tell when the journal's own thread has written a snapshot (the shell's
    /// metrics): a store does not know who watches it. Snapshots the owner task hands to
    /// [`JournalSink::write_snapshot`] are counted by the owner task itself.
    fn on_snapshot_written(&mut self, _written: SnapshotWritten) {}
}

/// A journal's trouble that `/readyz` reports without asking the owner task (a store's
/// lease renewals failing), raised and cleared by the journal's own threads.
#[derive(Default)]
pub struct JournalAlarm(Mutex<Option<String>>);

impl JournalAlarm {
    pub fn raise(&self, why: String) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }
    /// Clears the alarm; returns what it said, if it was raised.
    pub fn clear(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
    pub fn reason(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// No durability (tests that do not need it).
pub struct NoJournal;

impl JournalSink for NoJournal {
    fn append(&mut self, _entries: &[JournalEntry]) -> std::io::Result<()> {
        Ok(())
    }
    fn reload(&mut self) -> Result<Engine, String> {
        Err("no journal to reload from".into())
    }
    fn blocks(&self) -> bool {
        false
    }
}

impl JournalSink for FileJournal {
    /// Appends; then, when a snapshot is due, starts making it by replay on its own
    /// thread ([`FileJournal::compact_if_due`]): the owner task never encodes the state
    /// of a file journal.
    fn append(&mut self, entries: &[JournalEntry]) -> std::io::Result<()> {
        self.append_entries(entries).map_err(std::io::Error::from)?;
        self.compact_if_due();
        Ok(())
    }
    fn reload(&mut self) -> Result<Engine, String> {
        FileJournal::reload(self).map_err(|e| e.0)
    }
    fn wedged(&self) -> Option<String> {
        match self.health() {
            JournalHealth::Ok => None,
            JournalHealth::Wedged(why) => Some(why.clone()),
        }
    }
    fn probe(&mut self) -> std::io::Result<()> {
        FileJournal::probe(self)
    }
    fn newest_snapshot_unix_ms(&self) -> Option<i64> {
        let written = self.newest_snapshot_time()?;
        Some(written.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
    }
    fn on_snapshot_written(&mut self, written: SnapshotWritten) {
        FileJournal::on_snapshot_written(self, written);
    }
}
