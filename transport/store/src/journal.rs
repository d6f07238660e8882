//! Durability: the journal of state-changing commands with their times, snapshots,
//! recovery, and the offline repair of a damaged journal.
//!
//! The engine is deterministic, so the commands it applied, replayed in order from the
//! same configuration and seed, rebuild the exact state. On disk (in the data dir):
//!
//! - `journal/<first entry index, 20 digits>.seg`: a segment. It starts with the magic
//!   `ESIMJRN1` and a header record (format version, engine configuration with the seed,
//!   clock mode, start time, index of its first entry), then one record per
//!   [`JournalEntry`]. A segment is created as `.seg.tmp`, synced, then renamed, so a
//!   `.seg` always starts with a whole header.
//! - `snapshots/<entries covered, 20 digits>.snap`: the magic `ESIMSNP1` and one record
//!   holding the whole engine state after that many entries.
//!
//! - `manifest`: the magic `ESIMMAN1` and one record listing the first entry index of
//!   every segment written and not yet retired (decision 225). It is written atomically
//!   (temporary file, sync, rename, sync of the data dir) after a segment is created and
//!   before covered segments are removed, so it never lists less than what a start needs.
//!
//! A record is `[payload length: u32 LE][CRC-32C of the payload: u32 LE][payload]`, the
//! payload being JSON. A length of 0 is never written. Files are mode 0600, the
//! `journal/` and `snapshots/` dirs 0700.
//!
//! # The journal knows its own end
//!
//! A start needs the newest readable snapshot and every segment from the one holding its
//! first uncovered entry to the newest the manifest lists. A listed segment that is not
//! there, or a segment that does not start where the one before it ends (a middle segment
//! cut short), is damage: the start refuses, naming the file and the entries missing, and
//! `esim repair --cut-at-damage` can drop everything from there on. A data dir without a
//! manifest (made by an older build) is read as it is, its segments checked for gaps, and
//! gets one at its first start (decision 226).
//!
//! # Writing
//!
//! Appends are group-committed: the owner task appends every entry of a batch of
//! requests and syncs once before it answers any of them. A batch is encoded into a
//! scratch buffer and written with positional writes at the durable end of the segment
//! (no user-space buffer outlives the call), then synced; a batch larger than
//! [`TORN_TAIL_MAX_BYTES`] is written and synced in groups of at most that size, so a
//! crash never leaves more unsynced bytes than that. On any write or sync error the
//! segment is cut back to its durable end (the end of the last acknowledged batch) and
//! synced before the error is returned: the journal is as it was, and the next append
//! continues in the same segment. If that cut fails too, the journal is wedged: every
//! later append fails at once and nothing more is written by this process.
//!
//! # Snapshots
//!
//! A snapshot is never encoded by the server's owner task: when one is due, the append
//! that made it due starts a new segment and a thread that rebuilds the state before
//! that segment by replay from the data dir and writes it ([`FileJournal::compact_if_due`],
//! decision 160). Once the new snapshot is written, synced, read back and decoded to the
//! same state digest, it is named `.snap`; then what the previous snapshot (the one the
//! replay started from) made needless goes, and that previous snapshot and the segments
//! since it stay: one bad snapshot is never the only copy of the state (decision 227). A
//! start passes over a damaged newest snapshot with a warning naming it and recovers from
//! the previous one. A snapshot that fails is tried again at the next append.
//!
//! # Torn tail versus damage
//!
//! Only the last write of the last segment can be torn. A bad record (cut short, zero or
//! impossible length, checksum mismatch) there is a torn tail, cut by `esim serve` and
//! reported by `esim replay`, only if (a) it and the bytes after it are at most
//! [`TORN_TAIL_MAX_BYTES`], and (b) no valid entry record (non-zero length, matching
//! CRC, payload decoding as an entry) starts anywhere after it. Anything else is
//! damage: recovery refuses, naming the file and byte offset, and `esim repair` tells
//! what cutting there would drop.

use esim_api::service::{ClockMode, JournalEntry};
use esim_engine::{Engine, EngineConfig, Millis};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Told when a snapshot made by a journal's own thread was written and verified: the
/// shell counts it in its metrics (a journal does not know who watches it).
pub type SnapshotWritten = Arc<dyn Fn() + Send + Sync>;

const SEGMENT_MAGIC: &[u8; 8] = b"ESIMJRN1";
const SNAPSHOT_MAGIC: &[u8; 8] = b"ESIMSNP1";
const MANIFEST_MAGIC: &[u8; 8] = b"ESIMMAN1";
/// The manifest's name in the data dir (beside `journal/`, so that tools listing
/// `journal/` see segments only).
pub const MANIFEST_FILE: &str = "manifest";
/// Largest journal entry record accepted when reading a segment (a larger length field
/// is damage).
const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;
/// Largest snapshot record: what its 32-bit length field can say. A snapshot is one
/// record alone in its file, checked by its CRC and the file's length, and the state of
/// about 130,000 eSIMs already writes more than [`MAX_RECORD_BYTES`] (decision 127): read
/// with the entries' bound, such a snapshot was refused as damage at the next start,
/// after it had replaced the journal it covered.
const MAX_SNAPSHOT_BYTES: u32 = u32::MAX;

/// The version of the segment and snapshot format written (and the only one read) by
/// this build. Version 1 journals hold plaintext API keys; version 2 commands carry key
/// digests and encrypted secrets; version 3 replays them with one random stream per
/// purpose (decision 112), so a version 2 journal would replay to other ids.
pub const FORMAT_VERSION: u32 = 3;

/// The most bytes a torn write can leave at the end of the last segment: appends never
/// have more unsynced bytes than this (a larger batch is synced in groups), so a bad
/// record followed by more than this is damage, not a torn tail.
pub const TORN_TAIL_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// What [`FileJournal::probe`] writes (and cuts again) to see that the disk takes writes.
const PROBE_BYTES: usize = 64 * 1024;

/// Recoveries of a live data dir (`repair: false`) retried when a file vanished or a
/// gap appeared while reading (the live server compacted under the reader); 20 tries
/// (about 4 s at most) hold even when compaction runs every few ms on a busy machine.
const LIVE_READ_TRIES: u32 = 20;

/// What every segment header says: enough to start an engine from nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentHeader {
    pub version: u32,
    pub config: EngineConfig,
    pub clock: ClockMode,
    /// Service time at which the engine was created.
    pub start: Millis,
    /// Index of the first entry of this segment.
    pub first_index: u64,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    covered_entries: u64,
    header: SegmentHeader,
    engine: Engine,
}

/// Only the version of a header: read first when a header does not decode, so that a
/// journal of another version is refused as such.
#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

#[derive(Deserialize)]
struct SnapshotVersion {
    header: VersionOnly,
}

/// When to write a snapshot.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotPolicy {
    pub every_entries: u64,
    pub every_bytes: u64,
}

impl Default for SnapshotPolicy {
    fn default() -> Self {
        SnapshotPolicy { every_entries: 100_000, every_bytes: 64 * 1024 * 1024 }
    }
}

impl SnapshotPolicy {
    /// Whether a snapshot is due after `entries` entries of `bytes` bytes since the last
    /// one written (the rule of every store: the file journal, PostgreSQL and the
    /// in-memory one). A store counts from the last snapshot written, not the last one
    /// tried: after a failure one is still due, and the next append tries again
    /// (decision 228).
    pub fn due(&self, entries: u64, bytes: u64) -> bool {
        entries >= self.every_entries || bytes >= self.every_bytes
    }
}

/// A recovery problem that must stop the service.
#[derive(Debug)]
pub struct JournalError(pub String);

impl std::fmt::Display for JournalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JournalError {}

fn io_error(path: &Path, error: io::Error) -> JournalError {
    JournalError(format!("{}: {error}", path.display()))
}

/// The refusal of a file written by another format version.
fn version_refusal(path: &Path, found: u32) -> JournalError {
    if found < FORMAT_VERSION {
        let why = match found {
            1 => "format 1 journals hold plaintext API keys and cannot be migrated",
            _ => {
                "format 2 journals were written when every id came from one random stream; this build \
                  would replay them to other ids than were answered"
            }
        };
        JournalError(format!(
            "{} was written by journal format version {found}; this build reads only version {FORMAT_VERSION} \
             ({why}; start on a new data dir, see docs/decisions.md)",
            path.display()
        ))
    } else {
        JournalError(format!(
            "{} was written by journal format version {found}, newer than this build, which reads only \
             version {FORMAT_VERSION}; run the build that wrote it",
            path.display()
        ))
    }
}

pub fn encode_record(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The state record of a snapshot file's bytes: the magic, then exactly one record of at
/// most [`MAX_SNAPSHOT_BYTES`]; `None` if they are anything else.
fn snapshot_payload(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < 8 || &bytes[..8] != SNAPSHOT_MAGIC {
        return None;
    }
    let mut offset = 8;
    match next_record_up_to(bytes, &mut offset, MAX_SNAPSHOT_BYTES) {
        Next::Record(payload) if offset == bytes.len() => Some(payload),
        _ => None,
    }
}

/// Reading records: a valid record, the clean end, or a bad record at an offset.
enum Next<'a> {
    Record(&'a [u8]),
    End,
    Bad { offset: usize, why: &'static str },
}

fn next_record<'a>(bytes: &'a [u8], offset: &mut usize) -> Next<'a> {
    next_record_up_to(bytes, offset, MAX_RECORD_BYTES)
}

/// [`next_record`] with another bound on the length (a snapshot's).
fn next_record_up_to<'a>(bytes: &'a [u8], offset: &mut usize, max_bytes: u32) -> Next<'a> {
    let start = *offset;
    if start == bytes.len() {
        return Next::End;
    }
    if bytes.len() - start < 8 {
        return Next::Bad { offset: start, why: "record header cut short" };
    }
    let length = u32::from_le_bytes(bytes[start..start + 4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[start + 4..start + 8].try_into().expect("4 bytes"));
    if length == 0 {
        return Next::Bad { offset: start, why: "zero record length" };
    }
    if length > max_bytes {
        return Next::Bad { offset: start, why: "impossible record length" };
    }
    let end = start + 8 + length as usize;
    if end > bytes.len() {
        return Next::Bad { offset: start, why: "record cut short" };
    }
    let payload = &bytes[start + 8..end];
    if crc32c::crc32c(payload) != crc {
        return Next::Bad { offset: start, why: "checksum mismatch" };
    }
    *offset = end;
    Next::Record(payload)
}

