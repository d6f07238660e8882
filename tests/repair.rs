//! `esim repair` on the real binary: without `--cut-at-damage` it changes no byte and
//! exits non-zero on damage; with it, it drops exactly the entries it printed and the
//! data dir then replays and starts cleanly. A damaged snapshot and a live data dir are
//! refused.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod process;
use process::*;

fn esim(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_esim")).args(args).arg("--data-dir").arg(dir).output().unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The value after `label` in the printed lines.
fn field(text: &str, label: &str) -> u64 {
    let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    line[label.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut offset = 8;
    while offset + 8 <= bytes.len() {
        offsets.push(offset);
        offset += 8 + u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
    }
    offsets
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    segments
}

fn last_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_reports_without_changing_a_byte_then_cuts_exactly_what_it_printed() {
    let dir = std::env::temp_dir().join(format!("esim-repair-{}", std::process::id()));
    remove_data_dir(&dir);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut server = start(&dir, &["--demo=false"]);
    let (status, created) = call(
        &client,
        &server.base,
        "POST",
        "/admin/v1/accounts",
        ADMIN,
        Some(json!({"contact_email": "r@x.example"})),
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 201);
    let id = created["account_id"].as_str().unwrap().to_string();
    for amount in 1..=300 {
        let path = format!("/admin/v1/accounts/{id}/topups");
        let (status, body) =
            call(&client, &server.base, "POST", &path, ADMIN, Some(json!({"amount_usd": 10 + amount})), None)
                .await
                .unwrap();
        assert_eq!(status, 201, "{body}");
    }
    unsafe_free_sigterm(&mut server.child);

    let clean = esim(&["replay"], &dir);
    assert!(clean.status.success(), "{}", stdout(&clean));
    let before = field(&stdout(&clean), "entries");
    let repair = esim(&["repair"], &dir);
    assert!(repair.status.success(), "a clean dir: {}", stdout(&repair));
    assert!(stdout(&repair).contains("clean"), "{}", stdout(&repair));

    // Damage: the high byte of one record's length, in the middle of the segment.
    let segment = last_segment(&dir);
    let mut bytes = std::fs::read(&segment).unwrap();
    let offsets = record_offsets(&bytes);
    assert!(offsets.len() > 300, "{}", offsets.len());
    let target = offsets[offsets.len() / 2];
    bytes[target + 3] ^= 0x01;
    std::fs::write(&segment, &bytes).unwrap();
    assert!(!esim(&["replay"], &dir).status.success(), "replay refuses the damaged dir");

    let untouched = contents(&dir);
    let report = esim(&["repair"], &dir);
    let text = stdout(&report);
    assert!(!report.status.success(), "damage exits non-zero:\n{text}");
    assert!(String::from_utf8_lossy(&report.stderr).contains("--cut-at-damage"));
    assert!(text.contains(&format!("at byte offset {target}")), "{text}");
    assert!(contents(&dir) == untouched, "without --cut-at-damage not a byte changes");
    let announced = field(&text, "dropped entries");

    let cut = esim(&["repair", "--cut-at-damage"], &dir);
    let cut_text = stdout(&cut);
    assert!(cut.status.success(), "{cut_text}\n{}", String::from_utf8_lossy(&cut.stderr));
    assert_eq!(field(&cut_text, "dropped entries"), announced, "{cut_text}");
    assert!(cut_text.contains("last entry kept  index"), "{cut_text}");
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), target as u64);

    let replayed = esim(&["replay"], &dir);
    assert!(replayed.status.success(), "{}", stdout(&replayed));
    let after = field(&stdout(&replayed), "entries");
    assert!(!stdout(&replayed).contains("damage"), "{}", stdout(&replayed));
    assert_eq!(before - after, announced, "dropped exactly what was printed");
    assert_eq!(field(&cut_text, "entries kept"), after);
    assert!(cut_text.contains(&format!("last entry kept  index {} at 20", after - 1)), "{cut_text}");
    println!("{before} entries; repair printed {announced} to drop; {after} after the cut\n{cut_text}");

    // And it starts again.
    let mut server = start(&dir, &[]);
    let (status, _) = call(&client, &server.base, "GET", "/admin/v1/state", ADMIN, None, None).await.unwrap();
    assert_eq!(status, 200);
    unsafe_free_sigterm(&mut server.child);
    remove_data_dir(&dir);
}

