//! A real ENOSPC under the real binary: the data dir on a 4 MiB tmpfs (root only; the
//! test prints "skipped" otherwise). Six clients fund eSIMs by 1 USD each while a filler
//! file takes every free byte: changes answer 503 while the disk is full, reads with no
//! change in flight still answer 200 (a read that shares a batch with a failing append
//! shares its 503: counted and printed); once the filler is gone, funds succeed again. After a graceful stop the
//! server starts again on the same dir, and the money funded equals exactly 1 USD per
//! acknowledged (200) fund, before and after the restart and in an offline replay.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod process;
use process::{call, esim_offline, HttpClient, Launch, Started, ADMIN};

const CLIENTS: usize = 6;
const TMPFS: &str = "size=4m,mode=0700";

fn dec(value: &Value) -> Decimal {
    Decimal::from_str(&value.to_string()).unwrap_or_else(|_| panic!("not a number: {value}"))
}

/// The tmpfs, unmounted (and its directory removed) on drop.
struct Mount {
    root: PathBuf,
    point: PathBuf,
}

impl Mount {
    fn new(root: &Path) -> Result<Mount, String> {
        let point = root.join("mnt");
        std::fs::create_dir_all(&point).map_err(|e| e.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", TMPFS, "tmpfs"])
            .arg(&point)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(root);
            return Err(format!("mount -t tmpfs failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
        }
        Ok(Mount { root: root.to_path_buf(), point })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.point).status().is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.point).status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The server, killed on drop if still running (before the tmpfs is unmounted).
struct Guard(Option<Started>);

impl Guard {
    fn stop(&mut self) {
        self.0.take().unwrap().stop();
    }
    fn base(&self) -> String {
        self.0.as_ref().unwrap().running.base.clone()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut started) = self.0.take() {
            let _ = started.running.child.kill();
            let _ = started.running.child.wait();
        }
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    acknowledged: u64,
    unavailable: u64,
    no_answer: u64,
    other: BTreeMap<u16, u64>,
}

/// The filler: writes until ENOSPC, then keeps taking whatever frees up until stopped.
fn fill(path: PathBuf, full: Arc<AtomicBool>, stop: Arc<AtomicBool>, written: Arc<AtomicU64>) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    let big = vec![0x5au8; 64 * 1024];
    let small = vec![0x5au8; 512];
    loop {
        let chunk = if full.load(Ordering::SeqCst) { &small } else { &big };
        match file.write(chunk) {
            Ok(n) => {
                written.fetch_add(n as u64, Ordering::SeqCst);
            }
            Err(error) if error.raw_os_error() == Some(28) => {
                full.store(true, Ordering::SeqCst);
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => panic!("filler: {error}"),
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
    }
}

async fn fund(client: &HttpClient, base: &str, key: &str, iccid: &str, idempotency: &str) -> Option<u16> {
    let path = format!("/api/v2/reseller/esim/{iccid}/fund");
    call(client, base, "POST", &path, key, Some(json!({"amount": 1})), Some(idempotency)).await.map(|(s, _)| s)
}

fn record(tally: &Mutex<Tally>, status: Option<u16>) {
    let mut tally = tally.lock().unwrap();
    match status {
        Some(200) => tally.acknowledged += 1,
        Some(503) => tally.unavailable += 1,
        Some(other) => *tally.other.entry(other).or_default() += 1,
        None => tally.no_answer += 1,
    }
}

async fn admin(client: &HttpClient, base: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    call(client, base, method, path, ADMIN, body, None).await.unwrap_or_else(|| panic!("{method} {path}: no answer"))
}

/// (balance_usd, lifetime_usage_usd) of the account.
async fn wallet(client: &HttpClient, base: &str, key: &str) -> (u16, Decimal, Decimal) {
    let (status, body) = call(client, base, "GET", "/api/v2/reseller/wallet/balance", key, None, None).await.unwrap();
    if status != 200 {
        return (status, Decimal::ZERO, Decimal::ZERO);
    }
    (status, dec(&body["balance_usd"]), dec(&body["lifetime_usage_usd"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_answers_503_loses_nothing_acknowledged_and_the_server_starts_again() {
    let root = std::env::temp_dir().join(format!("esim-disk-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mount = match Mount::new(&root) {
        Ok(mount) => mount,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = mount.point.join("data");
    let filler = mount.point.join("filler");
    let mut launch = Launch::new(&dir);
    launch.key_file = root.join("secret-key"); // off the tmpfs
    launch.log = Some(root.join("server.log")); // off the tmpfs
    launch.rust_log = "info".into();
    let launch = launch.arg("--demo=false");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut server = Guard(Some(launch.start(false)));
    let base = server.base();

    // One account, a big top-up, one key and one installed eSIM per client (each key has
    // its own rate window of 100 requests per service minute).
    let (status, created) =
        admin(&client, &base, "POST", "/admin/v1/accounts", Some(json!({"contact_email": "full@disk.example"}))).await;
    assert_eq!(status, 201, "{created}");
    let account = created["account_id"].as_str().unwrap().to_string();
    let main_key = created["api_key"].as_str().unwrap().to_string();
    let topup = json!({"amount_usd": 100000});
    assert_eq!(
        admin(&client, &base, "POST", &format!("/admin/v1/accounts/{account}/topups"), Some(topup)).await.0,
        201
    );
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (status, body) = admin(&client, &base, "POST", &format!("/admin/v1/accounts/{account}/keys"), None).await;
        assert!(status == 200 || status == 201, "{body}");
        let key = body["api_key"].as_str().unwrap().to_string();
        let (status, body) =
            call(&client, &base, "POST", "/api/v2/reseller/esim/provision", &main_key, None, None).await.unwrap();
        assert_eq!(status, 201, "{body}");
        let iccid = body["iccid"].as_str().unwrap().to_string();
        assert_eq!(admin(&client, &base, "POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await.0, 200);
        clients.push((key, iccid));
    }
    let (status, body) = admin(&client, &base, "POST", &format!("/admin/v1/accounts/{account}/keys"), None).await;
    assert!(status == 200 || status == 201, "{body}");
    let probe_key = body["api_key"].as_str().unwrap().to_string();
    let (_, balance_0, usage_0) = wallet(&client, &base, &main_key).await;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let phase = Arc::new(AtomicU64::new(0)); // 0 funding, 1 paused, 2 stop
    let in_flight = Arc::new(AtomicU64::new(0));
    let full = Arc::new(AtomicBool::new(false));
    let stop_filling = Arc::new(AtomicBool::new(false));
    let filled = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for (index, (key, iccid)) in clients.iter().cloned().enumerate() {
        let (client, base, tally, phase) = (client.clone(), base.clone(), tally.clone(), phase.clone());
        let in_flight = in_flight.clone();
        workers.push(tokio::spawn(async move {
            let mut step = 0;
            loop {
                in_flight.fetch_add(1, Ordering::SeqCst);
                match phase.load(Ordering::SeqCst) {
                    0 => {}
                    1 => {
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                    _ => break,
                }
                step += 1;
                let status = fund(&client, &base, &key, &iccid, &format!("a-{index}-{step}")).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                record(&tally, status);
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_full = tally.lock().unwrap().acknowledged;

    // The filler takes every free byte; the clients keep funding for 2.5 s of full disk.
    let filling = {
        let (full, stop, written) = (full.clone(), stop_filling.clone(), filled.clone());
        std::thread::spawn(move || fill(filler.clone(), full, stop, written))
    };
    let filled_at = Instant::now();
    while !full.load(Ordering::SeqCst) {
        assert!(filled_at.elapsed() < Duration::from_secs(20), "the filler never hit ENOSPC");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fill_time = filled_at.elapsed();
    let unavailable_at_full = tally.lock().unwrap().unavailable;
    // Reads among the failing funds (a read batched with a failing append shares its
    // 503: printed, not asserted), then reads with no change in flight (asserted 200).
    let mut busy_reads = Vec::new();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        busy_reads.push(wallet(&client, &base, &main_key).await.0);
        busy_reads.push(admin(&client, &base, "GET", "/admin/v1/state", None).await.0);
    }
    phase.store(1, Ordering::SeqCst);
    while in_flight.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut reads = Vec::new();
    for _ in 0..3 {
        reads.push(wallet(&client, &base, &main_key).await.0);
        reads.push(admin(&client, &base, "GET", "/admin/v1/state", None).await.0);
        let path = format!("/api/v2/reseller/esim/{}", clients[1].1);
        reads.push(call(&client, &base, "GET", &path, &main_key, None, None).await.map_or(0, |(s, _)| s));
    }
    phase.store(0, Ordering::SeqCst);
    let (status, body) = call(
        &client,
        &base,
        "POST",
        &format!("/api/v2/reseller/esim/{}/fund", clients[0].1),
        &main_key,
        Some(json!({"amount": 1})),
        Some("probe-full"),
    )
    .await
    .unwrap();
    println!("a fund while full: {status} {body}");
    record(&tally, Some(status));
    let unavailable_while_full = tally.lock().unwrap().unavailable - unavailable_at_full;

    // Space again: the filler goes; a fund succeeds within a few seconds.
    stop_filling.store(true, Ordering::SeqCst);
    filling.join().unwrap();
    std::fs::remove_file(mount.point.join("filler")).unwrap();
    let freed_at = Instant::now();
    let mut recovered_after = None;
    let mut probe = 0;
    while freed_at.elapsed() < Duration::from_secs(10) {
        probe += 1;
        let status = fund(&client, &base, &probe_key, &clients[0].1, &format!("after-{probe}")).await;
        record(&tally, status);
        if status == Some(200) {
            recovered_after = Some(freed_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acknowledged_at_recovery = tally.lock().unwrap().acknowledged;
    tokio::time::sleep(Duration::from_millis(700)).await;
    phase.store(2, Ordering::SeqCst);
    for worker in workers {
        worker.await.unwrap();
    }
    let after_free = tally.lock().unwrap().acknowledged - acknowledged_at_recovery;

    // The figures, live.
    let (status, balance_1, usage_1) = wallet(&client, &base, &main_key).await;
    assert_eq!(status, 200);
    let (_, state) = admin(&client, &base, "GET", "/admin/v1/state", None).await;
    let live = state["state_digest"].as_str().unwrap().to_string();
    server.stop();
    let journal_bytes: u64 =
        std::fs::read_dir(dir.join("journal")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();

    // The restart on the same dir.
    let mut server = Guard(Some(launch.start(false)));
    let base = server.base();
    let (status, balance_2, usage_2) = wallet(&client, &base, &main_key).await;
    assert_eq!(status, 200);
    let (_, state) = admin(&client, &base, "GET", "/admin/v1/state", None).await;
    let restarted = state["state_digest"].as_str().unwrap().to_string();
    let (_, report) = admin(&client, &base, "GET", "/admin/v1/reports/conservation", None).await;
    let mut wallets = Decimal::ZERO;
    for (_, iccid) in &clients {
        let (status, esim) =
            call(&client, &base, "GET", &format!("/api/v2/reseller/esim/{iccid}"), &main_key, None, None)
                .await
                .unwrap();
        assert_eq!(status, 200, "{esim}");
        wallets += dec(&esim["wallet_balance_usd"]);
    }
    server.stop();
    let replay = esim_offline(&["replay"], &dir);
    let replay_text = String::from_utf8_lossy(&replay.stdout).to_string();
    let log = std::fs::read_to_string(root.join("server.log")).unwrap_or_default();
    let refusals = log.lines().filter(|l| l.contains("refusing to start")).count();
    let append_failures = log.lines().filter(|l| l.contains("journal append failed")).count();

    let tally = tally.lock().unwrap();
    let acknowledged = Decimal::from(tally.acknowledged);
    println!(
        "funds: {} acknowledged ({before_full} before the disk filled, {after_free} by the clients after the filler \
         went), {} answered 503 ({unavailable_while_full} during the 2.5 s of full disk), {} without an answer, \
         other {:?}\nfiller: {} bytes, full after {fill_time:?}; reads while full among the funds: {busy_reads:?}, with no change in flight: {reads:?}; first 200 after the \
         filler went: {recovered_after:?}\nreseller balance {balance_0} -> {balance_1} (live) -> {balance_2} \
         (restarted); lifetime usage {usage_0} -> {usage_1} -> {usage_2}; eSIM wallets {wallets}\njournal {journal_bytes} \
         bytes; {append_failures} 'journal append failed' log lines; digest live {live}, restarted {restarted}",
        tally.acknowledged,
        tally.unavailable,
        tally.no_answer,
        tally.other,
        filled.load(Ordering::SeqCst),
    );
    assert!(unavailable_while_full > 0, "changes answered 503 while the disk was full");
    assert!(reads.iter().all(|&s| s == 200), "reads answer 200 while full (no change in flight): {reads:?}");
    assert!(recovered_after.is_some(), "no fund succeeded within 10 s after the filler was removed");
    assert!(after_free > 0, "the clients' funds succeed again after the filler went");
    assert_eq!(tally.no_answer, 0, "every fund got an answer (none in doubt)");
    assert_eq!(refusals, 0, "the restart did not refuse:\n{log}");
    assert_eq!(usage_1 - usage_0, acknowledged, "live: 1 USD per acknowledged fund exactly");
    assert_eq!(balance_0 - balance_1, acknowledged, "live balance");
    assert_eq!((balance_2, usage_2), (balance_1, usage_1), "the restart holds every acknowledged fund, nothing more");
    assert_eq!(restarted, live, "the restart rebuilds the same state");
    assert_eq!(report["conserved"], json!(true), "{report}");
    assert!(replay.status.success(), "{replay_text}");
    assert!(replay_text.contains(&format!("state_digest {live}")), "{replay_text}");
    drop(mount);
}