/// The end of a valid entry record (frames, checks, decodes) starting at `at`.
fn entry_at(bytes: &[u8], at: usize) -> Option<usize> {
    let mut offset = at;
    match next_record(bytes, &mut offset) {
        Next::Record(payload) => serde_json::from_slice::<JournalEntry>(payload).is_ok().then_some(offset),
        _ => None,
    }
}

/// The first offset after `from` at which a valid entry record starts.
fn next_entry_after(bytes: &[u8], from: usize) -> Option<usize> {
    (from + 1..bytes.len().saturating_sub(8)).find(|&at| entry_at(bytes, at).is_some())
}

/// Why the bad record at `offset` of the last segment is not a torn tail (`None`: it is).
fn not_a_torn_tail(bytes: &[u8], offset: usize) -> Option<String> {
    let tail = (bytes.len() - offset) as u64;
    if tail > TORN_TAIL_MAX_BYTES {
        return Some(format!(
            "{tail} bytes from there to the end, more than the {TORN_TAIL_MAX_BYTES} a torn write can leave"
        ));
    }
    next_entry_after(bytes, offset).map(|at| format!("a valid entry follows at byte offset {at}"))
}

/// Entries that decode in `bytes[from..]`, resynchronising after damage: (entries,
/// stretches of non-zero bytes that do not decode).
fn count_entries(bytes: &[u8], from: usize) -> (u64, u64) {
    let (mut entries, mut stretches) = (0, 0);
    let mut offset = from;
    while offset < bytes.len() {
        if let Some(end) = entry_at(bytes, offset) {
            entries += 1;
            offset = end;
            continue;
        }
        let next = next_entry_after(bytes, offset);
        if bytes[offset..next.unwrap_or(bytes.len())].iter().any(|&b| b != 0) {
            stretches += 1;
        }
        match next {
            Some(at) => offset = at,
            None => break,
        }
    }
    (entries, stretches)
}

/// Entries per decoded batch, and batches queued between the decoding and applying threads.
const DECODE_BATCH: usize = 1_024;
const DECODE_QUEUE_BATCHES: usize = 8;

enum Decoded {
    Batch(Vec<JournalEntry>),
    /// A record whose checksum held but whose content is not an entry.
    Unreadable(usize),
    Bad {
        offset: usize,
        why: &'static str,
    },
}

/// Decodes the records of a segment from `offset` on, in batches; stops at a bad record.
fn decode_records(bytes: &[u8], mut offset: usize, out: std::sync::mpsc::SyncSender<Decoded>) {
    let mut batch = Vec::with_capacity(DECODE_BATCH);
    loop {
        let start = offset;
        let last = match next_record(bytes, &mut offset) {
            Next::Record(payload) => match serde_json::from_slice::<JournalEntry>(payload) {
                Ok(entry) => {
                    batch.push(entry);
                    if batch.len() < DECODE_BATCH {
                        continue;
                    }
                    None
                }
                Err(_) => Some(Decoded::Unreadable(start)),
            },
            Next::End => Some(Decoded::Batch(Vec::new())),
            Next::Bad { offset, why } => Some(Decoded::Bad { offset, why }),
        };
        if !batch.is_empty() && out.send(Decoded::Batch(std::mem::take(&mut batch))).is_err() {
            return;
        }
        match last {
            None => continue,
            Some(Decoded::Batch(_)) => return,
            Some(other) => {
                let _ = out.send(other);
                return;
            }
        }
    }
}

fn list(dir: &Path, extension: &str) -> Result<Vec<(u64, PathBuf)>, JournalError> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(error) => return Err(io_error(dir, error)),
    };
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(extension) {
            continue;
        }
        if let Some(number) = path.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse::<u64>().ok()) {
            found.push((number, path));
        }
    }
    found.sort();
    Ok(found)
}

/// What the manifest holds: the first entry index of every segment written and not yet
/// retired, ascending.
#[derive(Serialize, Deserialize)]
struct Manifest {
    segments: Vec<u64>,
}

/// The manifest's list, shared by a journal and its compaction thread (each write of the
/// file happens under the lock, so the two never interleave).
type SharedManifest = Arc<Mutex<Vec<u64>>>;

/// The segments the manifest lists, or `None` when the data dir has no manifest (one made
/// by an older build: decision 226). A manifest that does not read is damage.
fn read_manifest(data_dir: &Path) -> Result<Option<Vec<u64>>, JournalError> {
    let path = data_dir.join(MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error(&path, error)),
    };
    let mut offset = MANIFEST_MAGIC.len();
    let listed = match next_record(&bytes, &mut offset) {
        Next::Record(payload) if bytes.starts_with(MANIFEST_MAGIC) && offset == bytes.len() => {
            serde_json::from_slice::<Manifest>(payload).ok().map(|manifest| manifest.segments)
        }
        _ => None,
    };
    match listed {
        Some(segments) if segments.windows(2).all(|pair| pair[0] < pair[1]) => Ok(Some(segments)),
        _ => Err(JournalError(format!(
            "the manifest {} is damaged; refusing to start (remove it to read the data dir as one made by an \
             older build: its segments are then checked for gaps only, and the start writes a new manifest)",
            path.display()
        ))),
    }
}

/// Writes the manifest atomically: a temporary file, synced, renamed over the old one, and
/// the data dir synced.
fn write_manifest(data_dir: &Path, segments: &[u64]) -> io::Result<()> {
    let mut bytes = MANIFEST_MAGIC.to_vec();
    let manifest = Manifest { segments: segments.to_vec() };
    encode_record(&serde_json::to_vec(&manifest).map_err(io::Error::other)?, &mut bytes);
    let temporary = data_dir.join(format!("{MANIFEST_FILE}.tmp"));
    let written = (|| {
        let mut file = create_private_file(&temporary)?;
        io::Write::write_all(&mut file, &bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, data_dir.join(MANIFEST_FILE))?;
        sync_dir(data_dir)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}

/// Changes the manifest's list and writes it; the shared list changes only once written.
fn update_manifest(data_dir: &Path, manifest: &SharedManifest, change: impl FnOnce(&mut Vec<u64>)) -> io::Result<()> {
    let mut listed = manifest.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut next = listed.clone();
    change(&mut next);
    next.sort_unstable();
    next.dedup();
    write_manifest(data_dir, &next)?;
    *listed = next;
    Ok(())
}

/// The manifest's segments a recovery from a snapshot covering `from` entries needs:
/// every one holding an entry at or after `from`, with where the next one starts.
fn needed_segments(listed: Option<&[u64]>, from: u64) -> Vec<(u64, Option<u64>)> {
    let listed = listed.unwrap_or_default();
    let with_next = listed.iter().enumerate().map(|(at, &first)| (first, listed.get(at + 1).copied()));
    with_next.filter(|(_, next)| next.is_none_or(|next| next > from)).collect()
}

/// The first segment in `needed` starting before `before` that is not in `present`: a
/// gap at `position` (the first present segment after it), naming the file and entries.
fn missing_listed(
    needed: &[(u64, Option<u64>)],
    present: &[(u64, PathBuf)],
    before: u64,
    position: usize,
    journal: &Path,
    recovered: u64,
) -> Option<Failure> {
    let absent = |first: &u64| present.binary_search_by_key(first, |(at, _)| *at).is_err();
    let &(first, next) = needed.iter().find(|(first, _)| *first < before && absent(first))?;
    let path = journal.join(format!("{first:020}.seg"));
    let entries = match next {
        Some(next) => format!("entries {first} to {}", next - 1),
        None => format!("entries from {first} on: the newest segment written"),
    };
    let message = format!(
        "journal segment missing: {} ({entries}) is listed in the manifest but not there ({recovered} entries \
         recovered before it); refusing to start (`esim repair --data-dir DIR` tells what cutting there drops)",
        path.display()
    );
    Some(Failure::Gap(Damage { position, path, offset: 0, whole_segment: true, gap: true, message }))
}

/// The result of reading a data dir.
pub struct Recovery {
    /// The rebuilt engine, or `None` for a new data dir.
    pub engine: Option<Engine>,
    pub header: Option<SegmentHeader>,
    /// Entries applied in total (the index the next entry gets).
    pub next_index: u64,
    /// Entries replayed from the journal (after the snapshot).
    pub replayed: u64,
    /// Entries covered by the snapshot used.
    pub from_snapshot: u64,
    /// What was cut (torn tail), for the log.
    pub repaired: Vec<String>,
}

impl Recovery {
    fn empty() -> Recovery {
        Recovery { engine: None, header: None, next_index: 0, replayed: 0, from_snapshot: 0, repaired: Vec::new() }
    }
}

/// Options of a recovery.
pub struct RecoverOptions {
    /// Cut a torn tail from the file (the service does; `esim replay` only reports).
    /// Without it the data dir may be live: a segment or snapshot that vanishes while it
    /// is read (compaction by the running server) makes the recovery start over.
    pub repair: bool,
    /// Stop before the first entry later than this time (`esim replay --until`).
    pub until: Option<Millis>,
}

/// The service time an entry was applied at.
pub fn entry_time(entry: &JournalEntry) -> Millis {
    match entry {
        JournalEntry::Command { at, .. } | JournalEntry::Tick { at } => *at,
    }
}

/// The last entry a recovery applied (or the snapshot's last, with its time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptEntry {
    pub index: u64,
    pub at: Millis,
}

/// Damage at a byte offset of a segment: what cutting can repair.
struct Damage {
    /// Position of the segment in the sorted list.
    position: usize,
    path: PathBuf,
    offset: usize,
    /// The damage is in the magic or header: the whole segment goes.
    whole_segment: bool,
    /// Entries are missing before the segment at `position` (a listed segment is not
    /// there, or the one before was cut short): nothing is cut in `path`, which names
    /// where they were, and every segment from `position` on goes.
    gap: bool,
    message: String,
}

enum Failure {
    /// A file vanished while it was read: a live server may have compacted meanwhile.
    Retry(JournalError),
    /// Entries are missing: damage, unless a live server compacted meanwhile (retried
    /// like [`Failure::Retry`], then damage).
    Gap(Damage),
    Damage(Damage),
    Fatal(JournalError),
}

impl Failure {
    fn into_error(self) -> JournalError {
        match self {
            Failure::Retry(error) | Failure::Fatal(error) => error,
            Failure::Damage(damage) | Failure::Gap(damage) => JournalError(damage.message),
        }
    }
}

/// Reads a whole segment or snapshot. A file whose name is gone once it has been read was
/// removed under the reader (a live server compacted): [`remove_gradually`] unlinks a
/// file before it shortens it, so what was read may be short, and the recovery starts
/// over instead of taking it for damage.
fn read_file(path: &Path) -> Result<Vec<u8>, Failure> {
    read_confirmed(path, |path| fs::read(path))
}

/// [`read_file`] with the read as a parameter (a test interleaves a removal with it).
fn read_confirmed(path: &Path, read: impl FnOnce(&Path) -> io::Result<Vec<u8>>) -> Result<Vec<u8>, Failure> {
    let vanished = |error: io::Error| {
        let gone = error.kind() == io::ErrorKind::NotFound;
        let error = io_error(path, error);
        if gone {
            Failure::Retry(error)
        } else {
            Failure::Fatal(error)
        }
    };
    let bytes = read(path).map_err(vanished)?;
    fs::symlink_metadata(path).map_err(vanished)?;
    Ok(bytes)
}

fn cut_file(path: &Path, len: u64) -> Result<(), JournalError> {
    let file = OpenOptions::new().write(true).open(path).map_err(|e| io_error(path, e))?;
    file.set_len(len).map_err(|e| io_error(path, e))?;
    file.sync_all().map_err(|e| io_error(path, e))
}

/// Rebuilds the state of a data dir: the newest snapshot that reads, then the journal
/// after it. A damaged newest snapshot passed over is logged as a warning naming it.
pub fn recover(data_dir: &Path, options: &RecoverOptions) -> Result<Recovery, JournalError> {
    let read = recover_with(data_dir, options, None);
    read.result.map_err(Failure::into_error)?;
    Ok(read.recovery)
}

/// What [`recover_with`] read.
struct Recovered {
    result: Result<(), Failure>,
    /// The state read so far, also on failure (what `repair` keeps).
    recovery: Recovery,
    last: Option<KeptEntry>,
    /// Damaged snapshots passed over, each with the one recovered from instead.
    warnings: Vec<String>,
}

/// [`recover`], stopping after `max_entries` entries.
fn recover_with(data_dir: &Path, options: &RecoverOptions, max_entries: Option<u64>) -> Recovered {
    let tries = if options.repair { 1 } else { LIVE_READ_TRIES };
    recover_tries(data_dir, options, max_entries, tries)
}

/// [`recover_with`], reading up to `tries` times while files vanish or entries are
/// missing (1 when no live server can hold the data dir).
fn recover_tries(data_dir: &Path, options: &RecoverOptions, max_entries: Option<u64>, tries: u32) -> Recovered {
    let mut attempt = 1;
    loop {
        let mut recovery = Recovery::empty();
        let mut last = None;
        let mut warnings = Vec::new();
        let result = recover_once(data_dir, options, max_entries, &mut recovery, &mut last, &mut warnings);
        let result = match result {
            Err(Failure::Retry(_) | Failure::Gap(_)) if attempt < tries => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * u64::from(attempt)));
                continue;
            }
            // Still missing after every try: no compaction explains it.
            Err(Failure::Gap(damage)) => Err(Failure::Damage(damage)),
            result => result,
        };
        if result.is_ok() {
            for warning in &warnings {
                tracing::warn!("{warning}");
            }
        }
        return Recovered { result, recovery, last, warnings };
    }
}

