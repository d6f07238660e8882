//! Shared by the journal tests: data dirs, a command workload, and a fault-injecting
//! [`SegmentFile`] for `FileJournal::open_with`.

#![allow(dead_code)]

use esim_api::{ClockMode, JournalEntry, Service};
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, ResellerOp, ResellerRequest};
use esim_store::journal::{SegmentFile, SegmentHeader, FORMAT_VERSION};
use rust_decimal::Decimal;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub const ENOSPC: i32 = 28;
pub const EIO: i32 = 5;

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("esim-journal-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn config(seed: u64) -> EngineConfig {
    EngineConfig { seed, ..EngineConfig::default() }
}

pub fn header(seed: u64) -> SegmentHeader {
    SegmentHeader {
        version: FORMAT_VERSION,
        config: config(seed),
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    }
}

/// A service producing journal entries: an account, then top-ups and provisions.
pub struct Workload {
    pub service: Service,
    pub now: Millis,
    account_id: String,
    api_key: String,
    step: u64,
}

impl Workload {
    /// The workload and the entries that create its account.
    pub fn new(seed: u64) -> (Workload, Vec<JournalEntry>) {
        let mut service = Service::new(
            Engine::new(config(seed), Millis::VIRTUAL_EPOCH),
            "t".into(),
            ClockMode::Virtual,
            esim_api::secrets::Secrets::seeded(1),
        );
        let now = Millis::VIRTUAL_EPOCH;
        let created = service.apply_command(
            now,
            Command::Admin(AdminOp::CreateAccount {
                contact_email: "a@b.c".into(),
                company_name: None,
                api_key_digest: Default::default(),
                api_key_prefix: String::new(),
            }),
        );
        let Ok(esim_engine::Reply::AccountCreated(account)) = created else { panic!("account") };
        let entries = service.drain_journal();
        let workload = Workload { service, now, account_id: account.account_id, api_key: account.api_key, step: 0 };
        (workload, entries)
    }

    /// `n` more commands; their journal entries.
    pub fn batch(&mut self, n: usize) -> Vec<JournalEntry> {
        for _ in 0..n {
            self.step += 1;
            self.now = self.now.plus_ms(1_000);
            let command = if self.step.is_multiple_of(4) {
                Command::Reseller(ResellerRequest {
                    key_digest: esim_engine::KeyDigest::of(&self.api_key),
                    idempotency_key: None,
                    op: ResellerOp::Provision {
                        end_user_reference: None,
                        label: Some(format!("n{}", self.step)),
                        group_id: None,
                    },
                })
            } else {
                Command::Admin(AdminOp::TopUp {
                    account_id: self.account_id.clone(),
                    amount_usd: Decimal::from(self.step % 97 + 1),
                })
            };
            let _ = self.service.apply_command(self.now, command);
            while self.service.poll_effect().is_some() {}
            while self.service.poll_event().is_some() {}
        }
        self.service.drain_journal()
    }
}

/// An engine that applied exactly `entries`.
pub fn apply(engine: &mut Engine, entries: &[JournalEntry]) {
    for entry in entries {
        entry.clone().replay(engine);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Write { path: PathBuf, offset: u64, len: usize },
    Sync { path: PathBuf },
    SetLen { path: PathBuf, len: u64 },
}

/// Faults to inject: each counter fails that many next calls.
#[derive(Default)]
pub struct Faults {
    /// Fail the next writes with ENOSPC after writing `torn_prefix` bytes of each.
    pub fail_writes: u32,
    pub torn_prefix: usize,
    /// Fail the next syncs with EIO (after the bytes were written).
    pub fail_syncs: u32,
    /// Fail the next cuts with EIO.
    pub fail_set_len: u32,
    /// Only files whose name ends so are faulted (empty: every file).
    pub only_suffix: String,
    pub events: Vec<Event>,
}

pub type SharedFaults = Arc<Mutex<Faults>>;

/// A real file with faults injected before its calls.
pub struct Faulty {
    file: File,
    path: PathBuf,
    faults: SharedFaults,
}

impl Faulty {
    fn faulted(&self, faults: &Faults) -> bool {
        faults.only_suffix.is_empty() || self.path.to_string_lossy().ends_with(&faults.only_suffix)
    }
}

impl SegmentFile for Faulty {
    fn write_all_at(&mut self, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut faults = self.faults.lock().unwrap();
        faults.events.push(Event::Write { path: self.path.clone(), offset, len: bytes.len() });
        if faults.fail_writes > 0 && self.faulted(&faults) {
            faults.fail_writes -= 1;
            let prefix = faults.torn_prefix.min(bytes.len());
            std::os::unix::fs::FileExt::write_all_at(&self.file, &bytes[..prefix], offset)?;
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        std::os::unix::fs::FileExt::write_all_at(&self.file, bytes, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut faults = self.faults.lock().unwrap();
        faults.events.push(Event::Sync { path: self.path.clone() });
        if faults.fail_syncs > 0 && self.faulted(&faults) {
            faults.fail_syncs -= 1;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.file.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut faults = self.faults.lock().unwrap();
        faults.events.push(Event::SetLen { path: self.path.clone(), len });
        if faults.fail_set_len > 0 && self.faulted(&faults) {
            faults.fail_set_len -= 1;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        self.file.set_len(len)
    }
}

/// An opener for `FileJournal::open_with` whose files share `faults`.
pub fn faulty_opener(faults: SharedFaults) -> impl FnMut(&Path) -> io::Result<Box<dyn SegmentFile>> + Send + 'static {
    move |path: &Path| {
        let file = esim_store::journal::create_private_file(path)?;
        Ok(Box::new(Faulty { file, path: path.to_path_buf(), faults: faults.clone() }) as Box<dyn SegmentFile>)
    }
}

/// The segment files of a data dir, sorted.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    found.sort();
    found
}

/// Offsets of the records of a segment (the header record first).
pub fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut offset = 8;
    while offset + 8 <= bytes.len() {
        offsets.push(offset);
        let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        offset += 8 + length;
    }
    offsets
}

/// Deterministic pseudo-random bytes.
pub fn garbage(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}
