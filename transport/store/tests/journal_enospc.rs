//! A real full disk: the journal on a small tmpfs (root only; skipped otherwise) runs
//! out of space mid-batch, stays usable (not wedged), and after space is freed goes on;
//! a fresh recovery then holds every acknowledged entry and finds no damage.

mod journal_support;
use esim_engine::{Engine, Millis};
use esim_store::journal::{recover, FileJournal, JournalHealth, RecoverOptions, SnapshotPolicy};
use journal_support::*;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a fresh dir, unmounted (and the dir removed) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(name: &str, size: &str) -> Result<Tmpfs, String> {
        let dir = temp_dir(name);
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !status.success() {
            let _ = fs::remove_dir_all(&dir);
            return Err(format!("mount -t tmpfs failed ({status}); needs root"));
        }
        Ok(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = fs::remove_dir(&self.0);
    }
}

/// Writes into `path` until the disk is full; the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = fs::File::create(path).unwrap();
    let block = vec![0x55u8; 16 * 1024];
    let mut written = 0;
    loop {
        match file.write(&block) {
            Ok(0) => return written,
            Ok(n) => written += n as u64,
            Err(error) => {
                assert_eq!(error.raw_os_error(), Some(ENOSPC), "{error}");
                return written;
            }
        }
    }
}

#[test]
fn a_full_disk_fails_appends_cleanly_and_the_journal_goes_on_once_space_is_back() {
    let mount = match Tmpfs::mount("enospc", "2m") {
        Ok(mount) => mount,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = mount.0.join("data");
    let policy = SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX };
    let mut journal = FileJournal::open(&dir, header(31), policy).unwrap();
    let (mut work, first) = Workload::new(31);
    let mut reference = Engine::new(config(31), Millis::VIRTUAL_EPOCH);
    journal.append_entries(&first).unwrap();
    apply(&mut reference, &first);
    let mut acknowledged = first.len() as u64;
    let filler = mount.0.join("filler");
    let filled = fill(&filler);
    // Give back a little room, so that the failing batch is partly written.
    fs::OpenOptions::new().write(true).open(&filler).unwrap().set_len(filled - 40 * 1024).unwrap();
    let mut failures = 0;
    let mut batches_before_full = 0;
    while failures == 0 {
        let batch = work.batch(40);
        let before = journal.durable_len();
        match journal.append_entries(&batch) {
            Ok(()) => {
                apply(&mut reference, &batch);
                acknowledged += batch.len() as u64;
                batches_before_full += 1;
            }
            Err(error) => {
                assert_eq!(error.error.raw_os_error(), Some(ENOSPC), "{error}");
                assert!(!error.wedged, "{error}");
                assert_eq!(journal.health(), &JournalHealth::Ok);
                assert_eq!(fs::metadata(journal.segment_path()).unwrap().len(), before, "cut back");
                work.service.replace_engine(journal.reload().unwrap());
                failures += 1;
            }
        }
        assert!(batches_before_full < 1_000, "the disk never filled");
    }
    // Still full: the probe says so and changes nothing.
    let size = fs::metadata(journal.segment_path()).unwrap().len();
    assert_eq!(journal.probe().unwrap_err().raw_os_error(), Some(ENOSPC));
    assert_eq!(fs::metadata(journal.segment_path()).unwrap().len(), size);
    fs::remove_file(&filler).unwrap();
    journal.probe().unwrap();
    for _ in 0..20 {
        let batch = work.batch(40);
        journal.append_entries(&batch).unwrap();
        apply(&mut reference, &batch);
        acknowledged += batch.len() as u64;
    }
    drop(journal);
    let recovery = recover(&dir, &RecoverOptions { repair: true, until: None }).unwrap();
    assert!(recovery.repaired.is_empty(), "{:?}", recovery.repaired);
    assert_eq!(recovery.next_index, acknowledged);
    assert_eq!(recovery.engine.unwrap().state_digest(), reference.state_digest());
    assert_eq!(work.service.engine().state_digest(), reference.state_digest());
    println!(
        "ENOSPC after {batches_before_full} batches (filler {filled} bytes); {acknowledged} acknowledged entries recovered"
    );
}