/// A snapshot file's content, or why it is damaged (`Ok(Err)`); a vanished file and
/// another format version are failures.
fn read_snapshot(path: &Path, covered: u64) -> Result<Result<Snapshot, String>, Failure> {
    let bytes = read_file(path)?;
    let Some(payload) = snapshot_payload(&bytes) else {
        return Ok(Err("not one whole record with its checksum".into()));
    };
    match serde_json::from_slice::<Snapshot>(payload) {
        Ok(snapshot) if snapshot.header.version != FORMAT_VERSION => {
            Err(Failure::Fatal(version_refusal(path, snapshot.header.version)))
        }
        Ok(snapshot) if snapshot.covered_entries != covered => {
            Ok(Err(format!("it says it covers {} entries, its name {covered}", snapshot.covered_entries)))
        }
        Ok(snapshot) => Ok(Ok(snapshot)),
        Err(error) => match serde_json::from_slice::<SnapshotVersion>(payload) {
            Ok(found) if found.header.version != FORMAT_VERSION => {
                Err(Failure::Fatal(version_refusal(path, found.header.version)))
            }
            _ => Ok(Err(format!("it cannot be read: {error}"))),
        },
    }
}

/// Starts `recovery` from the newest snapshot that reads; each damaged newer one is
/// added to `passed_over` (the entries it covers, and why).
fn recover_snapshot(
    data_dir: &Path,
    options: &RecoverOptions,
    recovery: &mut Recovery,
    last: &mut Option<KeptEntry>,
    passed_over: &mut Vec<(u64, String)>,
) -> Result<(), Failure> {
    let snapshots = list(&data_dir.join("snapshots"), "snap").map_err(Failure::Fatal)?;
    for (covered, path) in snapshots.iter().rev() {
        let snapshot = match read_snapshot(path, *covered)? {
            Ok(snapshot) => snapshot,
            Err(why) => {
                passed_over.push((*covered, format!("snapshot {} is damaged ({why})", path.display())));
                continue;
            }
        };
        if options.until.is_some_and(|until| snapshot.engine.now() > until) {
            return Err(Failure::Fatal(JournalError(format!(
                "--until is before the newest snapshot ({}); the journal before it was compacted",
                snapshot.engine.now()
            ))));
        }
        *last = snapshot.covered_entries.checked_sub(1).map(|index| KeptEntry { index, at: snapshot.engine.now() });
        recovery.engine = Some(snapshot.engine);
        recovery.header = Some(snapshot.header);
        recovery.next_index = snapshot.covered_entries;
        recovery.from_snapshot = snapshot.covered_entries;
        return Ok(());
    }
    Ok(())
}

fn recover_once(
    data_dir: &Path,
    options: &RecoverOptions,
    max_entries: Option<u64>,
    recovery: &mut Recovery,
    last: &mut Option<KeptEntry>,
    warnings: &mut Vec<String>,
) -> Result<(), Failure> {
    // The manifest first: a segment a live server creates meanwhile is renamed into
    // place before the manifest lists it, so the listing below holds it.
    let listed = read_manifest(data_dir).map_err(Failure::Fatal)?;
    let mut passed_over = Vec::new();
    recover_snapshot(data_dir, options, recovery, last, &mut passed_over)?;
    let replayed = replay_segments(data_dir, options, max_entries, listed.as_deref(), recovery, last);
    let instead = match recovery.from_snapshot {
        0 => "the journal from its start".to_string(),
        covered => format!("the previous snapshot ({covered} entries) and the segments since it"),
    };
    // What replaces a damaged snapshot must reach as far as it did (unless `--until`
    // stopped the replay before): otherwise entries only it covered are lost.
    let short = passed_over.iter().any(|(covered, _)| recovery.next_index < *covered);
    let damaged: Vec<&str> = passed_over.iter().map(|(_, why)| why.as_str()).collect();
    let no_copy = |why: String| {
        Failure::Fatal(JournalError(format!(
            "{}, and {instead} cannot replace it ({why}); refusing to start (a snapshot cannot be repaired by \
             cutting the journal: restore the data dir from a backup)",
            damaged.join("; ")
        )))
    };
    match replayed {
        Err(Failure::Gap(gap)) if short => Err(no_copy(gap.message)),
        Ok(()) if short && options.until.is_none() => {
            Err(no_copy(format!("they hold {} entries", recovery.next_index)))
        }
        Ok(()) => {
            warnings.extend(passed_over.into_iter().map(|(_, why)| format!("{why}; recovered from {instead}")));
            Ok(())
        }
        other => other,
    }
}

/// The entries after a gap: entries `recovered..first` are missing before the segment
/// `path` at `position`, after the segment `previous` (or the snapshot).
fn gap_before(
    path: &Path,
    position: usize,
    first: u64,
    recovered: u64,
    previous: Option<&Path>,
    listed: bool,
) -> Failure {
    let missing = format!("entries {recovered} to {} are missing", first - 1);
    let expected = path.with_file_name(format!("{recovered:020}.seg"));
    let (named, why) = match previous {
        Some(previous) if listed => (
            previous.to_path_buf(),
            format!("{} was cut short: it ends before entry {recovered}, and {} starts at {first}", previous.display(), path.display()),
        ),
        Some(previous) => (
            previous.to_path_buf(),
            format!(
                "{} ends before entry {recovered} and {} starts at {first}: the first was cut short, or {} is missing",
                previous.display(),
                path.display(),
                expected.display()
            ),
        ),
        None => (
            expected.clone(),
            format!(
                "the snapshot used covers {recovered} entries but the first segment, {}, starts at {first}: {} is missing",
                path.display(),
                expected.display()
            ),
        ),
    };
    let message = format!(
        "journal gap: {missing} ({why}); refusing to start (`esim repair --data-dir DIR` tells what cutting there drops)"
    );
    Failure::Gap(Damage { position, path: named, offset: 0, whole_segment: true, gap: true, message })
}

