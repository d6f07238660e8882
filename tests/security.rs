//! Secrets at rest, against the real binary (`esim serve`, real HTTP on loopback):
//!
//! - after a session that issues API keys (the demo key, accounts, extra keys, one
//!   revoked) and webhook signing secrets, and after a snapshot of that state, no file
//!   under the data dir and no line of the server's log holds any key or secret, nor
//!   its hex part; every file is 0600 and every directory 0700 although the server ran
//!   under umask 000; the admin token file holds the admin token only;
//! - the seed, which every segment header shows, reproduces ids but no key or secret;
//! - a second `esim serve` on a live data dir exits at once naming the holder's pid;
//! - a journal of format version 1 is refused, naming both versions.
//!
//! Every test prints what it measured.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
mod process;
use process::{call, esim_offline, wait_timeout, walk, HttpClient, Launch};

/// A fresh directory for one test: the data dir, the key file and the log go inside.
fn test_root(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("esim-security-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The secret itself and its random part: after `rsk_` 48 or more hex characters, after
/// `whsec_` the base64 of 32 bytes (decision 114).
fn needles(secret: &str) -> Vec<String> {
    let random = secret.split_once('_').map(|(_, r)| r.to_string()).unwrap_or_default();
    match secret.starts_with("whsec_") {
        true => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(&random);
            assert_eq!(bytes.map(|b| b.len()).ok(), Some(32), "{secret:?} has a base64 part of 32 bytes");
        }
        false => {
            assert!(random.len() >= 48 && random.chars().all(|c| c.is_ascii_hexdigit()), "{secret:?} has a hex part")
        }
    }
    vec![secret.to_string(), random]
}

struct Session<'a> {
    client: &'a HttpClient,
    base: String,
    admin: String,
}

