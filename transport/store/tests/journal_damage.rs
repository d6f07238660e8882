//! Torn tail versus damage, by rule: a bad record at the end of the last segment is a
//! torn tail only if at most TORN_TAIL_MAX_BYTES follow it and no valid entry starts
//! after it; anything else refuses to start naming the file and offset. Also: format
//! version refusal, file modes, and reading a live data dir.

mod journal_support;
use esim_store::journal::{
    encode_record, recover, FileJournal, RecoverOptions, Recovery, SnapshotPolicy, FORMAT_VERSION, TORN_TAIL_MAX_BYTES,
};
use journal_support::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const NO_SNAPSHOT: SnapshotPolicy = SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX };

/// A data dir with one segment of `entries` entries (one append each); its digest.
fn journal_of(dir: &Path, entries: usize) -> String {
    let mut journal = FileJournal::open(dir, header(21), NO_SNAPSHOT).unwrap();
    let (mut work, first) = Workload::new(21);
    journal.append_entries(&first).unwrap();
    for _ in 1..entries {
        journal.append_entries(&work.batch(1)).unwrap();
    }
    work.service.engine().state_digest()
}

fn try_recover(dir: &Path, repair: bool) -> Result<Recovery, String> {
    recover(dir, &RecoverOptions { repair, until: None }).map_err(|e| e.0)
}

fn only_segment(dir: &Path) -> PathBuf {
    let found = segments(dir);
    assert_eq!(found.len(), 1);
    found[0].clone()
}