/// How the entries of one segment were applied.
enum Applied {
    /// To its end.
    Whole,
    /// Stopped by `--until` or the entry bound: the recovery ends here.
    Stopped,
    /// A record whose checksum held but whose content is not an entry, at an offset.
    Unreadable(usize),
    /// A bad record at an offset (a torn tail or damage, the caller decides).
    Bad { offset: usize, why: &'static str },
}

/// Applies the entries of a segment from byte `offset` (after its header) that the
/// recovery has not applied yet. Decoding runs on a second thread while this one
/// applies: the two halves of the work take about as long, so recovery runs near twice
/// as fast on 2 cores.
fn apply_entries(
    bytes: &[u8],
    offset: usize,
    header: &SegmentHeader,
    options: &RecoverOptions,
    max_entries: Option<u64>,
    recovery: &mut Recovery,
    last: &mut Option<KeptEntry>,
) -> Applied {
    let engine = recovery.engine.get_or_insert_with(|| Engine::new(header.config.clone(), header.start));
    recovery.header.get_or_insert(header.clone());
    std::thread::scope(|scope| {
        let (batches, decoded) = std::sync::mpsc::sync_channel::<Decoded>(DECODE_QUEUE_BATCHES);
        scope.spawn(move || decode_records(bytes, offset, batches));
        let mut index = header.first_index;
        for message in decoded {
            let entries = match message {
                Decoded::Batch(entries) => entries,
                Decoded::Unreadable(at) => return Applied::Unreadable(at),
                Decoded::Bad { offset, why } => return Applied::Bad { offset, why },
            };
            for entry in entries {
                if index >= recovery.next_index {
                    let at = entry_time(&entry);
                    if options.until.is_some_and(|until| at > until)
                        || max_entries.is_some_and(|max| recovery.next_index >= max)
                    {
                        return Applied::Stopped;
                    }
                    entry.replay(engine);
                    *last = Some(KeptEntry { index, at });
                    recovery.next_index += 1;
                    recovery.replayed += 1;
                }
                index += 1;
            }
        }
        Applied::Whole
    })
}

/// Replays the segments after the snapshot `recovery` starts from: each must start where
/// the entries before it end, every segment of the manifest's list that holds an entry
/// after the snapshot must be there, and only the last segment may end in a torn tail.
fn replay_segments(
    data_dir: &Path,
    options: &RecoverOptions,
    max_entries: Option<u64>,
    listed: Option<&[u64]>,
    recovery: &mut Recovery,
    last: &mut Option<KeptEntry>,
) -> Result<(), Failure> {
    let journal = data_dir.join("journal");
    let segments = list(&journal, "seg").map_err(Failure::Fatal)?;
    let needed = needed_segments(listed, recovery.from_snapshot);
    let newest_listed = needed.last().map(|(first, _)| *first);
    let final_position = segments.len().saturating_sub(1);
    let mut previous: Option<&Path> = None;
    for (position, (first_index, path)) in segments.iter().enumerate() {
        if max_entries.is_some_and(|max| recovery.next_index >= max) {
            return Ok(());
        }
        if let Some(missing) = missing_listed(&needed, &segments, *first_index, position, &journal, recovery.next_index)
        {
            return Err(missing);
        }
        let is_last = position == final_position;
        let segment = SegmentRead {
            position,
            path,
            bytes: read_file(path)?,
            is_last,
            listed_newest: is_last && newest_listed == Some(*first_index),
            repair: options.repair,
        };
        let Some((header, offset)) = segment.header(*first_index, &mut recovery.repaired)? else {
            continue;
        };
        if header.first_index > recovery.next_index {
            let first = header.first_index;
            return Err(gap_before(path, position, first, recovery.next_index, previous, listed.is_some()));
        }
        match apply_entries(&segment.bytes, offset, &header, options, max_entries, recovery, last) {
            Applied::Whole => {}
            Applied::Stopped => return Ok(()),
            Applied::Unreadable(at) => return Err(segment.damage(at, false, "unreadable entry")),
            Applied::Bad { offset, why } => segment.torn_or_damage(offset, false, why, &mut recovery.repaired)?,
        }
        previous = Some(path.as_path());
    }
    let after_all = segments.len();
    missing_listed(&needed, &segments, u64::MAX, after_all, &journal, recovery.next_index).map_or(Ok(()), Err)
}

/// Why a whole newest listed segment cannot be a torn write.
const CUT_SHORT: &str = "the manifest lists it as the newest segment, written whole before it was listed: cut short";

/// One segment file read for replay: where it sits, and so what a bad record in it means.
struct SegmentRead<'a> {
    /// Position in the sorted list of segments.
    position: usize,
    path: &'a Path,
    bytes: Vec<u8>,
    /// Only the last segment can end in a torn write.
    is_last: bool,
    /// The newest listed segment had its whole header synced before it was listed.
    listed_newest: bool,
    /// Cut torn tails and remove torn segments on disk (otherwise only say so).
    repair: bool,
}

impl SegmentRead<'_> {
    fn damage(&self, offset: usize, whole_segment: bool, why: &str) -> Failure {
        Failure::Damage(Damage {
            position: self.position,
            path: self.path.to_path_buf(),
            offset,
            whole_segment,
            gap: false,
            message: format!(
                "journal damaged in {} at byte offset {offset} ({why}); refusing to start \
                 (`esim repair --data-dir DIR` tells what cutting there drops)",
                self.path.display()
            ),
        })
    }

    /// A bad record at `offset`: the torn tail of the last segment (cut, or the segment
    /// removed when its header was torn), or damage that refuses the start.
    fn torn_or_damage(
        &self,
        offset: usize,
        whole_segment: bool,
        why: &str,
        repaired: &mut Vec<String>,
    ) -> Result<(), Failure> {
        if !self.is_last {
            return Err(self.damage(offset, whole_segment, why));
        }
        if whole_segment && self.listed_newest {
            return Err(self.damage(offset, whole_segment, &format!("{why}; {CUT_SHORT}")));
        }
        if let Some(reason) = not_a_torn_tail(&self.bytes, offset) {
            return Err(self.damage(offset, whole_segment, &format!("{why}; not a torn tail: {reason}")));
        }
        let path = self.path;
        if whole_segment {
            if self.repair {
                fs::remove_file(path).map_err(|e| Failure::Fatal(io_error(path, e)))?;
            }
            repaired.push(format!("removed the segment {} torn in its header ({why})", path.display()));
        } else {
            if self.repair {
                cut_file(path, offset as u64).map_err(Failure::Fatal)?;
            }
            let torn_bytes = self.bytes.len() - offset;
            repaired.push(format!(
                "cut a torn tail of {torn_bytes} bytes from {} at offset {offset} ({why})",
                path.display()
            ));
        }
        Ok(())
    }

    /// The segment's magic and header, and the offset of its first entry; `None` for a
    /// segment torn before its first entry (removed, or to be removed on repair).
    fn header(&self, first_index: u64, repaired: &mut Vec<String>) -> Result<Option<(SegmentHeader, usize)>, Failure> {
        let (path, bytes) = (self.path, &self.bytes);
        if bytes.len() < 8 || &bytes[..8] != SEGMENT_MAGIC {
            if self.is_last && bytes.len() < 8 && SEGMENT_MAGIC.starts_with(bytes) {
                if self.listed_newest {
                    return Err(self.damage(0, true, &format!("{} bytes; {CUT_SHORT}", bytes.len())));
                }
                // A crash while creating the segment: nothing in it was acknowledged.
                if self.repair {
                    fs::remove_file(path).map_err(|e| Failure::Fatal(io_error(path, e)))?;
                }
                repaired.push(format!("removed the empty segment {}", path.display()));
                return Ok(None);
            }
            return Err(self.damage(0, true, "bad magic"));
        }
        let mut offset = 8;
        let header: SegmentHeader = match next_record(bytes, &mut offset) {
            Next::Record(payload) => match serde_json::from_slice::<SegmentHeader>(payload) {
                Ok(header) => header,
                Err(_) => {
                    if let Ok(found) = serde_json::from_slice::<VersionOnly>(payload) {
                        if found.version != FORMAT_VERSION {
                            return Err(Failure::Fatal(version_refusal(path, found.version)));
                        }
                    }
                    return Err(self.damage(8, true, "unreadable header"));
                }
            },
            Next::Bad { offset, why } => return self.torn_or_damage(offset, true, why, repaired).map(|()| None),
            Next::End => return self.torn_or_damage(8, true, "missing header", repaired).map(|()| None),
        };
        if header.version != FORMAT_VERSION {
            return Err(Failure::Fatal(version_refusal(path, header.version)));
        }
        if header.first_index != first_index {
            return Err(self.damage(8, true, "header index does not match the file name"));
        }
        Ok(Some((header, offset)))
    }
}

/// What `esim repair` found in a data dir, and did when asked to cut.
#[derive(Debug)]
pub struct RepairReport {
    /// Whether the cut was made (`--cut-at-damage`).
    pub applied: bool,
    /// Torn tails found (not damage: `esim serve` cuts them on start; cut here when applied).
    pub torn_tails: Vec<String>,
    /// The first damage, if any.
    pub damage: Option<DamageReport>,
    /// Entries in the data dir after the cut (or now, when there is no damage).
    pub entries_kept: u64,
    /// The last entry kept: its index and service time.
    pub last_kept: Option<KeptEntry>,
    /// Damaged snapshots passed over, each with what the state was read from instead.
    pub warnings: Vec<String>,
}

/// Damage in a segment and what cutting there drops.
#[derive(Debug)]
pub struct DamageReport {
    /// The refusal a start gives.
    pub message: String,
    pub file: PathBuf,
    pub offset: u64,
    /// The whole file goes (its magic or header is damaged).
    pub whole_segment: bool,
    /// Entries are missing before the later segments (a segment is not there, or `file`
    /// was cut short): nothing is cut in `file`, its entries cannot be counted, and the
    /// later segments go.
    pub gap: bool,
    /// Records that decode as entries in the dropped bytes and segments.
    pub dropped_entries: u64,
    /// Stretches of non-zero bytes in the dropped part that do not decode: each is at
    /// least one entry (the damaged one) whose count cannot be known.
    pub unreadable_stretches: u64,
    /// Bytes dropped, later segments included.
    pub dropped_bytes: u64,
    /// Later segments removed whole.
    pub later_segments: Vec<PathBuf>,
}

/// Finds the first damage in a data dir and, with `apply`, cuts the damaged segment at
/// the damage offset (the whole segment when its header is damaged; nothing of it when
/// entries are missing before the next one) and removes the later segments; the manifest
/// then lists what is left. Refuses a data dir held by a live process, a damaged snapshot
/// with no previous one to replace it, and a journal of another format version (not
/// repairable by cutting).
pub fn repair(data_dir: &Path, apply: bool) -> Result<RepairReport, JournalError> {
    let _lock = if apply {
        Some(crate::lock::DataDirLock::acquire(data_dir).map_err(|e| JournalError(e.to_string()))?)
    } else {
        if let Some(pid) = crate::lock::DataDirLock::holder(data_dir) {
            return Err(JournalError(format!(
                "the data dir {} is in use by a running esim process (pid {pid}); stop it before repairing",
                data_dir.display()
            )));
        }
        None
    };
    // Nothing is cut while reading, and no live server holds the data dir: one read.
    let options = RecoverOptions { repair: false, until: None };
    let Recovered { result, recovery, last, warnings } = recover_tries(data_dir, &options, None, 1);
    let damage = match result {
        Ok(()) => {
            if apply && !recovery.repaired.is_empty() {
                recover(data_dir, &RecoverOptions { repair: true, until: None })?;
            }
            return Ok(RepairReport {
                applied: apply,
                torn_tails: recovery.repaired,
                damage: None,
                entries_kept: recovery.next_index,
                last_kept: last,
                warnings,
            });
        }
        Err(Failure::Damage(damage) | Failure::Gap(damage)) => damage,
        Err(Failure::Fatal(error)) | Err(Failure::Retry(error)) => {
            return Err(JournalError(format!("{error}\nesim repair cannot fix this by cutting the journal")));
        }
    };
    let report = measure_damage(data_dir, damage)?;
    if apply {
        cut_at(data_dir, &report)?;
    }
    Ok(RepairReport {
        applied: apply,
        torn_tails: recovery.repaired,
        damage: Some(report),
        entries_kept: recovery.next_index,
        last_kept: last,
        warnings,
    })
}