#[test]
fn a_damaged_snapshot_cannot_be_repaired_here_and_a_live_dir_is_refused() {
    use esim_engine::{Engine, EngineConfig, Millis};
    use esim_http::journal::{FileJournal, SegmentHeader, SnapshotPolicy, FORMAT_VERSION};
    use esim_http::{ClockMode, JournalEntry};
    let dir = std::env::temp_dir().join(format!("esim-repair-snapshot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = EngineConfig { seed: 4, ..EngineConfig::default() };
    let header = SegmentHeader {
        version: FORMAT_VERSION,
        config: config.clone(),
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    };
    let mut journal = FileJournal::open(&dir, header, SnapshotPolicy::default()).unwrap();
    let mut engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
    let ticks: Vec<JournalEntry> =
        (1..=10).map(|s| JournalEntry::Tick { at: Millis::VIRTUAL_EPOCH.plus_ms(s) }).collect();
    journal.append_entries(&ticks).unwrap();
    for tick in &ticks {
        tick.clone().replay(&mut engine);
    }
    journal.write_snapshot(&engine).unwrap();
    drop(journal);

    // A live data dir (its lock held) is refused, naming the holder.
    let lock = esim_http::lock::DataDirLock::acquire(&dir).unwrap();
    for args in [&["repair"][..], &["repair", "--cut-at-damage"][..]] {
        let refused = esim(args, &dir);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success());
        assert!(stderr.contains(&format!("pid {}", std::process::id())), "{stderr}");
    }
    drop(lock);

    let snapshot = std::fs::read_dir(dir.join("snapshots")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&snapshot, &bytes).unwrap();
    // The journal from its start is kept until a second snapshot is verified: it
    // replaces the damaged one, with a warning naming it.
    let replaced = esim(&["repair"], &dir);
    assert!(replaced.status.success(), "{}", stdout(&replaced));
    assert!(
        stdout(&replaced).contains(&format!("snapshot {} is damaged", snapshot.display())),
        "{}",
        stdout(&replaced)
    );
    assert_eq!(field(&stdout(&replaced), "entries"), 10);
    let replay = esim(&["replay"], &dir);
    let log = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{log}");
    assert_eq!(field(&stdout(&replay), "entries"), 10);
    assert!(log.contains("WARN") && log.contains(&format!("snapshot {} is damaged", snapshot.display())), "{log}");
    // With that copy gone too, only a backup helps.
    std::fs::remove_file(dir.join("journal").join(format!("{:020}.seg", 0))).unwrap();
    let untouched = contents(&dir);
    let refused = esim(&["repair", "--cut-at-damage"], &dir);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("restore the data dir from a backup") && stderr.contains("cannot fix"), "{stderr}");
    // Only the lock file's pid changes (the cutting run takes the lock first).
    let without_lock = |mut files: BTreeMap<PathBuf, Vec<u8>>| {
        files.remove(&dir.join("lock"));
        files
    };
    assert!(without_lock(contents(&dir)) == without_lock(untouched), "nothing changed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Three runs of the real server: three segments (each start opens one where the
/// journal ends), and the entries after each run, as `esim replay` counts them.
async fn three_runs(dir: &Path) -> (Vec<PathBuf>, Vec<u64>) {
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut counts = Vec::new();
    let mut id = String::new();
    for run in 0..3 {
        let mut server = start(dir, &["--demo=false"]);
        if run == 0 {
            let body = json!({"contact_email": "gap@x.example"});
            let (status, created) =
                call(&client, &server.base, "POST", "/admin/v1/accounts", ADMIN, Some(body), None).await.unwrap();
            assert_eq!(status, 201);
            id = created["account_id"].as_str().unwrap().to_string();
        }
        for amount in 1..=40 {
            let path = format!("/admin/v1/accounts/{id}/topups");
            let body = json!({"amount_usd": 10 + amount});
            let (status, body) = call(&client, &server.base, "POST", &path, ADMIN, Some(body), None).await.unwrap();
            assert_eq!(status, 201, "{body}");
        }
        unsafe_free_sigterm(&mut server.child);
        let replay = esim(&["replay"], dir);
        assert!(replay.status.success(), "{}", stdout(&replay));
        counts.push(field(&stdout(&replay), "entries"));
    }
    let found = segments(dir);
    assert_eq!(found.len(), 3, "{found:?}");
    (found, counts)
}

/// `esim serve` on a damaged data dir: it must exit non-zero within 20 s (a server that
/// starts is killed and the test fails); returns its log.
fn refused_start(dir: &Path) -> String {
    let log = dir.with_extension("log");
    let mut launch = Launch::new(dir);
    launch.log = Some(log.clone());
    let mut child = launch.command().spawn().unwrap();
    let exit = wait_timeout(&mut child, std::time::Duration::from_secs(20));
    if exit.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(exit.is_some_and(|status| !status.success()), "the start is refused: {exit:?}\n{text}");
    text
}

/// Copies a data dir and its key file (`cp -a`).
fn copy_data_dir(from: &Path, to: &Path) {
    remove_data_dir(to);
    assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap().success());
    std::fs::copy(key_file(from), key_file(to)).unwrap();
}

/// Issue 35: with the newest segment deleted the service started from what was left
/// without a word. Now `esim serve` refuses, naming the segment and its entries, for the
/// newest and for a middle one; `esim repair` says what cutting drops, cuts, and the
/// service starts on what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_segment_refuses_the_start_naming_it_and_repair_cuts_there() {
    let base = std::env::temp_dir().join(format!("esim-gap-{}", std::process::id()));
    remove_data_dir(&base);
    let (found, counts) = three_runs(&base).await;
    let name = |path: &PathBuf| path.file_name().unwrap().to_str().unwrap().to_string();
    let first_of = |path: &PathBuf| name(path)[..20].parse::<u64>().unwrap();
    let (middle, newest) = (first_of(&found[1]), first_of(&found[2]));
    assert!(counts[0] <= middle && middle <= counts[1] && newest <= counts[2], "{counts:?} {found:?}");

    for (case, deleted, kept, dropped) in
        [("newest", &found[2], newest, 0), ("middle", &found[1], middle, counts[2] - newest)]
    {
        let dir = base.with_file_name(format!("esim-gap-{case}-{}", std::process::id()));
        copy_data_dir(&base, &dir);
        let deleted = dir.join("journal").join(name(deleted));
        std::fs::remove_file(&deleted).unwrap();
        let log = refused_start(&dir);
        assert!(log.contains(&deleted.display().to_string()) && log.contains("refusing to start"), "{case}: {log}");
        let entries = if case == "newest" {
            format!("entries from {newest} on: the newest segment written")
        } else {
            format!("entries {middle} to {}", newest - 1)
        };
        assert!(log.contains(&entries), "{case}: {log}");

        let report = esim(&["repair"], &dir);
        let text = stdout(&report);
        assert!(!report.status.success(), "{case}: {text}");
        assert!(text.contains(&deleted.display().to_string()), "{case}: {text}");
        assert_eq!(field(&text, "dropped entries"), dropped, "{case}: {text}");
        let cut = esim(&["repair", "--cut-at-damage"], &dir);
        let cut_text = stdout(&cut);
        assert!(cut.status.success(), "{case}: {cut_text}{}", String::from_utf8_lossy(&cut.stderr));
        assert_eq!(field(&cut_text, "entries kept"), kept, "{case}: {cut_text}");
        let replay = esim(&["replay"], &dir);
        assert_eq!(field(&stdout(&replay), "entries"), kept, "{case}");
        println!("{case}: {log}\n{text}");
        let mut server = start(&dir, &[]);
        let (status, _) =
            call(&unpooled_client(), &server.base, "GET", "/admin/v1/state", ADMIN, None, None).await.unwrap();
        assert_eq!(status, 200);
        unsafe_free_sigterm(&mut server.child);
        remove_data_dir(&dir);
    }
    remove_data_dir(&base);
}