impl Session<'_> {
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        call(self.client, &self.base, method, path, token, body, key)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: no answer"))
    }

    async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, path, &self.admin, body, None).await
    }

    async fn api(&self, method: &str, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, &format!("/api/v2/reseller{path}"), key, body, None).await
    }

    /// A new account with a top-up: (id, key).
    async fn account(&self, email: &str, amount: u64) -> (String, String) {
        let (status, created) = self
            .admin("POST", "/admin/v1/accounts", Some(json!({"contact_email": email, "company_name": "Sec"})))
            .await;
        assert_eq!(status, 201, "{created}");
        let id = created["account_id"].as_str().unwrap().to_string();
        let (status, body) =
            self.admin("POST", &format!("/admin/v1/accounts/{id}/topups"), Some(json!({"amount_usd": amount}))).await;
        assert_eq!(status, 201, "{body}");
        (id, created["api_key"].as_str().unwrap().to_string())
    }

    async fn webhook(&self, key: &str, url: &str, idempotency: Option<&str>) -> (String, String) {
        let (status, body) = self
            .call("POST", "/api/v2/reseller/webhooks", key, Some(json!({"url": url, "events": ["*"]})), idempotency)
            .await;
        assert_eq!(status, 201, "{body}");
        (body["id"].as_str().unwrap().to_string(), body["signing_secret"].as_str().unwrap().to_string())
    }

    async fn digest(&self) -> String {
        let (status, state) = self.admin("GET", "/admin/v1/state", None).await;
        assert_eq!(status, 200, "{state}");
        state["state_digest"].as_str().unwrap().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_or_secret_reaches_the_data_dir_or_the_log_and_every_mode_is_private() {
    let root = test_root("at-rest");
    let dir = root.join("data");
    let log = root.join("server.log");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let receiver = common::Receiver::start().await;
    let mut launch = Launch::new(&dir);
    launch.key_file = root.join("keys").join("secret-key");
    launch.admin_token = None; // the server makes DIR/admin-token
    launch.seed = None; // and draws its seed
    launch.umask = Some(0o000); // modes must be set explicitly, not left to the umask
    launch.log = Some(log.clone());
    launch.rust_log = "trace".into();
    let launch = launch.arg("--allow-insecure-webhooks").arg("--demo");

    let server = launch.start(true);
    let demo_key = server.demo_key.clone().unwrap();
    let admin_token = std::fs::read_to_string(dir.join("admin-token")).unwrap().trim().to_string();
    let session = Session { client: &client, base: server.running.base.clone(), admin: admin_token.clone() };
    let mut keys = vec![demo_key.clone()];
    let mut secrets = Vec::new();

    // Accounts, extra keys, one revoked.
    let (account_a, key_a) = session.account("a@sec.example", 500).await;
    let (_, key_b) = session.account("b@sec.example", 50).await;
    keys.extend([key_a.clone(), key_b.clone()]);
    let mut extra = Vec::new();
    for _ in 0..2 {
        let (status, body) = session.admin("POST", &format!("/admin/v1/accounts/{account_a}/keys"), None).await;
        assert!(status == 200 || status == 201, "{status} {body}");
        extra.push(body["api_key"].as_str().unwrap().to_string());
    }
    keys.extend(extra.iter().cloned());
    let revoked = extra[1].clone();
    let (status, body) = session.admin("DELETE", &format!("/admin/v1/keys/{revoked}"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(session.api("GET", "/wallet/balance", &revoked, None).await.0, 401, "the revoked key is refused");
    assert_eq!(session.api("GET", "/wallet/balance", &extra[0], None).await.0, 200, "the other extra key works");
    // Keys the reseller makes itself (decision 128), one revoked by its id.
    let mut made_ids = Vec::new();
    for _ in 0..2 {
        let (status, body) = session.api("POST", "/keys", &key_b, None).await;
        assert_eq!(status, 201, "{body}");
        keys.push(body["api_key"].as_str().unwrap().to_string());
        made_ids.push(body["id"].as_str().unwrap().to_string());
    }
    let (status, body) = session.api("DELETE", &format!("/keys/{}", made_ids[0]), &key_b, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(session.api("GET", "/wallet/balance", &keys[keys.len() - 2], None).await.0, 401, "revoked by id");
    assert_eq!(session.api("GET", "/wallet/balance", &keys[keys.len() - 1], None).await.0, 200, "the other works");

    // Webhooks: one with an Idempotency-Key (its stored answer keeps the secret sealed;
    // the retry shows the same secret), one per other account.
    let (hook_a, secret_a) = session.webhook(&key_a, &receiver.url, Some("hook-a")).await;
    let (hook_again, secret_again) = session.webhook(&key_a, &receiver.url, Some("hook-a")).await;
    assert_eq!((hook_again.as_str(), secret_again.as_str()), (hook_a.as_str(), secret_a.as_str()), "replayed");
    let (_, secret_b) = session.webhook(&key_b, &receiver.url, None).await;
    let (_, secret_demo) = session.webhook(&demo_key, &receiver.url, None).await;
    secrets.extend([secret_a.clone(), secret_b, secret_demo]);

    // Provision, install, fund, use, defund; a webhook test call.
    let mut iccids = Vec::new();
    for _ in 0..2 {
        let (status, body) = session.api("POST", "/esim/provision", &extra[0], Some(json!({"label": "Sec"}))).await;
        assert_eq!(status, 201, "{body}");
        iccids.push(body["iccid"].as_str().unwrap().to_string());
    }
    for (n, iccid) in iccids.iter().enumerate() {
        assert_eq!(session.admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await.0, 200);
        let (status, body) = session
            .call(
                "POST",
                &format!("/api/v2/reseller/esim/{iccid}/fund"),
                &key_a,
                Some(json!({"amount": 10})),
                Some(&format!("fund-{n}")),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let usage = json!({"mb": 300, "country": "DE"});
        assert_eq!(session.admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(usage)).await.0, 200);
    }
    assert_eq!(session.admin("POST", "/sandbox/v1/clock/advance", Some(json!({"seconds": 1200}))).await.0, 200);
    assert_eq!(session.api("POST", &format!("/esim/{}/defund", iccids[1]), &key_a, None).await.0, 202);
    let (status, tested) = session.api("POST", &format!("/webhooks/{hook_a}/test"), &key_a, None).await;
    println!("webhook test call: {status} {tested}");
    assert_eq!(status, 200, "{tested}");
    let test_delivery = receiver.wait_event("test").await;
    common::verify_signature(&test_delivery, &secret_a);
    let delivered = receiver.received.lock().unwrap().len();
    let digest = session.digest().await;
    let stdout_rest = server.stop();
    assert!(!contains(stdout_rest.as_bytes(), b"rsk_"), "stdout after the start lines: {stdout_rest:?}");

    // What the journal holds before the snapshot replaces it.
    let mut searched_before = Vec::new();
    for secret in keys.iter().chain(&secrets) {
        searched_before.extend(needles(secret));
    }
    searched_before.push(std::fs::read_to_string(&launch.key_file).unwrap().trim().to_string());
    let before_snapshot = search(&walk(&dir), &searched_before, &admin_token);
    let early_modes = wrong_modes(&dir, &walk(&dir));
    println!(
        "before the snapshot: {} files ({} bytes) searched: {} hits; {} wrong modes",
        before_snapshot.0,
        before_snapshot.1,
        before_snapshot.2.len(),
        early_modes.len()
    );

    // A snapshot of exactly this state (the binary snapshots only every 100,000 entries
    // or 64 MiB of journal, so it is written here through the journal's own code).
    {
        use esim_http::journal::{self, FileJournal, RecoverOptions, SnapshotPolicy};
        let recovery = journal::recover(&dir, &RecoverOptions { repair: false, until: None }).unwrap();
        let mut header = recovery.header.unwrap();
        header.first_index = recovery.next_index;
        let engine = recovery.engine.unwrap();
        assert_eq!(engine.state_digest(), digest, "recovered state");
        let mut journal = FileJournal::open(&dir, header, SnapshotPolicy::default()).unwrap();
        journal.write_snapshot(&engine).unwrap();
    }

    // Restart from the snapshot (umask 000 again): one more key and secret after it.
    let server = launch.start(false);
    let session = Session { client: &client, base: server.running.base.clone(), admin: admin_token.clone() };
    assert_eq!(session.digest().await, digest, "the restart from the snapshot has the same state");
    let (status, body) = session.admin("POST", &format!("/admin/v1/accounts/{account_a}/keys"), None).await;
    assert!(status == 200 || status == 201, "{status} {body}");
    keys.push(body["api_key"].as_str().unwrap().to_string());
    let (_, late_secret) = session.webhook(&key_a, &receiver.url, None).await;
    secrets.push(late_secret);
    server.stop();
    let replay = esim_offline(&["replay"], &dir);
    let replay_text = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(replay.status.success(), "{replay_text}");
    let from_snapshot: u64 = replay_text
        .lines()
        .find_map(|l| l.strip_prefix("entries      "))
        .and_then(|rest| rest.split_once('(').map(|(_, r)| r.split_whitespace().next().unwrap().parse().unwrap()))
        .unwrap();
    assert!(from_snapshot > 0, "a snapshot is used: {replay_text}");

    // The search: every file under the data dir (before the snapshot too), and the log.
    let mut searched = Vec::new();
    for secret in keys.iter().chain(&secrets) {
        searched.extend(needles(secret));
    }
    let sealing_key = std::fs::read_to_string(&launch.key_file).unwrap().trim().to_string();
    assert_eq!(sealing_key.len(), 64);
    searched.push(sealing_key);
    let entries = walk(&dir);
    let (files, bytes, mut found) = search(&entries, &searched, &admin_token);
    found.extend(before_snapshot.2);
    let log_bytes = std::fs::read(&log).unwrap();
    for needle in &searched {
        if contains(&log_bytes, needle.as_bytes()) {
            found.push(format!("the log holds {needle}"));
        }
    }
    let log_text = String::from_utf8_lossy(&log_bytes);
    let delete_lines = log_text.lines().filter(|l| l.contains("/admin/v1/keys/")).count();
    let names: Vec<String> = entries
        .iter()
        .map(|(p, d)| format!("{}{}", p.strip_prefix(&dir).unwrap().display(), if *d { "/" } else { "" }))
        .collect();
    println!(
        "searched {files} files ({bytes} bytes) under the data dir and a {} byte log ({} lines, {delete_lines} naming \
         /admin/v1/keys/) for {} keys, {} signing secrets, their hex parts and the sealing key: {} hits; \
         {delivered} webhook deliveries; {from_snapshot} entries from the snapshot\nfiles: {names:?}",
        log_bytes.len(),
        log_text.lines().count(),
        keys.len(),
        secrets.len(),
        found.len()
    );
    assert!(found.is_empty(), "secrets at rest:\n{}", found.join("\n"));
    assert!(log_text.lines().count() > 20, "the log was written (RUST_LOG=trace)");
    assert!(entries.iter().any(|(p, _)| p.extension().is_some_and(|e| e == "snap")), "a snapshot was searched");

    // The admin token file holds the token only.
    assert_eq!(std::fs::read_to_string(dir.join("admin-token")).unwrap(), format!("{admin_token}\n"));
    assert!(admin_token.starts_with("adm_"));

    // Modes, although the server ran under umask 000.
    let mut wrong = early_modes;
    wrong.extend(wrong_modes(&dir, &entries));
    let key_dir = launch.key_file.parent().unwrap().to_path_buf();
    for (path, expected) in [(&launch.key_file, 0o600), (&key_dir, 0o700)] {
        if mode(path) != expected {
            wrong.push(format!("{} is {:o}, not {expected:o}", path.display(), mode(path)));
        }
    }
    println!("modes checked: {} paths at the end, {} wrong in all", entries.len() + 3, wrong.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    std::fs::remove_dir_all(&root).unwrap();
}

/// The data dir must be 0700, every directory under it 0700, every file 0600.
fn wrong_modes(dir: &Path, entries: &[(PathBuf, bool)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (path, expected) in
        std::iter::once((dir, 0o700)).chain(entries.iter().map(|(p, d)| (p.as_path(), if *d { 0o700 } else { 0o600 })))
    {
        if mode(path) != expected {
            wrong.push(format!("{} is {:o}, not {expected:o}", path.display(), mode(path)));
        }
    }
    wrong
}

/// Searches every file of `entries` for every needle, and every file but
/// `admin-token` for the admin token: (files, bytes, hits).
fn search(entries: &[(PathBuf, bool)], needles: &[String], admin_token: &str) -> (usize, usize, Vec<String>) {
    let (mut files, mut bytes, mut found) = (0, 0, Vec::new());
    for (path, is_dir) in entries {
        if *is_dir {
            continue;
        }
        let content = std::fs::read(path).unwrap();
        files += 1;
        bytes += content.len();
        for needle in needles {
            if contains(&content, needle.as_bytes()) {
                found.push(format!("{} holds {needle}", path.display()));
            }
        }
        if path.file_name().unwrap() != "admin-token" && contains(&content, admin_token.as_bytes()) {
            found.push(format!("{} holds the admin token", path.display()));
        }
    }
    (files, bytes, found)
}

/// The seed of a data dir, read from the JSON header of its first segment.
fn seed_of(dir: &Path) -> u64 {
    let mut segments: Vec<PathBuf> =
        std::fs::read_dir(dir.join("journal")).unwrap().map(|e| e.unwrap().path()).collect();
    segments.sort();
    let bytes = std::fs::read(&segments[0]).unwrap();
    assert_eq!(&bytes[..8], b"ESIMJRN1");
    let length = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[16..16 + length]).unwrap();
    header["config"]["seed"].as_u64().unwrap_or_else(|| panic!("no config.seed in {header}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_in_every_segment_header_reproduces_ids_but_no_key_or_secret() {
    let root = test_root("seed");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut seen = Vec::new();
    let mut seed = None;
    for name in ["first", "same-seed"] {
        let dir = root.join(name);
        let mut launch = Launch::new(&dir);
        launch.key_file = root.join(format!("{name}.secret-key"));
        launch.seed = seed; // None first: the server draws it from the OS
        let server = launch.arg("--allow-insecure-webhooks").arg("--demo").start(true);
        let key = server.demo_key.clone().unwrap();
        let session = Session { client: &client, base: server.running.base.clone(), admin: process::ADMIN.into() };
        let (status, account) = session.api("GET", "/account", &key, None).await;
        assert_eq!(status, 200, "{account}");
        let account_id = account["id"].as_str().or(account["account_id"].as_str()).unwrap().to_string();
        let (hook, secret) = session.webhook(&key, "http://127.0.0.1:9/hook", None).await;
        server.stop();
        if seed.is_none() {
            seed = Some(seed_of(&dir));
        }
        assert_eq!(seed_of(&dir), seed.unwrap());
        seen.push((account_id, hook, key, secret));
    }
    let (first, again) = (&seen[0], &seen[1]);
    println!(
        "seed {} read from the segment header; account {} / {}, webhook {} / {}; demo keys {}… / {}…; \
         secrets {}… / {}…",
        seed.unwrap(),
        first.0,
        again.0,
        first.1,
        again.1,
        &first.2[..12],
        &again.2[..12],
        &first.3[..14],
        &again.3[..14]
    );
    assert_eq!((&first.0, &first.1), (&again.0, &again.1), "the same seed draws the same ids");
    for (one, other) in [(&first.2, &again.2), (&first.3, &again.3)] {
        for (a, b) in needles(one).iter().zip(needles(other)) {
            assert_ne!(a, &b, "the seed reproduced a secret");
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_second_server_on_a_live_data_dir_exits_at_once_naming_the_holder() {
    let root = test_root("lock");
    let dir = root.join("data");
    let mut launch = Launch::new(&dir);
    launch.key_file = root.join("secret-key");
    let first = launch.arg("--demo=false").start(false);
    let holder = first.pid();
    let mut second_launch = Launch::new(&dir);
    second_launch.key_file = root.join("secret-key");
    second_launch.log = Some(root.join("second.log"));
    let started = Instant::now();
    let mut second = second_launch.arg("--demo=false").command().spawn().unwrap();
    let exit = wait_timeout(&mut second, Duration::from_secs(5));
    let elapsed = started.elapsed();
    if exit.is_none() {
        let _ = second.kill();
        let _ = second.wait();
    }
    let stderr = std::fs::read_to_string(root.join("second.log")).unwrap_or_default();
    println!("second server: exit {exit:?} after {elapsed:?}; first pid {holder}; stderr:\n{stderr}");
    first.stop();
    let _ = std::fs::remove_dir_all(&root);
    let exit = exit.expect("the second server is still running after 5 s: the data dir lock is not taken by serve");
    assert!(!exit.success(), "{exit:?}");
    assert!(stderr.contains(&format!("pid {holder}")), "{stderr}");
}

/// `ESIMJRN1` and one header record `[len u32 LE][crc32c u32 LE][payload]`.
fn segment_with_header(header: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(header).unwrap();
    let mut bytes = b"ESIMJRN1".to_vec();
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    bytes
}

#[test]
fn a_version_1_journal_is_refused_naming_both_versions() {
    use esim_engine::{EngineConfig, Millis};
    use esim_http::journal::{SegmentHeader, FORMAT_VERSION};
    let root = test_root("version");
    let full = serde_json::to_value(SegmentHeader {
        version: 1,
        config: EngineConfig::default(),
        clock: esim_http::ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    })
    .unwrap();
    let minimal = json!({"version": 1, "seed": 7});
    for (name, header) in [("full-header", full), ("minimal-header", minimal)] {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("journal")).unwrap();
        let segment = dir.join("journal").join(format!("{:020}.seg", 0));
        let bytes = segment_with_header(&header);
        std::fs::write(&segment, &bytes).unwrap();
        let mut launch = Launch::new(&dir);
        launch.key_file = root.join("secret-key");
        launch.log = Some(root.join(format!("{name}.log")));
        let started = Instant::now();
        let mut child = launch.command().spawn().unwrap();
        let exit = wait_timeout(&mut child, Duration::from_secs(10));
        if exit.is_none() {
            let _ = child.kill();
        }
        let _ = child.wait();
        let mut stdout = String::new();
        let _ = std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout);
        let stderr = std::fs::read_to_string(root.join(format!("{name}.log"))).unwrap();
        println!("{name}: exit {exit:?} after {:?}; stdout {stdout:?}; stderr: {stderr}", started.elapsed());
        let exit = exit.expect("esim serve ends on a version 1 journal");
        assert!(!exit.success());
        assert!(stdout.is_empty(), "it did not listen: {stdout}");
        assert!(
            stderr.contains("version 1") && stderr.contains(&format!("version {FORMAT_VERSION}")),
            "the refusal names both versions: {stderr}"
        );
        assert_eq!(std::fs::read(&segment).unwrap(), bytes, "the old segment is left as it was");
    }
    std::fs::remove_dir_all(&root).unwrap();
}