/// What cutting at `damage` drops: the damaged segment from the offset (or whole), or
/// nothing of it after a gap, and every later segment.
fn measure_damage(data_dir: &Path, damage: Damage) -> Result<DamageReport, JournalError> {
    let segments = list(&data_dir.join("journal"), "seg")?;
    // A whole segment dropped: its entries start after its header when that frames.
    let entries_from = |bytes: &[u8]| {
        let mut offset = 8;
        match next_record(bytes, &mut offset) {
            Next::Record(_) => offset,
            _ => 8.min(bytes.len()),
        }
    };
    let (mut dropped_entries, mut unreadable_stretches, mut dropped_bytes) = (0, 0, 0);
    if !damage.gap {
        let bytes = fs::read(&damage.path).map_err(|e| io_error(&damage.path, e))?;
        let from = if damage.whole_segment { entries_from(&bytes) } else { damage.offset };
        (dropped_entries, unreadable_stretches) = count_entries(&bytes, from);
        dropped_bytes = (bytes.len() - if damage.whole_segment { 0 } else { damage.offset }) as u64;
    }
    let first_later = if damage.gap { damage.position } else { damage.position + 1 };
    let mut later_segments = Vec::new();
    for (_, path) in segments.iter().skip(first_later) {
        let later = fs::read(path).map_err(|e| io_error(path, e))?;
        let (entries, stretches) = count_entries(&later, entries_from(&later));
        dropped_entries += entries;
        unreadable_stretches += stretches;
        dropped_bytes += later.len() as u64;
        later_segments.push(path.clone());
    }
    Ok(DamageReport {
        message: damage.message,
        file: damage.path,
        offset: damage.offset as u64,
        whole_segment: damage.whole_segment,
        gap: damage.gap,
        dropped_entries,
        unreadable_stretches,
        dropped_bytes,
        later_segments,
    })
}

/// Cuts what `report` says: the later segments, then the damaged one (at its offset, or
/// whole; nothing after a gap); the manifest then lists the segments left, and what is
/// left must start cleanly.
fn cut_at(data_dir: &Path, report: &DamageReport) -> Result<(), JournalError> {
    let journal = data_dir.join("journal");
    for path in report.later_segments.iter().rev() {
        fs::remove_file(path).map_err(|e| io_error(path, e))?;
    }
    sync_dir(&journal).map_err(|e| io_error(&journal, e))?;
    match (report.gap, report.whole_segment) {
        // Nothing to cut: the entries are gone.
        (true, _) => {}
        (false, true) => fs::remove_file(&report.file).map_err(|e| io_error(&report.file, e))?,
        (false, false) => cut_file(&report.file, report.offset)?,
    }
    sync_dir(&journal).map_err(|e| io_error(&journal, e))?;
    let left: Vec<u64> = list(&journal, "seg")?.into_iter().map(|(first, _)| first).collect();
    write_manifest(data_dir, &left).map_err(|e| io_error(&data_dir.join(MANIFEST_FILE), e))?;
    recover(data_dir, &RecoverOptions { repair: true, until: None })?;
    Ok(())
}

/// The file a segment or snapshot is written through: positional writes, a data sync
/// and a cut. A seam for fault injection in tests; [`File`] in production.
pub trait SegmentFile: Send {
    /// Writes all of `bytes` at `offset` (no buffering beyond the call).
    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Makes the written bytes and the file's size durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts (or extends) the file to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl SegmentFile for File {
    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// Makes the [`SegmentFile`] for a new file at a path (created empty, mode 0600).
pub type Opener = Box<dyn FnMut(&Path) -> io::Result<Box<dyn SegmentFile>> + Send>;

/// The opener of a journal and of its compaction thread.
type SharedOpener = Arc<Mutex<Opener>>;

fn open_file(opener: &SharedOpener, path: &Path) -> io::Result<Box<dyn SegmentFile>> {
    let mut opener = opener.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    opener(path)
}

/// Creates (or empties) a file with mode 0600 whatever the umask or an older file's mode.
pub fn create_private_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

fn real_file(path: &Path) -> io::Result<Box<dyn SegmentFile>> {
    Ok(Box::new(create_private_file(path)?))
}

fn private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Whether the journal can still write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalHealth {
    Ok,
    /// A write failed and cutting the segment back failed too: nothing more is written
    /// by this process (the reason says what happened).
    Wedged(String),
}

/// A failed append. The journal is as it was before the call unless `wedged`.
#[derive(Debug)]
pub struct AppendError {
    pub error: io::Error,
    /// The segment could not be cut back: every later append fails at once.
    pub wedged: bool,
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.wedged {
            write!(f, "{} (the journal is wedged: no more changes are written by this process)", self.error)
        } else {
            write!(f, "{}", self.error)
        }
    }
}

impl std::error::Error for AppendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<AppendError> for io::Error {
    fn from(error: AppendError) -> io::Error {
        if error.wedged {
            io::Error::new(error.error.kind(), error.to_string())
        } else {
            error.error
        }
    }
}

/// The journal the service appends to.
pub struct FileJournal {
    dir: PathBuf,
    header: SegmentHeader,
    /// Shared with a compaction thread, which writes its snapshot through it too.
    opener: SharedOpener,
    /// The segments the manifest lists; the compaction thread retires some.
    manifest: SharedManifest,
    file: Box<dyn SegmentFile>,
    segment: PathBuf,
    /// The end of the last acknowledged batch in the current segment: everything
    /// before it is synced; appends write here, and failures cut back to here.
    durable_len: u64,
    next_index: u64,
    entries_since_snapshot: u64,
    /// Bytes appended since the last snapshot was due (or the start).
    bytes_since_snapshot: u64,
    policy: SnapshotPolicy,
    health: JournalHealth,
    /// The snapshot being made by replay on its own thread, if one is.
    compaction: Option<Compaction>,
    /// Told of each snapshot the compaction thread wrote ([`FileJournal::on_snapshot_written`]).
    snapshot_written: Option<SnapshotWritten>,
    scratch: Vec<u8>,
    /// Record ends in `scratch`.
    ends: Vec<usize>,
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The first bytes of a segment: its magic and header record.
fn segment_start(header: &SegmentHeader) -> Vec<u8> {
    let mut bytes = SEGMENT_MAGIC.to_vec();
    encode_record(&serde_json::to_vec(header).expect("a header serializes"), &mut bytes);
    bytes
}

/// Appends one record per entry.
fn encode_entries(entries: &[JournalEntry], out: &mut Vec<u8>) {
    for entry in entries {
        encode_record(&serde_json::to_vec(entry).expect("an entry serializes"), out);
    }
}

/// A whole journal segment in memory, byte for byte what [`FileJournal`] writes to a
/// file: the simulation's crash fault rebuilds its engine from these bytes with
/// [`replay_segment`], so it exercises the same encoding and decoding as a restart.
pub struct SegmentBuffer {
    bytes: Vec<u8>,
}

impl SegmentBuffer {
    pub fn new(header: &SegmentHeader) -> SegmentBuffer {
        SegmentBuffer { bytes: segment_start(header) }
    }

