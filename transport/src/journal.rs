//! Durability: the journal of state-changing commands with their times, snapshots,
//! and recovery.
//!
//! The engine is deterministic, so the commands it applied, replayed in order from the
//! same configuration and seed, rebuild the exact state. On disk (in the data dir):
//!
//! - `journal/<first entry index, 20 digits>.seg`: a segment. It starts with the magic
//!   `ESIMJRN1` and a header record (engine configuration with the seed, clock mode,
//!   start time, index of its first entry), then one record per [`JournalEntry`].
//! - `snapshots/<entries covered, 20 digits>.snap`: the magic `ESIMSNP1` and one record
//!   holding the whole engine state after that many entries.
//!
//! A record is `[payload length: u32 LE][CRC-32C of the payload: u32 LE][payload]`, the
//! payload being JSON. A record cut short or failing its CRC at the end of the last
//! segment is a torn tail (a crash mid-write): it is cut and logged. Damage anywhere
//! else refuses recovery with an error naming the file and offset: no silent loss.
//!
//! Appends are group-committed: the owner task appends every entry of a batch of
//! requests and syncs once before it answers any of them.

use crate::service::{ClockMode, JournalEntry};
use esim_engine::{Engine, EngineConfig, Millis};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

const SEGMENT_MAGIC: &[u8; 8] = b"ESIMJRN1";
const SNAPSHOT_MAGIC: &[u8; 8] = b"ESIMSNP1";
/// Largest record accepted when reading (a larger length field is damage).
const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;

/// The version of the segment and snapshot format written by this build.
pub const FORMAT_VERSION: u32 = 1;

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

pub fn encode_record(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reading records: a valid record, the clean end, or damage at an offset.
enum Next<'a> {
    Record(&'a [u8]),
    End,
    /// Damage at `offset`; `reaches_end` when the bad record runs to the end of the file
    /// (what a torn write looks like).
    Damage {
        offset: usize,
        reaches_end: bool,
        why: &'static str,
    },
}

fn next_record<'a>(bytes: &'a [u8], offset: &mut usize) -> Next<'a> {
    let start = *offset;
    if start == bytes.len() {
        return Next::End;
    }
    if bytes.len() - start < 8 {
        return Next::Damage { offset: start, reaches_end: true, why: "record header cut short" };
    }
    let length = u32::from_le_bytes(bytes[start..start + 4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[start + 4..start + 8].try_into().expect("4 bytes"));
    if length > MAX_RECORD_BYTES {
        return Next::Damage { offset: start, reaches_end: false, why: "impossible record length" };
    }
    let end = start + 8 + length as usize;
    if end > bytes.len() {
        return Next::Damage { offset: start, reaches_end: true, why: "record cut short" };
    }
    let payload = &bytes[start + 8..end];
    if crc32c::crc32c(payload) != crc {
        return Next::Damage { offset: start, reaches_end: end == bytes.len(), why: "checksum mismatch" };
    }
    *offset = end;
    Next::Record(payload)
}

/// Entries per decoded batch, and batches queued between the decoding and applying threads.
const DECODE_BATCH: usize = 1_024;
const DECODE_QUEUE_BATCHES: usize = 8;

enum Decoded {
    Batch(Vec<JournalEntry>),
    /// A record whose checksum held but whose content is not an entry.
    Unreadable(usize),
    Damage {
        offset: usize,
        reaches_end: bool,
        why: &'static str,
    },
}

/// Decodes the records of a segment from `offset` on, in batches; stops at damage.
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
            Next::Damage { offset, reaches_end, why } => Some(Decoded::Damage { offset, reaches_end, why }),
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

/// Options of a recovery.
pub struct RecoverOptions {
    /// Cut a torn tail from the file (the service does; `esim replay` only reports).
    pub repair: bool,
    /// Stop before the first entry later than this time (`esim replay --until`).
    pub until: Option<Millis>,
}

fn entry_time(entry: &JournalEntry) -> Millis {
    match entry {
        JournalEntry::Command { at, .. } | JournalEntry::Tick { at } => *at,
    }
}

