//! A failed append leaves the journal as it was: a fault-injecting file under
//! `FileJournal` (torn partial writes with ENOSPC, failing syncs, failing cuts) and,
//! after every fault, more appends; a fresh recovery then holds exactly the batches
//! whose append returned Ok.

mod journal_support;
use esim_api::JournalEntry;
use esim_engine::Engine;
use esim_store::journal::{recover, FileJournal, JournalHealth, RecoverOptions, SnapshotPolicy, TORN_TAIL_MAX_BYTES};
use journal_support::*;
use std::fs;
use std::sync::{Arc, Mutex};

const NO_SNAPSHOT: SnapshotPolicy = SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX };

fn recovered(dir: &std::path::Path) -> esim_store::journal::Recovery {
    recover(dir, &RecoverOptions { repair: true, until: None }).unwrap()
}

#[test]
fn failed_appends_leave_the_journal_as_it_was_and_appends_continue() {
    let dir = temp_dir("faults");
    let faults: SharedFaults = Arc::new(Mutex::new(Faults::default()));
    let mut journal = FileJournal::open_with(&dir, header(7), NO_SNAPSHOT, faulty_opener(faults.clone())).unwrap();
    let (mut work, first) = Workload::new(7);
    let mut reference = Engine::new(config(7), esim_engine::Millis::VIRTUAL_EPOCH);
    journal.append_entries(&first).unwrap();
    apply(&mut reference, &first);
    let segment = journal.segment_path().to_path_buf();
    let mut acknowledged = first.len() as u64;
    let (mut failed_batches, mut failed_entries) = (0, 0);
    // Every batch's fate: Ok batches are in the reference; failed ones must vanish.
    let mut attempt = |journal: &mut FileJournal, work: &mut Workload, reference: &mut Engine, size: usize| {
        let batch: Vec<JournalEntry> = work.batch(size);
        let before = fs::metadata(&segment).unwrap().len();
        match journal.append_entries(&batch) {
            Ok(()) => {
                apply(reference, &batch);
                acknowledged += batch.len() as u64;
                assert_eq!(journal.durable_len(), fs::metadata(&segment).unwrap().len());
                true
            }
            Err(error) => {
                assert!(!error.wedged, "{error}");
                assert_eq!(fs::metadata(&segment).unwrap().len(), before, "cut back to where it was");
                assert_eq!(journal.durable_len(), before);
                // What the server does: back to the durable state.
                let engine = journal.reload().unwrap();
                assert_eq!(engine.state_digest(), reference.state_digest(), "reload = acknowledged only");
                work.service.replace_engine(engine);
                failed_batches += 1;
                failed_entries += batch.len();
                false
            }
        }
    };
    for _ in 0..5 {
        assert!(attempt(&mut journal, &mut work, &mut reference, 7));
    }
    // A torn partial write with ENOSPC.
    faults.lock().unwrap().fail_writes = 1;
    faults.lock().unwrap().torn_prefix = 100;
    assert!(!attempt(&mut journal, &mut work, &mut reference, 9));
    assert!(attempt(&mut journal, &mut work, &mut reference, 3), "the next append continues");
    // A sync failure after the whole batch was written.
    faults.lock().unwrap().fail_syncs = 1;
    assert!(!attempt(&mut journal, &mut work, &mut reference, 11));
    assert!(attempt(&mut journal, &mut work, &mut reference, 4));
    // Two faults in a row, then recovery.
    faults.lock().unwrap().fail_writes = 1;
    faults.lock().unwrap().torn_prefix = 3;
    assert!(!attempt(&mut journal, &mut work, &mut reference, 5));
    faults.lock().unwrap().fail_syncs = 1;
    assert!(!attempt(&mut journal, &mut work, &mut reference, 5));
    for _ in 0..5 {
        assert!(attempt(&mut journal, &mut work, &mut reference, 6));
    }
    assert_eq!(journal.health(), &JournalHealth::Ok);
    assert_eq!(journal.next_index(), acknowledged);
    assert_eq!(segments(&dir), vec![segment.clone()], "no new segment after a failure");
    drop(journal);

    let recovery = recovered(&dir);
    assert!(recovery.repaired.is_empty(), "nothing to cut: {:?}", recovery.repaired);
    assert_eq!(recovery.next_index, acknowledged);
    assert_eq!(recovery.engine.unwrap().state_digest(), reference.state_digest());
    assert_eq!((failed_batches, failed_entries), (4, 30));
    println!("{acknowledged} acknowledged entries recovered; {failed_batches} failed batches ({failed_entries} entries) absent");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failing_cut_wedges_the_journal_and_nothing_more_is_written() {
    let dir = temp_dir("wedge");
    let faults: SharedFaults = Arc::new(Mutex::new(Faults::default()));
    let mut journal = FileJournal::open_with(&dir, header(8), NO_SNAPSHOT, faulty_opener(faults.clone())).unwrap();
    let (mut work, first) = Workload::new(8);
    let mut reference = Engine::new(config(8), esim_engine::Millis::VIRTUAL_EPOCH);
    journal.append_entries(&first).unwrap();
    apply(&mut reference, &first);
    let batch = work.batch(10);
    journal.append_entries(&batch).unwrap();
    apply(&mut reference, &batch);
    {
        let mut faults = faults.lock().unwrap();
        faults.fail_writes = 1;
        faults.torn_prefix = 50;
        faults.fail_set_len = 1;
    }
    let error = journal.append_entries(&work.batch(5)).unwrap_err();
    assert!(error.wedged, "{error}");
    assert_eq!(error.error.raw_os_error(), Some(ENOSPC));
    let JournalHealth::Wedged(why) = journal.health().clone() else { panic!("wedged") };
    assert!(why.contains("cutting") && why.contains("durable end"), "{why}");
    let size = fs::metadata(journal.segment_path()).unwrap().len();
    assert_eq!(size, journal.durable_len() + 50, "the torn prefix is still there");
    let events = faults.lock().unwrap().events.len();
    for _ in 0..3 {
        let error = journal.append_entries(&work.batch(2)).unwrap_err();
        assert!(error.wedged);
        assert!(error.to_string().contains("wedged"), "{error}");
    }
    assert!(journal.probe().is_err(), "a wedged journal does not even probe");
    assert_eq!(faults.lock().unwrap().events.len(), events, "no write, sync or cut after the wedge");
    assert_eq!(fs::metadata(journal.segment_path()).unwrap().len(), size);
    // The reload still gives the acknowledged state (it reads only).
    assert_eq!(journal.reload().unwrap().state_digest(), reference.state_digest());
    drop(journal);
    // A restart cuts the torn prefix as a torn tail and has every acknowledged entry.
    let recovery = recovered(&dir);
    assert_eq!(recovery.repaired.len(), 1, "{:?}", recovery.repaired);
    assert!(recovery.repaired[0].contains("torn tail of 50 bytes"), "{:?}", recovery.repaired);
    assert_eq!(recovery.engine.unwrap().state_digest(), reference.state_digest());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn probe_writes_nothing_that_stays_and_fails_while_the_disk_fails() {
    let dir = temp_dir("probe");
    let faults: SharedFaults = Arc::new(Mutex::new(Faults::default()));
    let mut journal = FileJournal::open_with(&dir, header(9), NO_SNAPSHOT, faulty_opener(faults.clone())).unwrap();
    let (_work, first) = Workload::new(9);
    journal.append_entries(&first).unwrap();
    let size = fs::metadata(journal.segment_path()).unwrap().len();
    faults.lock().unwrap().fail_writes = 1;
    faults.lock().unwrap().torn_prefix = 4096;
    assert_eq!(journal.probe().unwrap_err().raw_os_error(), Some(ENOSPC));
    assert_eq!(fs::metadata(journal.segment_path()).unwrap().len(), size);
    assert_eq!(journal.health(), &JournalHealth::Ok);
    journal.probe().unwrap();
    assert_eq!(fs::metadata(journal.segment_path()).unwrap().len(), size);
    let writes: Vec<_> = faults
        .lock()
        .unwrap()
        .events
        .iter()
        .filter(|e| matches!(e, Event::Write { len: 65536, .. }))
        .cloned()
        .collect();
    assert_eq!(writes.len(), 2, "each probe wrote a 64 KiB block: {writes:?}");
    drop(journal);
    assert_eq!(recovered(&dir).next_index, first.len() as u64);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_batch_larger_than_the_torn_tail_limit_is_synced_in_groups() {
    let dir = temp_dir("groups");
    let faults: SharedFaults = Arc::new(Mutex::new(Faults::default()));
    let mut journal = FileJournal::open_with(&dir, header(10), NO_SNAPSHOT, faulty_opener(faults.clone())).unwrap();
    let at = esim_engine::Millis::VIRTUAL_EPOCH;
    // Ticks that move no time: ~30 bytes a record, 17+ MiB in one batch.
    let batch: Vec<JournalEntry> = (0..700_000).map(|_| JournalEntry::Tick { at }).collect();
    faults.lock().unwrap().events.clear();
    journal.append_entries(&batch).unwrap();
    let events = faults.lock().unwrap().events.clone();
    let mut unsynced = 0u64;
    let mut groups = Vec::new();
    for event in &events {
        match event {
            Event::Write { len, .. } => unsynced += *len as u64,
            Event::Sync { .. } => {
                assert!(unsynced <= TORN_TAIL_MAX_BYTES, "{unsynced} bytes unsynced");
                groups.push(unsynced);
                unsynced = 0;
            }
            Event::SetLen { .. } => panic!("no cut"),
        }
    }
    assert_eq!(unsynced, 0);
    let total: u64 = groups.iter().sum();
    assert!(total > TORN_TAIL_MAX_BYTES, "{total}");
    assert!(groups.len() >= 2, "{groups:?}");
    println!("a batch of {total} bytes was written in {} synced groups: {groups:?}", groups.len());
    drop(journal);
    assert_eq!(recovered(&dir).next_index, 700_000);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_snapshot_leaves_no_temporary_file_and_appends_go_on() {
    let dir = temp_dir("snapshot-fault");
    let faults: SharedFaults = Arc::new(Mutex::new(Faults::default()));
    let policy = SnapshotPolicy { every_entries: 20, every_bytes: u64::MAX };
    let mut journal = FileJournal::open_with(&dir, header(11), policy, faulty_opener(faults.clone())).unwrap();
    let (mut work, first) = Workload::new(11);
    journal.append_entries(&first).unwrap();
    let mut appended = first.len();
    // The snapshot's temporary file fails mid-write.
    {
        let mut faults = faults.lock().unwrap();
        faults.only_suffix = ".snap.tmp".into();
        faults.fail_writes = 1;
        faults.torn_prefix = 1000;
    }
    let batch = work.batch(25);
    journal.append_entries(&batch).unwrap();
    appended += batch.len();
    assert!(journal.snapshot_due());
    assert!(journal.write_snapshot(work.service.engine()).is_err());
    assert_eq!(fs::read_dir(dir.join("snapshots")).unwrap().count(), 0, "no .snap.tmp left");
    // Then the new segment after a good snapshot fails: appends stay in the old segment.
    {
        let mut faults = faults.lock().unwrap();
        faults.only_suffix = ".seg.tmp".into();
        faults.fail_syncs = 1;
    }
    let old_segment = journal.segment_path().to_path_buf();
    assert!(journal.write_snapshot(work.service.engine()).is_err());
    assert_eq!(journal.segment_path(), old_segment);
    assert_eq!(segments(&dir), vec![old_segment.clone()], "no partial segment left");
    let batch = work.batch(10);
    journal.append_entries(&batch).unwrap();
    appended += batch.len();
    drop(journal);
    // The snapshot covers the first entries, the old segment holds them and the rest.
    let recovery = recovered(&dir);
    assert_eq!(recovery.from_snapshot, (first.len() + 25) as u64);
    assert_eq!(recovery.next_index, appended as u64);
    assert_eq!(recovery.engine.unwrap().state_digest(), work.service.engine().state_digest());
    fs::remove_dir_all(&dir).unwrap();
}