    pub fn append(&mut self, entries: &[JournalEntry]) {
        encode_entries(entries, &mut self.bytes);
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Rebuilds an engine from the bytes of one segment that starts at entry 0 (no
/// snapshot): the header's configuration, then every entry. Any damage, a torn tail
/// included, is an error naming the offset (the caller holds the whole segment).
pub fn replay_segment(bytes: &[u8]) -> Result<(Engine, SegmentHeader, u64), JournalError> {
    let damage = |offset: usize, why: &str| JournalError(format!("segment damaged at byte offset {offset} ({why})"));
    if bytes.len() < 8 || &bytes[..8] != SEGMENT_MAGIC {
        return Err(damage(0, "bad magic"));
    }
    let mut offset = 8;
    let header: SegmentHeader = match next_record(bytes, &mut offset) {
        Next::Record(payload) => serde_json::from_slice(payload).map_err(|_| damage(8, "unreadable header"))?,
        Next::Bad { offset, why } => return Err(damage(offset, why)),
        Next::End => return Err(damage(8, "missing header")),
    };
    if header.version != FORMAT_VERSION {
        return Err(version_refusal(Path::new("the segment"), header.version));
    }
    if header.first_index != 0 {
        return Err(damage(8, "the segment does not start at entry 0"));
    }
    let mut engine = Engine::new(header.config.clone(), header.start);
    let mut entries = 0;
    loop {
        let start = offset;
        match next_record(bytes, &mut offset) {
            Next::Record(payload) => {
                let entry: JournalEntry =
                    serde_json::from_slice(payload).map_err(|_| damage(start, "unreadable entry"))?;
                entry.replay(&mut engine);
                entries += 1;
            }
            Next::End => return Ok((engine, header, entries)),
            Next::Bad { offset, why } => return Err(damage(offset, why)),
        }
    }
}

/// Creates a segment durably: written as `.seg.tmp`, synced, renamed, directory synced,
/// then listed in the manifest. On failure the temporary file is removed (a `.seg` never
/// lacks its header); a segment renamed but not listed is harmless (nothing is appended
/// to it, and a start needs only what the manifest lists).
fn new_segment(
    opener: &SharedOpener,
    manifest: &SharedManifest,
    dir: &Path,
    header: &SegmentHeader,
) -> io::Result<(Box<dyn SegmentFile>, PathBuf, u64)> {
    let journal = dir.join("journal");
    let path = journal.join(format!("{:020}.seg", header.first_index));
    let temporary = journal.join(format!("{:020}.seg.tmp", header.first_index));
    let bytes = segment_start(header);
    let made = (|| {
        let mut file = open_file(opener, &temporary)?;
        file.write_all_at(&bytes, 0)?;
        file.sync_data()?;
        fs::rename(&temporary, &path)?;
        sync_dir(&journal)?;
        update_manifest(dir, manifest, |listed| listed.push(header.first_index))?;
        Ok(file)
    })();
    match made {
        Ok(file) => Ok((file, path, bytes.len() as u64)),
        Err(error) => {
            let _ = fs::remove_file(&temporary);
            Err(error)
        }
    }
}

/// Removes `*.tmp` left by an interrupted segment or snapshot creation.
fn remove_temporaries(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

impl FileJournal {
    /// Opens the journal for appending: always a new segment starting at
    /// `header.first_index` (the recovered entry count), in the format of this build
    /// (`header.version` is set to [`FORMAT_VERSION`]).
    pub fn open(data_dir: &Path, header: SegmentHeader, policy: SnapshotPolicy) -> io::Result<FileJournal> {
        FileJournal::open_with(data_dir, header, policy, real_file)
    }

    /// [`FileJournal::open`] writing every segment and snapshot through `opener`, which
    /// creates the file at a path (the seam for fault injection).
    pub fn open_with(
        data_dir: &Path,
        mut header: SegmentHeader,
        policy: SnapshotPolicy,
        opener: impl FnMut(&Path) -> io::Result<Box<dyn SegmentFile>> + Send + 'static,
    ) -> io::Result<FileJournal> {
        header.version = FORMAT_VERSION;
        let dir = data_dir.to_path_buf();
        for sub in ["journal", "snapshots"] {
            private_dir(&dir.join(sub))?;
            remove_temporaries(&dir.join(sub))?;
        }
        let _ = fs::remove_file(dir.join(format!("{MANIFEST_FILE}.tmp")));
        let opener: SharedOpener = Arc::new(Mutex::new(Box::new(opener)));
        // The recovery before this checked what is there: the manifest lists it and the
        // new segment (a data dir of an older build gets its first manifest here).
        let kept = list(&dir.join("journal"), "seg").map_err(|e| io::Error::other(e.0))?;
        let kept = kept.into_iter().map(|(first, _)| first).filter(|&first| first < header.first_index).collect();
        let manifest: SharedManifest = Arc::new(Mutex::new(kept));
        let (file, segment, durable_len) = new_segment(&opener, &manifest, &dir, &header)?;
        Ok(FileJournal {
            next_index: header.first_index,
            dir,
            header,
            opener,
            manifest,
            file,
            segment,
            durable_len,
            entries_since_snapshot: 0,
            bytes_since_snapshot: 0,
            policy,
            health: JournalHealth::Ok,
            compaction: None,
            snapshot_written: None,
            scratch: Vec::new(),
            ends: Vec::new(),
        })
    }

    /// Appends entries and makes them durable (one sync for all of them, or one per
    /// [`TORN_TAIL_MAX_BYTES`] of them). On error the segment is cut back to where it
    /// was, and the next append continues there; if the cut fails the journal is wedged.
    pub fn append_entries(&mut self, entries: &[JournalEntry]) -> Result<(), AppendError> {
        if let JournalHealth::Wedged(why) = &self.health {
            return Err(AppendError { error: io::Error::other(why.clone()), wedged: true });
        }
        if entries.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        self.ends.clear();
        for entry in entries {
            encode_record(&serde_json::to_vec(entry).expect("an entry serializes"), &mut self.scratch);
            let start = self.ends.last().copied().unwrap_or(0);
            if (self.scratch.len() - start) as u64 > TORN_TAIL_MAX_BYTES {
                return Err(AppendError {
                    error: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a journal entry of {} bytes is over {TORN_TAIL_MAX_BYTES}",
                            self.scratch.len() - start
                        ),
                    ),
                    wedged: false,
                });
            }
            self.ends.push(self.scratch.len());
        }
        // Write and sync groups of whole records of at most TORN_TAIL_MAX_BYTES.
        let mut group_start = 0;
        let mut ends = self.ends.iter().copied().peekable();
        while group_start < self.scratch.len() {
            let mut group_end = group_start;
            while let Some(end) = ends.next_if(|&end| (end - group_start) as u64 <= TORN_TAIL_MAX_BYTES) {
                group_end = end;
            }
            let written = self
                .file
                .write_all_at(&self.scratch[group_start..group_end], self.durable_len + group_start as u64)
                .and_then(|()| self.file.sync_data());
            if let Err(error) = written {
                return Err(self.cut_back(error));
            }
            group_start = group_end;
        }
        self.durable_len += self.scratch.len() as u64;
        self.next_index += entries.len() as u64;
        self.entries_since_snapshot += entries.len() as u64;
        self.bytes_since_snapshot += self.scratch.len() as u64;
        Ok(())
    }

    /// After a failed write: the segment cut back to its durable end, or the journal wedged.
    fn cut_back(&mut self, error: io::Error) -> AppendError {
        match self.file.set_len(self.durable_len).and_then(|()| self.file.sync_data()) {
            Ok(()) => AppendError { error, wedged: false },
            Err(cut_error) => {
                self.wedge(&error, cut_error);
                AppendError { error, wedged: true }
            }
        }
    }

    fn wedge(&mut self, error: &io::Error, cut_error: io::Error) {
        self.health = JournalHealth::Wedged(format!(
            "a journal write failed ({error}) and cutting {} back to its durable end ({} bytes) failed too \
             ({cut_error}); no more changes are written by this process: restart it once the disk is fixed",
            self.segment.display(),
            self.durable_len
        ));
    }

    /// Whether the journal can still write.
    pub fn health(&self) -> &JournalHealth {
        &self.health
    }

    /// Checks that the disk takes writes again, applying nothing: writes a block of
    /// zeros at the durable end, syncs, cuts it off again and syncs. A failing cut
    /// wedges the journal.
    pub fn probe(&mut self) -> io::Result<()> {
        if let JournalHealth::Wedged(why) = &self.health {
            return Err(io::Error::other(why.clone()));
        }
        let zeros = vec![0u8; PROBE_BYTES];
        let written = self.file.write_all_at(&zeros, self.durable_len).and_then(|()| self.file.sync_data());
        if let Err(cut_error) = self.file.set_len(self.durable_len).and_then(|()| self.file.sync_data()) {
            let error = written
                .as_ref()
                .err()
                .map_or_else(|| io::Error::other("the probe"), |e| io::Error::new(e.kind(), e.to_string()));
            self.wedge(&error, cut_error);
            let JournalHealth::Wedged(why) = &self.health else { unreachable!() };
            return Err(io::Error::other(why.clone()));
        }
        written
    }

    /// After a failed append: the durable state, read back from disk (what was not
    /// acknowledged is not there, so nothing unacknowledged survives half-applied).
    /// Reads only; the journal itself needs no reload to continue.
    pub fn reload(&mut self) -> Result<Engine, JournalError> {
        let options = RecoverOptions { repair: false, until: None };
        let Recovered { result, recovery, .. } = recover_with(&self.dir, &options, Some(self.next_index));
        result.map_err(Failure::into_error)?;
        if recovery.next_index != self.next_index {
            return Err(JournalError(format!(
                "the data dir holds {} entries but {} were acknowledged",
                recovery.next_index, self.next_index
            )));
        }
        recovery.engine.ok_or_else(|| JournalError("the data dir lost its journal".into()))
    }

    pub fn snapshot_due(&self) -> bool {
        self.policy.due(self.entries_since_snapshot, self.bytes_since_snapshot)
    }

    /// Writes a snapshot of `engine` (which has applied every appended entry): see
    /// [`FileJournal::write_encoded_snapshot`].
    pub fn write_snapshot(&mut self, engine: &Engine) -> io::Result<()> {
        let snapshot = self.encode_snapshot(engine, 0)?;
        self.write_encoded_snapshot(snapshot)
    }

    /// Encodes a snapshot of `engine`, which has applied every appended entry and then
    /// `pending_entries` more: the server's owner task encodes it when it hands those
    /// entries to the journal, and the journal writes it after appending them.
    pub fn encode_snapshot(&self, engine: &Engine, pending_entries: u64) -> io::Result<EncodedSnapshot> {
        encode_snapshot(&self.header, engine, self.next_index + pending_entries)
    }

    /// Writes an encoded snapshot atomically (temporary file, sync, read back and
    /// decoded, rename, sync of the directory), starts a new segment, and retires what
    /// the previous snapshot covers (that one and the segments since it stay). On
    /// failure no temporary file is left, the snapshot is still due, and appends continue
    /// in the current segment. The snapshot must cover exactly the appended entries.
    pub fn write_encoded_snapshot(&mut self, snapshot: EncodedSnapshot) -> io::Result<()> {
        if self.health != JournalHealth::Ok {
            return Err(io::Error::other("the journal is wedged"));
        }
        if snapshot.covered_entries != self.next_index {
            return Err(io::Error::other(format!(
                "a snapshot covering {} entries cannot follow a journal of {}",
                snapshot.covered_entries, self.next_index
            )));
        }
        let EncodedSnapshot { bytes, covered_entries } = snapshot;
        let snapshots = self.dir.join("snapshots");
        let final_path = snapshots.join(format!("{covered_entries:020}.snap"));
        let temporary = snapshots.join(format!("{covered_entries:020}.snap.tmp"));
        // The snapshot kept as the previous one: the newest before this one.
        let previous = list(&snapshots, "snap").map_err(|e| io::Error::other(e.0))?;
        let previous = previous.iter().map(|(covered, _)| *covered).filter(|&c| c < covered_entries).max();
        let written = (|| {
            let mut file = open_file(&self.opener, &temporary)?;
            file.write_all_at(&bytes, 0)?;
            file.sync_data()?;
            drop(file);
            let read_back = fs::read(&temporary)?;
            if read_back != bytes {
                return Err(io::Error::other(format!("{} does not read back as written", temporary.display())));
            }
            let decoded = decode_snapshot(&read_back, &temporary.display().to_string()).map_err(io::Error::other)?;
            if decoded.covered_entries != covered_entries {
                return Err(io::Error::other(format!("{} reads back as another snapshot", temporary.display())));
            }
            fs::rename(&temporary, &final_path)?;
            sync_dir(&snapshots)
        })();
        if let Err(error) = written {
            let _ = fs::remove_file(&temporary);
            return Err(error);
        }
        self.entries_since_snapshot = 0;
        self.bytes_since_snapshot = 0;
        self.start_segment_here()?;
        retire(&self.dir, &self.manifest, covered_entries, previous.unwrap_or(0))
    }

    /// Starts a new segment at the next entry (unless the current one starts there), so
    /// that a snapshot covering the entries so far covers whole segments.
    fn start_segment_here(&mut self) -> io::Result<()> {
        if self.header.first_index != self.next_index {
            let mut header = self.header.clone();
            header.first_index = self.next_index;
            let (file, segment, durable_len) = new_segment(&self.opener, &self.manifest, &self.dir, &header)?;
            self.header = header;
            self.file = file;
            self.segment = segment;
            self.durable_len = durable_len;
        }
        Ok(())
    }

    /// After an append, when a snapshot is due and none is being made: starts a new
    /// segment here and a thread that makes the snapshot of everything before it by
    /// replay (see [`compact`]). The caller (the server's owner task) never encodes the
    /// state: a snapshot stalls no request, whatever the size of the state.
    ///
    /// The entries and bytes counted towards the next snapshot are discounted only when
    /// one is written: after a failure (no segment, no thread, or the thread failed) a
    /// snapshot is still due, and the next append tries again (decision 228).
    pub fn compact_if_due(&mut self) {
        if self.health != JournalHealth::Ok || self.snapshot_in_progress() {
            return;
        }
        if let Some(done) = self.compaction.take() {
            let _ = self.finish_compaction(done);
        }
        if !self.snapshot_due() {
            return;
        }
        if let Err(error) = self.start_segment_here() {
            tracing::warn!(%error, "a snapshot was due but no new segment could be started; the journal still holds everything, trying again at the next append");
            return;
        }
        let covered_entries = self.next_index;
        let cancel = Arc::new(AtomicBool::new(false));
        let (dir, header, stop) = (self.dir.clone(), self.header.clone(), cancel.clone());
        let (opener, manifest) = (self.opener.clone(), self.manifest.clone());
        let written = self.snapshot_written.clone();
        let spawned = std::thread::Builder::new().name("esim-snapshot".into()).spawn(move || {
            compact(&dir, &header, covered_entries, &opener, &manifest, &stop)?;
            if let Some(written) = written {
                written();
            }
            Ok(())
        });
        match spawned {
            Ok(thread) => {
                let (counted_entries, counted_bytes) = (self.entries_since_snapshot, self.bytes_since_snapshot);
                self.compaction = Some(Compaction { covered_entries, counted_entries, counted_bytes, cancel, thread });
            }
            Err(error) => tracing::warn!(%error, "no thread for a snapshot; the journal still holds everything"),
        }
    }

    /// Waits for a compaction; when it wrote its snapshot, what it covered no longer
    /// counts towards the next one.
    fn finish_compaction(&mut self, done: Compaction) -> Result<u64, String> {
        let (entries, bytes) = (done.counted_entries, done.counted_bytes);
        let ended = done.join();
        if ended.is_ok() {
            self.entries_since_snapshot = self.entries_since_snapshot.saturating_sub(entries);
            self.bytes_since_snapshot = self.bytes_since_snapshot.saturating_sub(bytes);
        }
        ended
    }

    /// When to write the next snapshots.
    pub fn set_snapshot_policy(&mut self, policy: SnapshotPolicy) {
        self.policy = policy;
    }

    /// Whether a snapshot is being made on its thread.
    pub fn snapshot_in_progress(&self) -> bool {
        self.compaction.as_ref().is_some_and(|running| !running.thread.is_finished())
    }

    /// Waits for the snapshot being made, if any: the entries it covers when it was
    /// written, or why it was not.
    pub fn wait_for_snapshot(&mut self) -> Option<Result<u64, String>> {
        let done = self.compaction.take()?;
        Some(self.finish_compaction(done))
    }

    /// Tells `written` of every snapshot a compaction writes from now on.
    pub fn on_snapshot_written(&mut self, written: SnapshotWritten) {
        self.snapshot_written = Some(written);
    }

    /// When the newest snapshot in the data dir was written (its file's modification
    /// time), if there is one: the snapshot age metric's starting point.
    pub fn newest_snapshot_time(&self) -> Option<std::time::SystemTime> {
        let snapshots = list(&self.dir.join("snapshots"), "snap").ok()?;
        let (_, newest) = snapshots.into_iter().max_by_key(|(covered, _)| *covered)?;
        fs::metadata(newest).and_then(|m| m.modified()).ok()
    }

    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// The end of the last acknowledged batch in the current segment.
    pub fn durable_len(&self) -> u64 {
        self.durable_len
    }

    /// The segment appends go to.
    pub fn segment_path(&self) -> &Path {
        &self.segment
    }
}

impl Drop for FileJournal {
    /// A snapshot being made is cancelled at its next step and waited for: no thread
    /// outlives its journal (a test may start another on the same dir at once).
    fn drop(&mut self) {
        if let Some(running) = self.compaction.take() {
            running.cancel.store(true, Ordering::SeqCst);
            let _ = running.join();
        }
    }
}

/// A snapshot being made on its own thread.
struct Compaction {
    covered_entries: u64,
    /// The entries and bytes counted towards a snapshot when it started.
    counted_entries: u64,
    counted_bytes: u64,
    /// Asks the thread to stop at its next step (the journal is going away).
    cancel: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl Compaction {
    /// Waits for the thread; logs and returns how it ended.
    fn join(self) -> Result<u64, String> {
        let covered = self.covered_entries;
        let ended = self.thread.join().unwrap_or_else(|_| Err("the snapshot thread panicked".into()));
        match &ended {
            Ok(()) => {}
            Err(why) => tracing::warn!(covered, %why, "no snapshot; the journal still holds everything"),
        }
        ended.map(|()| covered)
    }
}

/// Makes the snapshot covering the first `covered_entries` entries, off the owner task:
/// rebuilds that state by replay from the data dir (the newest snapshot and the whole
/// segments before `covered_entries`, all durable and never written again), streams it
/// to a temporary file, syncs it, reads it back and decodes it to the same state digest,
/// renames it, and retires what the snapshot the replay started from made needless
/// (that one and the segments since it stay: [`retire`]).
///
/// The state it writes is the one a restart would rebuild from the same files, so it
/// needs no copy of the live engine; the price is a second engine in memory and a core
/// busy while it runs (about the time of a restart, and a decoding more to verify).
fn compact(
    dir: &Path,
    header: &SegmentHeader,
    covered_entries: u64,
    opener: &SharedOpener,
    manifest: &SharedManifest,
    cancel: &AtomicBool,
) -> Result<(), String> {
    let began = std::time::Instant::now();
    let cancelled = || cancel.load(Ordering::SeqCst).then(|| "cancelled: the journal was closed".to_string());
    let options = RecoverOptions { repair: false, until: None };
    let read = recover_with(dir, &options, Some(covered_entries));
    read.result.map_err(|failure| failure.into_error().0)?;
    if read.recovery.next_index != covered_entries {
        return Err(format!(
            "the data dir holds {} entries, not the {covered_entries} to cover",
            read.recovery.next_index
        ));
    }
    let previous = read.recovery.from_snapshot;
    let engine = read.recovery.engine.ok_or("the data dir holds no state")?;
    let rebuilt_ms = began.elapsed().as_millis() as u64;
    if let Some(why) = cancelled() {
        return Err(why);
    }
    let snapshots = dir.join("snapshots");
    let final_path = snapshots.join(format!("{covered_entries:020}.snap"));
    let temporary = snapshots.join(format!("{covered_entries:020}.snap.tmp"));
    let written = (|| -> io::Result<u64> {
        let mut file = open_file(opener, &temporary)?;
        let bytes = stream_snapshot(file.as_mut(), header, &engine, covered_entries)?;
        file.sync_data()?;
        drop(file);
        let digest = engine.state_digest();
        // The rebuilt engine goes before the read-back: one engine in memory at a time.
        drop(engine);
        verify_snapshot(&temporary, covered_entries, &digest)?;
        if let Some(why) = cancelled() {
            return Err(io::Error::other(why));
        }
        fs::rename(&temporary, &final_path)?;
        sync_dir(&snapshots)?;
        Ok(bytes)
    })();
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(error) => {
            let _ = fs::remove_file(&temporary);
            return Err(error.to_string());
        }
    };
    retire(dir, manifest, covered_entries, previous).map_err(|error| format!("retiring what it covers: {error}"))?;
    tracing::info!(
        covered_entries,
        bytes,
        rebuilt_ms,
        total_ms = began.elapsed().as_millis() as u64,
        kept_previous = previous,
        "snapshot written and verified (made by replay, off the owner task)"
    );
    Ok(())
}

/// Reads a written snapshot back from its file and decodes it: it must cover
/// `covered_entries` and hold the state of digest `digest`.
fn verify_snapshot(path: &Path, covered_entries: u64, digest: &str) -> io::Result<()> {
    let bytes = fs::read(path)?;
    let decoded = decode_snapshot(&bytes, &path.display().to_string()).map_err(io::Error::other)?;
    drop(bytes);
    if decoded.covered_entries != covered_entries || decoded.engine.state_digest() != digest {
        return Err(io::Error::other(format!(
            "{} does not read back as the state it was written from",
            path.display()
        )));
    }
    Ok(())
}

/// After a snapshot covering `covered_entries` was verified: removes the snapshots
/// before it but the one covering `previous` (0: none, the journal from its start is the
/// previous copy), and the segments that end before `previous`, listing them out of the
/// manifest first (a crash between leaves files the manifest does not need).
fn retire(dir: &Path, manifest: &SharedManifest, covered_entries: u64, previous: u64) -> io::Result<()> {
    let (journal, snapshots) = (dir.join("journal"), dir.join("snapshots"));
    let segments = list(&journal, "seg").map_err(|e| io::Error::other(e.0))?;
    // The segment holding entry `previous` stays, with all after it.
    let listed = manifest.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
    let firsts = segments.iter().map(|(first, _)| *first).chain(listed);
    let keep_from = firsts.filter(|&first| first <= previous).max().unwrap_or(0);
    update_manifest(dir, manifest, |listed| listed.retain(|&first| first >= keep_from))?;
    for (first, path) in &segments {
        if *first < keep_from {
            remove_gradually(path)?;
        }
    }
    for (covered, path) in list(&snapshots, "snap").map_err(|e| io::Error::other(e.0))? {
        if covered < covered_entries && covered != previous {
            remove_gradually(&path)?;
        }
    }
    sync_dir(&journal)?;
    sync_dir(&snapshots)
}

/// A removed file is shortened by this many bytes at a time, each step synced.
///
/// Unlinking a 1.1 GB snapshot at once frees all its blocks in one journal commit of
/// the filesystem (with the discards of a `discard` mount), and every append's sync
/// waits for that commit: 46-69 ms against 5-10 ms in 16 MiB steps, in a test on this
/// machine's ext4 (decision 203; RocksDB rate-limits its deletions for the same reason).
const REMOVE_STEP_BYTES: u64 = 16 * 1024 * 1024;

/// Removes a file without one large free of blocks: the name goes first (so a reader
/// that finds the file short also finds it gone, see [`read_file`]), then the open file
/// is cut from the end [`REMOVE_STEP_BYTES`] at a time, synced after each cut.
fn remove_gradually(path: &Path) -> io::Result<()> {
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    fs::remove_file(path)?;
    let mut len = file.metadata()?.len();
    while len > 0 {
        len = len.saturating_sub(REMOVE_STEP_BYTES);
        file.set_len(len)?;
        file.sync_data()?;
    }
    Ok(())
}

/// While a snapshot is streamed, its written bytes are synced every this many: the
/// journal's own syncs (on the same disk) then never wait behind more than this much of
/// the snapshot's writeback. Written whole and synced once at the end, a 1.1 GB snapshot
/// held a 185 ms append at 1 M eSIMs in the scale bench (the bytes-per-sync of RocksDB
/// and PostgreSQL's `backend_flush_after`, for the same reason).
const SNAPSHOT_SYNC_EVERY_BYTES: u64 = 4 * 1024 * 1024;

/// Writes a snapshot file (the bytes [`encode_snapshot`] makes) without holding its
/// payload in memory: the JSON is streamed in chunks after a placeholder for the
/// record's length and checksum, which are written last, syncing every
/// [`SNAPSHOT_SYNC_EVERY_BYTES`]. Returns the file's length.
fn stream_snapshot(
    file: &mut dyn SegmentFile,
    header: &SegmentHeader,
    engine: &Engine,
    covered_entries: u64,
) -> io::Result<u64> {
    const CHUNK_BYTES: usize = 1024 * 1024;
    struct Chunked<'a> {
        file: &'a mut dyn SegmentFile,
        offset: u64,
        crc: u32,
        payload_len: u64,
        buffer: Vec<u8>,
        /// Bytes written since the last sync.
        unsynced: u64,
    }
    impl Chunked<'_> {
        fn flush_buffer(&mut self) -> io::Result<()> {
            self.file.write_all_at(&self.buffer, self.offset)?;
            self.crc = crc32c::crc32c_append(self.crc, &self.buffer);
            self.offset += self.buffer.len() as u64;
            self.payload_len += self.buffer.len() as u64;
            self.unsynced += self.buffer.len() as u64;
            self.buffer.clear();
            if self.unsynced >= SNAPSHOT_SYNC_EVERY_BYTES {
                self.file.sync_data()?;
                self.unsynced = 0;
            }
            Ok(())
        }
    }
    impl io::Write for Chunked<'_> {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.buffer.extend_from_slice(bytes);
            if self.buffer.len() >= CHUNK_BYTES {
                self.flush_buffer()?;
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.flush_buffer()
        }
    }
    let record_start = SNAPSHOT_MAGIC.len() as u64;
    file.write_all_at(SNAPSHOT_MAGIC, 0)?;
    let mut out = Chunked {
        file,
        offset: record_start + 8,
        crc: 0,
        payload_len: 0,
        buffer: Vec::with_capacity(CHUNK_BYTES + 64 * 1024),
        unsynced: 0,
    };
    serde_json::to_writer(&mut out, &SnapshotRef { covered_entries, header, engine }).map_err(io::Error::other)?;
    io::Write::flush(&mut out)?;
    let Chunked { file, crc, payload_len, offset, .. } = out;
    if payload_len > u64::from(MAX_SNAPSHOT_BYTES) {
        return Err(io::Error::other(format!(
            "the state takes {payload_len} bytes, more than one snapshot record holds ({MAX_SNAPSHOT_BYTES})"
        )));
    }
    let mut frame = Vec::with_capacity(8);
    frame.extend_from_slice(&(payload_len as u32).to_le_bytes());
    frame.extend_from_slice(&crc.to_le_bytes());
    file.write_all_at(&frame, record_start)?;
    Ok(offset)
}