/// Rebuilds the state of a data dir: the newest snapshot, then the journal after it.
pub fn recover(data_dir: &Path, options: &RecoverOptions) -> Result<Recovery, JournalError> {
    let mut recovery =
        Recovery { engine: None, header: None, next_index: 0, replayed: 0, from_snapshot: 0, repaired: Vec::new() };
    let snapshots = list(&data_dir.join("snapshots"), "snap")?;
    if let Some((covered, path)) = snapshots.last() {
        let bytes = fs::read(path).map_err(|e| io_error(path, e))?;
        let payload = (bytes.len() >= 8 && &bytes[..8] == SNAPSHOT_MAGIC)
            .then(|| {
                let mut offset = 8;
                match next_record(&bytes, &mut offset) {
                    Next::Record(payload) => Some(payload),
                    _ => None,
                }
            })
            .flatten()
            .ok_or_else(|| JournalError(format!("snapshot {} is damaged; refusing to start", path.display())))?;
        let snapshot: Snapshot = serde_json::from_slice(payload)
            .map_err(|e| JournalError(format!("snapshot {} cannot be read: {e}", path.display())))?;
        if options.until.is_some_and(|until| snapshot.engine.now() > until) {
            return Err(JournalError(format!(
                "--until is before the newest snapshot ({}); the journal before it was compacted",
                snapshot.engine.now()
            )));
        }
        debug_assert_eq!(*covered, snapshot.covered_entries);
        recovery.engine = Some(snapshot.engine);
        recovery.header = Some(snapshot.header);
        recovery.next_index = snapshot.covered_entries;
        recovery.from_snapshot = snapshot.covered_entries;
    }
    let segments = list(&data_dir.join("journal"), "seg")?;
    let last = segments.len().saturating_sub(1);
    'segments: for (position, (first_index, path)) in segments.iter().enumerate() {
        let bytes = fs::read(path).map_err(|e| io_error(path, e))?;
        let damage = |offset: usize, why: &str| {
            JournalError(format!(
                "journal damaged in {} at byte offset {offset} ({why}); refusing to start",
                path.display()
            ))
        };
        if bytes.len() < 8 || &bytes[..8] != SEGMENT_MAGIC {
            if position == last && bytes.len() < 8 && SEGMENT_MAGIC.starts_with(&bytes) {
                // A crash while creating the segment: nothing in it was acknowledged.
                if options.repair {
                    fs::remove_file(path).map_err(|e| io_error(path, e))?;
                }
                recovery.repaired.push(format!("removed the empty segment {}", path.display()));
                continue;
            }
            return Err(damage(0, "bad magic"));
        }
        let mut offset = 8;
        let header: SegmentHeader = match next_record(&bytes, &mut offset) {
            Next::Record(payload) => serde_json::from_slice(payload).map_err(|_| damage(8, "unreadable header"))?,
            Next::Damage { reaches_end: true, .. } | Next::End if position == last => {
                if options.repair {
                    fs::remove_file(path).map_err(|e| io_error(path, e))?;
                }
                recovery.repaired.push(format!("removed the segment {} torn in its header", path.display()));
                continue;
            }
            Next::Damage { offset, why, .. } => return Err(damage(offset, why)),
            Next::End => return Err(damage(8, "missing header")),
        };
        if header.version != FORMAT_VERSION {
            return Err(damage(8, &format!("format version {}, this build reads {FORMAT_VERSION}", header.version)));
        }
        if header.first_index != *first_index {
            return Err(damage(8, "header index does not match the file name"));
        }
        if header.first_index > recovery.next_index {
            return Err(JournalError(format!(
                "journal gap: {} starts at entry {} but entries up to {} are missing; refusing to start",
                path.display(),
                header.first_index,
                recovery.next_index
            )));
        }
        let engine = recovery.engine.get_or_insert_with(|| Engine::new(header.config.clone(), header.start));
        recovery.header.get_or_insert(header.clone());
        // Decoding runs on a second thread while this one applies: the two halves of
        // the work take about as long, so recovery runs near twice as fast on 2 cores.
        let mut stop_all = false;
        let outcome: Result<(), JournalError> = std::thread::scope(|scope| {
            let (batches, decoded) = std::sync::mpsc::sync_channel::<Decoded>(DECODE_QUEUE_BATCHES);
            let bytes = &bytes;
            scope.spawn(move || decode_records(bytes, offset, batches));
            let mut index = header.first_index;
            for message in decoded {
                match message {
                    Decoded::Batch(entries) => {
                        for entry in entries {
                            if index >= recovery.next_index {
                                if options.until.is_some_and(|until| entry_time(&entry) > until) {
                                    stop_all = true;
                                    return Ok(());
                                }
                                entry.replay(engine);
                                recovery.next_index += 1;
                                recovery.replayed += 1;
                            }
                            index += 1;
                        }
                    }
                    Decoded::Unreadable(at) => return Err(damage(at, "unreadable entry")),
                    Decoded::Damage { offset: at, reaches_end: true, why } if position == last => {
                        if options.repair {
                            let file = OpenOptions::new().write(true).open(path).map_err(|e| io_error(path, e))?;
                            file.set_len(at as u64).map_err(|e| io_error(path, e))?;
                            file.sync_all().map_err(|e| io_error(path, e))?;
                        }
                        recovery.repaired.push(format!(
                            "cut a torn tail of {} bytes from {} at offset {at} ({why})",
                            bytes.len() - at,
                            path.display()
                        ));
                        return Ok(());
                    }
                    Decoded::Damage { offset, why, .. } => return Err(damage(offset, why)),
                }
            }
            Ok(())
        });
        outcome?;
        if stop_all {
            break 'segments;
        }
    }
    Ok(recovery)
}