#[test]
fn a_corrupted_length_in_the_middle_of_the_last_segment_refuses_with_its_offset() {
    let dir = temp_dir("length");
    journal_of(&dir, 300);
    let segment = only_segment(&dir);
    let mut bytes = fs::read(&segment).unwrap();
    let offsets = record_offsets(&bytes);
    assert_eq!(offsets.len(), 301, "the header and 300 entries");
    let target = offsets[151];
    // The high byte of the length: the record now claims to run past the end of the file
    // (what the old rule took for a torn tail, silently cutting 150 entries).
    bytes[target + 3] ^= 0x01;
    fs::write(&segment, &bytes).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains(&format!("at byte offset {target} ")), "{error}");
    assert!(error.contains(&segment.display().to_string()), "{error}");
    assert!(error.contains("not a torn tail") && error.contains("refusing to start"), "{error}");
    assert_eq!(fs::read(&segment).unwrap(), bytes, "nothing was cut");
    // `esim replay` (no repair) refuses too.
    assert!(try_recover(&dir, false).is_err());
    println!("{error}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn zeros_at_the_end_are_a_torn_tail_not_empty_records() {
    let dir = temp_dir("zeros");
    let digest = journal_of(&dir, 40);
    let segment = only_segment(&dir);
    let length = fs::metadata(&segment).unwrap().len();
    // A file extended by a crash: 1 MiB of zeros after the last record.
    fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(length + (1 << 20)).unwrap();
    let recovery = try_recover(&dir, false).unwrap();
    assert_eq!(recovery.next_index, 40);
    assert!(recovery.repaired[0].contains("torn tail of 1048576 bytes"), "{:?}", recovery.repaired);
    assert!(recovery.repaired[0].contains("zero record length"), "{:?}", recovery.repaired);
    assert_eq!(fs::metadata(&segment).unwrap().len(), length + (1 << 20), "replay only reports");
    let recovery = try_recover(&dir, true).unwrap();
    assert_eq!(recovery.engine.unwrap().state_digest(), digest);
    assert_eq!(fs::metadata(&segment).unwrap().len(), length, "cut back");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_tail_larger_than_the_limit_is_damage() {
    for (name, zeros) in [("garbage", false), ("zeros-big", true)] {
        let dir = temp_dir(name);
        journal_of(&dir, 20);
        let segment = only_segment(&dir);
        let length = fs::metadata(&segment).unwrap().len();
        let tail = TORN_TAIL_MAX_BYTES as usize + 4096;
        let bytes = if zeros { vec![0; tail] } else { garbage(tail, 0x9e37_79b9_7f4a_7c15) };
        fs::OpenOptions::new().append(true).open(&segment).unwrap().write_all(&bytes).unwrap();
        let error = try_recover(&dir, true).err().expect("refused");
        assert!(error.contains(&format!("at byte offset {length} ")), "{error}");
        assert!(error.contains("more than the 16777216"), "{error}");
        assert_eq!(fs::metadata(&segment).unwrap().len(), length + tail as u64, "nothing was cut");
        // The same bytes under the limit are a torn tail.
        fs::OpenOptions::new().write(true).open(&segment).unwrap().set_len(length + 65536).unwrap();
        let recovery = try_recover(&dir, true).unwrap();
        assert_eq!(recovery.next_index, 20, "{name}");
        assert_eq!(fs::metadata(&segment).unwrap().len(), length);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_bad_record_followed_by_a_valid_one_is_damage() {
    let dir = temp_dir("followed");
    journal_of(&dir, 30);
    let segment = only_segment(&dir);
    let mut bytes = fs::read(&segment).unwrap();
    let offsets = record_offsets(&bytes);
    // A flipped payload byte in the second-to-last entry; the last one is intact.
    let target = offsets[offsets.len() - 2];
    bytes[target + 12] ^= 0x40;
    fs::write(&segment, &bytes).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    let last = offsets[offsets.len() - 1];
    assert!(error.contains(&format!("at byte offset {target} (checksum mismatch")), "{error}");
    assert!(error.contains(&format!("a valid entry follows at byte offset {last}")), "{error}");
    // The last record alone damaged is a torn tail (nothing valid after it).
    let mut bytes = fs::read(&segment).unwrap();
    bytes[target + 12] ^= 0x40;
    bytes[last + 12] ^= 0x40;
    fs::write(&segment, &bytes).unwrap();
    assert_eq!(try_recover(&dir, true).unwrap().next_index, 29);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_journal_of_another_format_version_is_refused_naming_both() {
    let dir = temp_dir("version");
    journal_of(&dir, 5);
    let segment = only_segment(&dir);
    let bytes = fs::read(&segment).unwrap();
    let offsets = record_offsets(&bytes);
    for (version, expected) in [
        (1, "format 1 journals hold plaintext API keys"),
        (2, "every id came from one random stream"),
        (FORMAT_VERSION + 1, "newer than this build"),
    ] {
        let mut old = header(21);
        old.version = version;
        let mut rewritten = b"ESIMJRN1".to_vec();
        encode_record(&serde_json::to_vec(&old).unwrap(), &mut rewritten);
        rewritten.extend_from_slice(&bytes[offsets[1]..]);
        fs::write(&segment, &rewritten).unwrap();
        let error = try_recover(&dir, true).err().expect("refused");
        assert!(error.contains(&format!("written by journal format version {version}")), "{error}");
        assert!(error.contains(&format!("reads only version {FORMAT_VERSION}")), "{error}");
        assert!(error.contains(expected), "{error}");
        assert_eq!(fs::read(&segment).unwrap(), rewritten, "nothing was changed");
    }
    // A snapshot of version 1.
    fs::write(&segment, &bytes).unwrap();
    let engine = esim_engine::Engine::new(config(21), esim_engine::Millis::VIRTUAL_EPOCH);
    let mut old = header(21);
    old.version = 1;
    let snapshot = serde_json::json!({"covered_entries": 5, "header": old, "engine": engine});
    let mut snap = b"ESIMSNP1".to_vec();
    encode_record(&serde_json::to_vec(&snapshot).unwrap(), &mut snap);
    fs::write(dir.join("snapshots").join(format!("{:020}.snap", 5)), &snap).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains("written by journal format version 1") && error.contains("docs/decisions.md"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn every_file_is_0600_and_the_dirs_0700() {
    let dir = temp_dir("modes");
    // A pre-existing loose directory and temporary file do not keep their modes.
    fs::create_dir_all(dir.join("journal")).unwrap();
    fs::set_permissions(dir.join("journal"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("journal").join("00000000000000000000.seg.tmp"), b"x").unwrap();
    let policy = SnapshotPolicy { every_entries: 10, every_bytes: u64::MAX };
    let mut journal = FileJournal::open(&dir, header(22), policy).unwrap();
    let (mut work, first) = Workload::new(22);
    journal.append_entries(&first).unwrap();
    let batch = work.batch(12);
    journal.append_entries(&batch).unwrap();
    journal.write_snapshot(work.service.engine()).unwrap();
    let lock = esim_store::lock::DataDirLock::acquire(&dir).unwrap();
    assert_eq!(mode(&dir.join("journal")), 0o700);
    assert_eq!(mode(&dir.join("snapshots")), 0o700);
    let mut files: Vec<PathBuf> = Vec::new();
    for sub in ["journal", "snapshots"] {
        files.extend(fs::read_dir(dir.join(sub)).unwrap().map(|e| e.unwrap().path()));
    }
    files.push(lock.path().to_path_buf());
    assert!(files.len() >= 3, "{files:?}");
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
        assert!(file.extension().is_none_or(|e| e != "tmp"), "stray {}", file.display());
    }
    drop(lock);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_data_dir_lock_is_exclusive_and_names_its_holder() {
    use esim_store::lock::{DataDirLock, LockError};
    let dir = temp_dir("lock");
    assert_eq!(DataDirLock::holder(&dir), None, "no lock file: no holder");
    assert!(!dir.join("lock").exists(), "holder() creates nothing");
    let held = DataDirLock::acquire(&dir).unwrap();
    let me = std::process::id();
    assert_eq!(fs::read_to_string(held.path()).unwrap().trim(), me.to_string());
    // flock: a second open description conflicts, even inside one process.
    assert_eq!(DataDirLock::holder(&dir), Some(me));
    match DataDirLock::acquire(&dir) {
        Err(error @ LockError::Held { pid: Some(pid), .. }) => {
            assert_eq!(pid, me);
            assert!(error.to_string().contains(&format!("pid {me}")), "{error}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    drop(held);
    assert_eq!(DataDirLock::holder(&dir), None);
    let again = DataDirLock::acquire(&dir).unwrap();
    drop(again);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reading_a_live_data_dir_while_it_compacts_never_fails() {
    let dir = temp_dir("live");
    let policy = SnapshotPolicy { every_entries: 30, every_bytes: u64::MAX };
    let mut journal = FileJournal::open(&dir, header(23), policy).unwrap();
    let (mut work, first) = Workload::new(23);
    journal.append_entries(&first).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut reads, mut torn) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let recovery = try_recover(&dir, false).unwrap_or_else(|e| panic!("read {reads}: {e}"));
                torn += recovery.repaired.len();
                reads += 1;
            }
            (reads, torn)
        })
    };
    let started = std::time::Instant::now();
    let mut snapshots = 0;
    while started.elapsed() < std::time::Duration::from_millis(1500) {
        journal.append_entries(&work.batch(3)).unwrap();
        if journal.snapshot_due() {
            journal.write_snapshot(work.service.engine()).unwrap();
            snapshots += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (reads, torn) = reader.join().unwrap();
    println!("{reads} reads of a live dir during {snapshots} compactions, {torn} torn tails reported");
    assert!(snapshots >= 5 && reads >= 5, "{snapshots} snapshots, {reads} reads");
    fs::remove_dir_all(&dir).unwrap();
}

/// A data dir of three segments, as three starts of the service make it (each start
/// opens a segment where the journal ends): 10, 20 and 30 entries. Returns the segments
/// and the digest after each.
fn three_segments(dir: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let (mut work, first) = Workload::new(25);
    let mut journal = FileJournal::open(dir, header(25), NO_SNAPSHOT).unwrap();
    journal.append_entries(&first).unwrap();
    let mut digests = Vec::new();
    for (round, entries) in [(0, 9), (1, 20), (2, 30)] {
        if round > 0 {
            drop(journal);
            let recovery = try_recover(dir, true).unwrap();
            let mut next = recovery.header.unwrap();
            next.first_index = recovery.next_index;
            journal = FileJournal::open(dir, next, NO_SNAPSHOT).unwrap();
        }
        for _ in 0..entries {
            journal.append_entries(&work.batch(1)).unwrap();
        }
        digests.push(work.service.engine().state_digest());
    }
    drop(journal);
    let found = segments(dir);
    assert_eq!(found.len(), 3, "{found:?}");
    (found, digests)
}

fn seg(dir: &Path, first: u64) -> PathBuf {
    dir.join("journal").join(format!("{first:020}.seg"))
}

/// Issue 35: the newest segment deleted was silent (the start took the journal before
/// it for all there was). Now the manifest names it: the start refuses, naming the file
/// and the entries, and repair cuts there, saying it drops nothing it can count.
#[test]
fn a_deleted_newest_segment_refuses_naming_it_and_repair_cuts_there() {
    let dir = temp_dir("deleted-newest");
    let (found, digests) = three_segments(&dir);
    assert_eq!(found, vec![seg(&dir, 0), seg(&dir, 10), seg(&dir, 30)]);
    fs::remove_file(&found[2]).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains(&found[2].display().to_string()), "{error}");
    assert!(error.contains("entries from 30 on: the newest segment written"), "{error}");
    assert!(error.contains("refusing to start") && error.contains("30 entries recovered before it"), "{error}");
    assert!(try_recover(&dir, false).is_err(), "esim replay refuses too");
    println!("{error}");

    let report = esim_store::journal::repair(&dir, false).unwrap();
    let damage = report.damage.expect("damage");
    assert!(damage.gap && damage.later_segments.is_empty() && damage.dropped_entries == 0, "{damage:?}");
    assert_eq!(damage.file, found[2]);
    assert_eq!(report.entries_kept, 30);
    assert!(segments(&dir).len() == 2, "nothing changed without --cut-at-damage");
    let cut = esim_store::journal::repair(&dir, true).unwrap();
    assert!(cut.applied && cut.damage.is_some());
    let recovery = try_recover(&dir, true).unwrap();
    assert_eq!(recovery.next_index, 30);
    assert_eq!(recovery.engine.unwrap().state_digest(), digests[1], "the state the kept segments hold");
    fs::remove_dir_all(&dir).unwrap();
}

/// A middle segment deleted, or cut short at a record boundary: the next segment does
/// not start where the entries end. The start refuses naming the file and the entries
/// missing; repair drops every later segment, counting their entries.
#[test]
fn a_deleted_or_cut_short_middle_segment_refuses_naming_it_and_repair_cuts_there() {
    let dir = temp_dir("deleted-middle");
    let (found, digests) = three_segments(&dir);
    let middle = fs::read(&found[1]).unwrap();
    fs::remove_file(&found[1]).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains(&found[1].display().to_string()), "{error}");
    assert!(error.contains("(entries 10 to 29)") && error.contains("listed in the manifest"), "{error}");
    println!("{error}");
    let report = esim_store::journal::repair(&dir, false).unwrap();
    let damage = report.damage.expect("damage");
    assert!(damage.gap, "{damage:?}");
    assert_eq!(damage.later_segments, vec![found[2].clone()]);
    assert_eq!(damage.dropped_entries, 30, "the newest segment's entries");
    assert_eq!(report.entries_kept, 10);

    // Cut short at a record boundary instead: five entries of twenty kept.
    fs::write(&found[1], &middle[..record_offsets(&middle)[6]]).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains("entries 15 to 29 are missing"), "{error}");
    assert!(error.contains(&format!("{} was cut short", found[1].display())), "{error}");
    println!("{error}");
    let cut = esim_store::journal::repair(&dir, true).unwrap();
    assert_eq!(cut.damage.unwrap().dropped_entries, 30);
    assert_eq!(segments(&dir), found[..2].to_vec());
    let recovery = try_recover(&dir, true).unwrap();
    assert_eq!(recovery.next_index, 15);
    assert_ne!(recovery.engine.unwrap().state_digest(), digests[1]);
    fs::remove_dir_all(&dir).unwrap();
}

/// A data dir made before the manifest opens as it is (its segments checked for gaps)
/// and gets a manifest at its first start; a gap in it is still refused.
#[test]
fn a_data_dir_without_a_manifest_opens_and_gets_one() {
    use esim_store::journal::MANIFEST_FILE;
    let dir = temp_dir("legacy");
    let (found, digests) = three_segments(&dir);
    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    let recovery = try_recover(&dir, true).unwrap();
    assert_eq!(recovery.engine.as_ref().unwrap().state_digest(), digests[2]);
    let mut next = recovery.header.unwrap();
    next.first_index = recovery.next_index;
    drop(FileJournal::open(&dir, next, NO_SNAPSHOT).unwrap());
    assert!(dir.join(MANIFEST_FILE).exists(), "written at the first start");
    assert_eq!(mode(&dir.join(MANIFEST_FILE)), 0o600);
    // Now it lists the newest segment, so deleting it is refused.
    fs::remove_file(seg(&dir, 60)).unwrap();
    assert!(try_recover(&dir, true).err().unwrap().contains(&seg(&dir, 60).display().to_string()));
    // Without a manifest, a deleted middle segment is a gap all the same.
    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    fs::remove_file(&found[1]).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains("entries 10 to 29 are missing"), "{error}");
    assert!(error.contains(&format!("or {} is missing", found[1].display())), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}

/// The newest snapshot damaged, the previous one kept: the start recovers from the
/// previous snapshot and the segments since it, to the exact state, and names the bad
/// file. With no previous snapshot the journal from its start is the copy.
#[test]
fn a_corrupted_newest_snapshot_recovers_exactly_from_the_previous_one() {
    for snapshots_made in [1, 3] {
        let dir = temp_dir(&format!("bad-snapshot-{snapshots_made}"));
        let policy = SnapshotPolicy { every_entries: 20, every_bytes: u64::MAX };
        let mut journal = FileJournal::open(&dir, header(26), policy).unwrap();
        let (mut work, first) = Workload::new(26);
        esim_store::sink::JournalSink::append(&mut journal, &first).unwrap();
        for _ in 0..snapshots_made {
            esim_store::sink::JournalSink::append(&mut journal, &work.batch(25)).unwrap();
            journal.wait_for_snapshot().expect("due").expect("written");
        }
        journal.append_entries(&work.batch(7)).unwrap();
        drop(journal);
        let clean = try_recover(&dir, false).unwrap();
        let digest = work.service.engine().state_digest();
        assert_eq!(clean.engine.unwrap().state_digest(), digest);
        let mut snapshots: Vec<PathBuf> =
            fs::read_dir(dir.join("snapshots")).unwrap().map(|e| e.unwrap().path()).collect();
        snapshots.sort();
        assert_eq!(snapshots.len(), snapshots_made.min(2), "{snapshots:?}");
        let newest = snapshots.last().unwrap().clone();
        let mut bytes = fs::read(&newest).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x20;
        fs::write(&newest, &bytes).unwrap();

        let recovery = try_recover(&dir, true).unwrap();
        assert_eq!(recovery.engine.unwrap().state_digest(), digest, "exactly the state");
        assert_eq!(recovery.next_index, clean.next_index);
        assert_eq!(recovery.from_snapshot, if snapshots_made == 1 { 0 } else { clean.from_snapshot - 25 });
        let report = esim_store::journal::repair(&dir, false).unwrap();
        assert!(report.damage.is_none());
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(report.warnings[0].contains(&format!("snapshot {} is damaged", newest.display())));
        println!("{}", report.warnings[0]);
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// The newest listed segment was renamed into place whole and synced before the
/// manifest listed it: cut inside its header it was cut short, not torn while created.
/// The same bytes in a segment the manifest does not list are a creation torn by a crash.
#[test]
fn the_newest_listed_segment_cut_in_its_header_is_damage() {
    use esim_store::journal::MANIFEST_FILE;
    let dir = temp_dir("newest-header");
    let (found, digests) = three_segments(&dir);
    fs::OpenOptions::new().write(true).open(&found[2]).unwrap().set_len(5).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains(&found[2].display().to_string()) && error.contains("cut short"), "{error}");
    assert!(found[2].exists(), "nothing removed");
    // Listed no more (the manifest of the two first): a torn creation, removed.
    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    let recovery = try_recover(&dir, true).unwrap();
    assert!(recovery.repaired[0].contains("removed the empty segment"), "{:?}", recovery.repaired);
    assert_eq!(recovery.engine.unwrap().state_digest(), digests[1]);
    fs::remove_dir_all(&dir).unwrap();
}

/// A damaged snapshot whose entries no other copy holds is refused, never read as less:
/// with the journal since the start gone too, and with every segment gone.
#[test]
fn a_damaged_snapshot_with_no_copy_left_is_refused() {
    let dir = temp_dir("no-copy");
    let policy = SnapshotPolicy { every_entries: 20, every_bytes: u64::MAX };
    let mut journal = FileJournal::open(&dir, header(27), policy).unwrap();
    let (mut work, first) = Workload::new(27);
    journal.append_entries(&first).unwrap();
    journal.append_entries(&work.batch(25)).unwrap();
    journal.write_snapshot(work.service.engine()).unwrap();
    journal.append_entries(&work.batch(3)).unwrap();
    drop(journal);
    let snapshot = dir.join("snapshots").join(format!("{:020}.snap", 26));
    let mut bytes = fs::read(&snapshot).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    fs::write(&snapshot, &bytes).unwrap();
    fs::remove_file(seg(&dir, 0)).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains(&format!("snapshot {} is damaged", snapshot.display())), "{error}");
    assert!(error.contains("(entries 0 to 25)") && error.contains("from a backup"), "{error}");
    for path in segments(&dir) {
        fs::remove_file(path).unwrap();
    }
    fs::remove_file(dir.join(esim_store::journal::MANIFEST_FILE)).unwrap();
    let error = try_recover(&dir, true).err().expect("refused");
    assert!(error.contains("they hold 0 entries") && error.contains("from a backup"), "{error}");
    fs::remove_dir_all(&dir).unwrap();
}