/// A snapshot encoded for a given journal position, to be written once the journal
/// reaches it.
pub struct EncodedSnapshot {
    covered_entries: u64,
    bytes: Vec<u8>,
}

impl EncodedSnapshot {
    /// The entries it covers (the index of the first entry after it).
    pub fn covered_entries(&self) -> u64 {
        self.covered_entries
    }

    /// The snapshot as a file holds it: the magic and one record.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Encodes a snapshot of `engine` after `covered_entries` entries, as a snapshot file
/// holds it (the magic and one record): the file journal and the PostgreSQL store
/// write the same bytes.
pub fn encode_snapshot(header: &SegmentHeader, engine: &Engine, covered_entries: u64) -> io::Result<EncodedSnapshot> {
    let snapshot = SnapshotRef { covered_entries, header, engine };
    let payload = serde_json::to_vec(&snapshot).map_err(io::Error::other)?;
    if payload.len() > MAX_SNAPSHOT_BYTES as usize {
        // Its length cannot be framed: no snapshot (the journal still holds everything).
        return Err(io::Error::other(format!(
            "the state takes {} bytes, more than one snapshot record holds ({MAX_SNAPSHOT_BYTES})",
            payload.len()
        )));
    }
    let mut bytes = Vec::with_capacity(SNAPSHOT_MAGIC.len() + 8 + payload.len());
    bytes.extend_from_slice(SNAPSHOT_MAGIC);
    encode_record(&payload, &mut bytes);
    Ok(EncodedSnapshot { covered_entries, bytes })
}

/// A snapshot read back from the bytes [`encode_snapshot`] made.
pub struct DecodedSnapshot {
    pub covered_entries: u64,
    pub header: SegmentHeader,
    pub engine: Engine,
}

/// Reads the bytes of a snapshot (`name` says where they come from, for errors):
/// refuses damage (checksum, length, trailing bytes) and another format version.
pub fn decode_snapshot(bytes: &[u8], name: &str) -> Result<DecodedSnapshot, JournalError> {
    let payload = snapshot_payload(bytes).ok_or_else(|| JournalError(format!("snapshot {name} is damaged")))?;
    let snapshot: Snapshot =
        serde_json::from_slice(payload).map_err(|error| match serde_json::from_slice::<SnapshotVersion>(payload) {
            Ok(found) if found.header.version != FORMAT_VERSION => {
                version_refusal(Path::new(name), found.header.version)
            }
            _ => JournalError(format!("snapshot {name} cannot be read: {error}")),
        })?;
    if snapshot.header.version != FORMAT_VERSION {
        return Err(version_refusal(Path::new(name), snapshot.header.version));
    }
    Ok(DecodedSnapshot { covered_entries: snapshot.covered_entries, header: snapshot.header, engine: snapshot.engine })
}

/// Refuses a header written by another format version, naming where it was read.
pub fn check_version(header: &SegmentHeader, name: &str) -> Result<(), JournalError> {
    if header.version == FORMAT_VERSION {
        Ok(())
    } else {
        Err(version_refusal(Path::new(name), header.version))
    }
}

#[derive(Serialize)]
struct SnapshotRef<'a> {
    covered_entries: u64,
    header: &'a SegmentHeader,
    engine: &'a Engine,
}