/// The journal the service appends to.
pub struct FileJournal {
    dir: PathBuf,
    header: SegmentHeader,
    writer: BufWriter<File>,
    next_index: u64,
    segment_bytes: u64,
    entries_since_snapshot: u64,
    policy: SnapshotPolicy,
    /// A write failed: the current segment may end in a partial record, so the next
    /// append starts a fresh segment (after the state was reloaded from disk).
    broken: bool,
    scratch: Vec<u8>,
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
        Next::Damage { offset, why, .. } => return Err(damage(offset, why)),
        Next::End => return Err(damage(8, "missing header")),
    };
    if header.version != FORMAT_VERSION {
        return Err(damage(8, &format!("format version {}, this build reads {FORMAT_VERSION}", header.version)));
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
            Next::Damage { offset, why, .. } => return Err(damage(offset, why)),
        }
    }
}

/// Creates a segment file with its magic and header, durably.
fn new_segment(dir: &Path, header: &SegmentHeader) -> io::Result<(BufWriter<File>, u64)> {
    let path = dir.join("journal").join(format!("{:020}.seg", header.first_index));
    let file = OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
    let bytes = segment_start(header);
    let mut writer = BufWriter::with_capacity(1 << 20, file);
    writer.write_all(&bytes)?;
    writer.flush()?;
    writer.get_ref().sync_all()?;
    sync_dir(&dir.join("journal"))?;
    Ok((writer, bytes.len() as u64))
}

impl FileJournal {
    /// Opens the journal for appending: always a new segment starting at
    /// `header.first_index` (the recovered entry count).
    pub fn open(data_dir: &Path, header: SegmentHeader, policy: SnapshotPolicy) -> io::Result<FileJournal> {
        let dir = data_dir.to_path_buf();
        fs::create_dir_all(dir.join("journal"))?;
        fs::create_dir_all(dir.join("snapshots"))?;
        let (writer, segment_bytes) = new_segment(&dir, &header)?;
        Ok(FileJournal {
            next_index: header.first_index,
            dir,
            header,
            writer,
            segment_bytes,
            entries_since_snapshot: 0,
            policy,
            broken: false,
            scratch: Vec::new(),
        })
    }

    fn start_segment(&mut self) -> io::Result<()> {
        self.header.first_index = self.next_index;
        let (writer, bytes) = new_segment(&self.dir, &self.header)?;
        self.writer = writer;
        self.segment_bytes = bytes;
        Ok(())
    }

    /// Appends entries and makes them durable (one sync for all of them).
    pub fn append_entries(&mut self, entries: &[JournalEntry]) -> io::Result<()> {
        if self.broken {
            self.start_segment()?;
            self.broken = false;
        }
        self.scratch.clear();
        encode_entries(entries, &mut self.scratch);
        let written = self
            .writer
            .write_all(&self.scratch)
            .and_then(|_| self.writer.flush())
            .and_then(|_| self.writer.get_ref().sync_data());
        if let Err(error) = written {
            self.broken = true;
            return Err(error);
        }
        self.segment_bytes += self.scratch.len() as u64;
        self.next_index += entries.len() as u64;
        self.entries_since_snapshot += entries.len() as u64;
        Ok(())
    }

    /// After a failed append: the durable state, read back from disk (what was not
    /// journaled is dropped, so nothing unacknowledged survives half-applied).
    pub fn reload(&mut self) -> Result<Engine, JournalError> {
        let recovery = recover(&self.dir, &RecoverOptions { repair: true, until: None })?;
        self.next_index = recovery.next_index;
        self.broken = true;
        recovery.engine.ok_or_else(|| JournalError("the data dir lost its journal".into()))
    }

    pub fn snapshot_due(&self) -> bool {
        self.entries_since_snapshot >= self.policy.every_entries || self.segment_bytes >= self.policy.every_bytes
    }

    /// Writes a snapshot of `engine` (which has applied every appended entry) atomically
    /// (temporary file, sync, rename, sync of the directory), starts a new segment, and
    /// removes the segments and snapshots it covers.
    pub fn write_snapshot(&mut self, engine: &Engine) -> io::Result<()> {
        let snapshots = self.dir.join("snapshots");
        let snapshot = SnapshotRef { covered_entries: self.next_index, header: &self.header, engine };
        let mut bytes = SNAPSHOT_MAGIC.to_vec();
        encode_record(&serde_json::to_vec(&snapshot).map_err(io::Error::other)?, &mut bytes);
        let final_path = snapshots.join(format!("{:020}.snap", self.next_index));
        let temporary = snapshots.join(format!("{:020}.snap.tmp", self.next_index));
        {
            let mut file = File::create(&temporary)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
        }
        fs::rename(&temporary, &final_path)?;
        sync_dir(&snapshots)?;
        self.entries_since_snapshot = 0;
        self.start_segment()?;
        for (first, path) in list(&self.dir.join("journal"), "seg").map_err(|e| io::Error::other(e.0))? {
            if first < self.next_index {
                fs::remove_file(path)?;
            }
        }
        for (covered, path) in list(&snapshots, "snap").map_err(|e| io::Error::other(e.0))? {
            if covered < self.next_index {
                fs::remove_file(path)?;
            }
        }
        sync_dir(&self.dir.join("journal"))?;
        sync_dir(&snapshots)
    }

    pub fn next_index(&self) -> u64 {
        self.next_index
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
