//! Journal recovery: torn tails are cut, damage before the tail refuses to start, and a
//! snapshot plus the journal after it rebuild the exact state.

use esim_api::{ClockMode, Service};
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, ResellerOp, ResellerRequest};
use esim_store::journal::{recover, FileJournal, RecoverOptions, SegmentHeader, SnapshotPolicy};
use esim_store::sink::JournalSink;
use rust_decimal::Decimal;
use std::fs;
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("esim-journal-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `steps` journaled commands against a service writing to `dir`; returns the
/// engine's digest after every step.
fn run(dir: &Path, steps: usize, policy: SnapshotPolicy) -> Vec<String> {
    let config = EngineConfig { seed: 3, ..EngineConfig::default() };
    let header = SegmentHeader {
        version: esim_store::journal::FORMAT_VERSION,
        config: config.clone(),
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    };
    let mut journal = FileJournal::open(dir, header, policy).unwrap();
    let mut service = Service::new(
        Engine::new(config, Millis::VIRTUAL_EPOCH),
        "t".into(),
        ClockMode::Virtual,
        esim_api::secrets::Secrets::seeded(1),
    );
    let mut now = Millis::VIRTUAL_EPOCH;
    let mut digests = Vec::new();
    let created = service.apply_command(
        now,
        Command::Admin(AdminOp::CreateAccount {
            contact_email: "a@b.c".into(),
            company_name: None,
            api_key_digest: Default::default(),
            api_key_prefix: String::new(),
        }),
    );
    let Ok(esim_engine::Reply::AccountCreated(account)) = created else { panic!() };
    journal.append(&service.drain_journal()).unwrap();
    for step in 0..steps {
        now = now.plus_ms(2_000);
        let command = match step % 3 {
            0 => {
                Command::Admin(AdminOp::TopUp { account_id: account.account_id.clone(), amount_usd: Decimal::from(10) })
            }
            1 => Command::Reseller(ResellerRequest {
                key_digest: esim_engine::KeyDigest::of(&account.api_key),
                idempotency_key: None,
                op: ResellerOp::Provision { end_user_reference: None, label: Some(format!("n{step}")), group_id: None },
            }),
            _ => Command::Reseller(ResellerRequest {
                key_digest: esim_engine::KeyDigest::of(&account.api_key),
                idempotency_key: None,
                op: ResellerOp::CreateWebhook {
                    url: "https://h.example".into(),
                    events: vec!["*".into()],
                    signing_secret: esim_engine::SealedSecret(vec![1, 2, 3]),
                },
            }),
        };
        let _ = service.apply_command(now, command);
        journal.append(&service.drain_journal()).unwrap();
        // A due snapshot is made by replay on its own thread (decision 160); waiting for
        // it here makes the run the same on any machine: each one is written and has
        // removed what it covers before the next append (on a busy machine one still
        // running skipped the next due one, and a close cancelled the last).
        if let Some(Err(why)) = journal.wait_for_snapshot() {
            panic!("a snapshot was not written: {why}");
        }
        while service.poll_effect().is_some() {}
        digests.push(service.engine().state_digest());
    }
    digests
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    found.sort();
    found
}

fn recovered_digest(dir: &Path, repair: bool) -> Result<(String, esim_store::journal::Recovery), String> {
    let recovery = recover(dir, &RecoverOptions { repair, until: None }).map_err(|e| e.0)?;
    let digest = recovery.engine.as_ref().unwrap().state_digest();
    Ok((digest, recovery))
}

#[test]
fn a_clean_journal_rebuilds_the_exact_state() {
    let dir = temp_dir("clean");
    let digests = run(&dir, 30, SnapshotPolicy::default());
    let (digest, recovery) = recovered_digest(&dir, true).unwrap();
    assert_eq!(&digest, digests.last().unwrap());
    assert_eq!(recovery.next_index, 31);
    assert!(recovery.repaired.is_empty());
}

#[test]
fn a_torn_tail_is_cut_and_logged_never_misread() {
    let dir = temp_dir("torn");
    let digests = run(&dir, 30, SnapshotPolicy::default());
    let segment = segments(&dir).pop().unwrap();
    let length = fs::metadata(&segment).unwrap().len();
    // Cut the last record in half: a crash mid-write.
    let file = fs::OpenOptions::new().write(true).open(&segment).unwrap();
    file.set_len(length - 20).unwrap();
    let (digest, recovery) = recovered_digest(&dir, true).unwrap();
    assert_eq!(&digest, &digests[digests.len() - 2], "the state before the torn entry");
    assert_eq!(recovery.repaired.len(), 1, "{:?}", recovery.repaired);
    assert!(recovery.repaired[0].contains("torn tail"));
    // The cut is durable: a second recovery finds nothing to repair.
    let (again, recovery) = recovered_digest(&dir, true).unwrap();
    assert_eq!(again, digest);
    assert!(recovery.repaired.is_empty());
}

#[test]
fn a_flipped_byte_in_the_middle_refuses_to_start_naming_the_offset() {
    let dir = temp_dir("flip");
    run(&dir, 30, SnapshotPolicy::default());
    let segment = segments(&dir).pop().unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::write(&segment, &bytes).unwrap();
    let error = recovered_digest(&dir, true).err().expect("refused");
    assert!(error.contains("byte offset"), "{error}");
    assert!(error.contains("refusing to start"), "{error}");
    assert_eq!(fs::read(&segment).unwrap(), bytes, "nothing was cut");
}

/// The first entry index in a segment's or snapshot's file name.
fn number(path: &Path) -> u64 {
    path.file_stem().unwrap().to_str().unwrap().parse().unwrap()
}

#[test]
fn a_snapshot_plus_the_journal_after_it_recovers_and_old_segments_are_removed() {
    let dir = temp_dir("snapshot");
    let digests = run(&dir, 50, SnapshotPolicy { every_entries: 16, every_bytes: u64::MAX });
    let mut snapshots: Vec<u64> =
        fs::read_dir(dir.join("snapshots")).unwrap().map(|e| number(&e.unwrap().path())).collect();
    snapshots.sort();
    assert_eq!(snapshots.len(), 2, "older snapshots are removed, the previous one is kept: {snapshots:?}");
    let kept: Vec<u64> = segments(&dir).iter().map(|p| number(p)).collect();
    assert_eq!(kept[0], snapshots[0], "the segments since the previous snapshot are kept, none before: {kept:?}");
    assert!(kept.len() <= 3, "covered segments are removed: {kept:?}");
    let (digest, recovery) = recovered_digest(&dir, true).unwrap();
    assert_eq!(&digest, digests.last().unwrap());
    assert!(recovery.from_snapshot >= 48, "{}", recovery.from_snapshot);
    assert_eq!(recovery.next_index, 51);
}

#[test]
fn a_segment_in_memory_is_the_file_byte_for_byte_and_replays_strictly() {
    use esim_store::journal::{replay_segment, SegmentBuffer, FORMAT_VERSION};
    let dir = temp_dir("memory");
    let config = EngineConfig { seed: 5, ..EngineConfig::default() };
    let header = SegmentHeader {
        version: FORMAT_VERSION,
        config: config.clone(),
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    };
    let policy = SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX };
    let mut file = FileJournal::open(&dir, header.clone(), policy).unwrap();
    let mut memory = SegmentBuffer::new(&header);
    let mut service = Service::new(
        Engine::new(config, Millis::VIRTUAL_EPOCH),
        "t".into(),
        ClockMode::Virtual,
        esim_api::secrets::Secrets::seeded(1),
    );
    let mut now = Millis::VIRTUAL_EPOCH;
    let created = service.apply_command(
        now,
        Command::Admin(AdminOp::CreateAccount {
            contact_email: "a@b.c".into(),
            company_name: None,
            api_key_digest: Default::default(),
            api_key_prefix: String::new(),
        }),
    );
    let Ok(esim_engine::Reply::AccountCreated(account)) = created else { panic!() };
    for step in 0..20 {
        now = now.plus_ms(90_000);
        let _ = service.apply_command(
            now,
            Command::Admin(AdminOp::TopUp { account_id: account.account_id.clone(), amount_usd: Decimal::from(step) }),
        );
        let entries = service.drain_journal();
        file.append(&entries).unwrap();
        memory.append(&entries);
    }
    let on_disk = fs::read(&segments(&dir)[0]).unwrap();
    assert_eq!(on_disk, memory.bytes(), "the same format in memory and on disk");
    let (engine, read_header, entries) = replay_segment(memory.bytes()).unwrap();
    assert_eq!((read_header, entries), (header, 21), "the account and 20 top-ups");
    assert_eq!(engine.state_digest(), service.engine().state_digest());
    // No torn tail is tolerated in memory: the caller holds the whole segment.
    let error = replay_segment(&on_disk[..on_disk.len() - 3]).err().unwrap().0;
    assert!(error.contains("record cut short"), "{error}");
    let mut flipped = on_disk.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    let error = replay_segment(&flipped).err().unwrap().0;
    assert!(error.contains("byte offset") && error.contains("checksum mismatch"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}