/// Reads a whole file (small helper for tests).
pub fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot record larger than an entry may be (the state of about 130,000 eSIMs
    /// is) is read back whole; the same length in a segment is still damage; a snapshot
    /// file with anything after its record is damaged.
    #[test]
    fn a_snapshot_larger_than_an_entry_record_is_read_back() {
        let length = MAX_RECORD_BYTES as usize + 1;
        let mut payload = vec![b' '; length];
        payload[0] = b'{';
        payload[length - 1] = b'}';
        let mut bytes = SNAPSHOT_MAGIC.to_vec();
        encode_record(&payload, &mut bytes);
        drop(payload);
        let read = snapshot_payload(&bytes).expect("a whole snapshot record");
        assert_eq!(read.len(), length);
        assert_eq!((read[0], read[length - 1]), (b'{', b'}'));
        let mut offset = 8;
        assert!(matches!(next_record(&bytes, &mut offset), Next::Bad { why: "impossible record length", .. }));
        bytes.push(0);
        assert!(snapshot_payload(&bytes).is_none(), "trailing bytes");
        bytes.truncate(bytes.len() - 2);
        assert!(snapshot_payload(&bytes).is_none(), "cut short");
        assert!(snapshot_payload(b"ESIMJRN1").is_none(), "another magic");
    }

    /// A file removed while it is read (a live server compacting under `esim replay`)
    /// makes the recovery start over, never read short: [`remove_gradually`] cuts a file
    /// that readers may hold open, so a read it interleaves with comes back short.
    #[test]
    fn a_file_removed_while_it_is_read_is_read_again_never_short() {
        let dir = std::env::temp_dir().join(format!("esim-remove-gradually-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.snap");
        let size = 2 * REMOVE_STEP_BYTES as usize + 10;
        fs::write(&path, vec![7u8; size]).unwrap();
        let read_across_a_removal = |path: &Path| -> io::Result<Vec<u8>> {
            let mut file = File::open(path)?;
            let mut bytes = vec![0u8; size / 2];
            file.read_exact(&mut bytes)?;
            remove_gradually(path)?;
            file.read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        match read_confirmed(&path, read_across_a_removal) {
            Err(Failure::Retry(_)) => {}
            Ok(bytes) => panic!("{} of {size} bytes taken for the file", bytes.len()),
            Err(other) => panic!("not a retry: {}", other.into_error().0),
        }
        assert!(!path.exists(), "the name goes");
        fs::write(&path, vec![7u8; size]).unwrap();
        assert_eq!(read_file(&path).ok().map(|bytes| bytes.len()), Some(size), "a file left alone is read whole");
        remove_gradually(&path).unwrap();
        assert!(matches!(read_file(&path), Err(Failure::Retry(_))), "a removed file is gone");
        fs::remove_dir_all(&dir).unwrap();
    }
}
