//! Hot standby and fenced failover on a real PostgreSQL (issue 17, second slice): the
//! owner killed with SIGKILL again and again under concurrent fund, provision and defund
//! calls while a standby runs; a zombie owner (SIGSTOP past its lease, then SIGCONT);
//! and a standby that never acknowledges a write while the owner's lease is live, answers
//! no one without a credential but `/healthz` and `/readyz`, and refuses to start with a
//! secret key file that is wrong or missing.
//! Each test makes its own throwaway cluster (`tests/pg`), with a short lease.

use rust_decimal::Decimal;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
mod failover;
mod pg;
mod process;
use failover::{
    check_books, log_of, remove_dirs, replay_acked, signal, start_node, wait_standby, work, Books, Node, WorkDirs,
};
use pg::{dec, replayed_digest, wait_ready, work_dir, Cluster};
use process::{call, key_file, unpooled_client, HttpClient};

/// SIGKILL the owner 10 times under concurrent fund, provision and defund calls from
/// clients that try either node; after each takeover: every acknowledged change present,
/// nothing applied twice (replays give the same answers, counts unchanged), money
/// conserved, and the live digest equals `esim replay --store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_after_each_sigkill_and_loses_nothing() {
    const KILLS: usize = 10;
    const WORKERS: usize = 3;
    const LEASE_MS: u64 = 1_500;
    let cluster = Cluster::start("failover");
    let url = cluster.url();
    let client = unpooled_client();
    let mut dirs = WorkDirs::new("failover");
    let first_dir = dirs.next();
    let keys_file = key_file(&first_dir);
    let mut slots: Vec<(Node, PathBuf)> = Vec::new();
    let owner = start_node(&first_dir, &url, &keys_file, LEASE_MS);
    let server = common::TestServer::attach(owner.base());
    wait_ready(&server, Duration::from_secs(10)).await;
    slots.push((owner, first_dir));
    let dir = dirs.next();
    let standby = start_node(&dir, &url, &keys_file, LEASE_MS);
    wait_standby(&client, &standby.base()).await;
    slots.push((standby, dir));
    let nodes = Arc::new(Mutex::new(slots.iter().map(|(s, _)| s.base()).collect::<Vec<_>>()));

    let mut accounts = Vec::new();
    let mut fee = Decimal::ZERO;
    for _ in 0..WORKERS {
        let (_, key) = server.account(1_000_000.0).await;
        server.provision(&key, None).await;
        let wallet = server.api("GET", "/wallet/balance", &key, None).await;
        fee = dec(&wallet.body["lifetime_usage_usd"]);
        assert!(fee > Decimal::ZERO, "{}", wallet.body);
        let books = Books { provisioned: 1, ..Books::default() };
        accounts.push((key, Arc::new(Mutex::new(books))));
    }
    let mut owner_slot = 0usize;
    let mut takeovers_ms = Vec::new();
    for round in 0..KILLS {
        let stop = Arc::new(AtomicBool::new(false));
        let round_start: Vec<usize> = accounts.iter().map(|(_, b)| b.lock().unwrap().acked.len()).collect();
        let workers: Vec<_> = accounts
            .iter()
            .enumerate()
            .map(|(index, (key, books))| {
                tokio::spawn(work(
                    client.clone(),
                    nodes.clone(),
                    key.clone(),
                    round,
                    index,
                    books.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(250)).await;
        // SIGKILL the owner in the middle of the writes.
        let killed_at = Instant::now();
        let (mut killed, killed_dir) = slots.remove(owner_slot);
        killed.kill();
        let _ = killed_dir;
        // The standby (now the only node in `slots`) takes over once the lease ran out.
        let survivor = common::TestServer::attach(slots[0].0.base());
        wait_ready(&survivor, Duration::from_secs(10)).await;
        takeovers_ms.push(killed_at.elapsed().as_millis());
        let log = log_of(&slots[0].1);
        assert!(log.contains("took shard 0 over"), "round {round}: the takeover is logged:\n{log}");
        // A new standby in the killed one's place.
        let dir = dirs.next();
        let replacement = start_node(&dir, &url, &keys_file, LEASE_MS);
        wait_standby(&client, &replacement.base()).await;
        slots.insert(owner_slot, (replacement, dir));
        owner_slot = 1 - owner_slot;
        *nodes.lock().unwrap() = slots.iter().map(|(s, _)| s.base()).collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            worker.await.unwrap();
        }

        let server = common::TestServer::attach(slots[owner_slot].0.base());
        let mut round_ops = 0;
        for ((key, books), start) in accounts.iter().zip(&round_start) {
            // A copy: the workers have ended, and no lock is held across the calls.
            let books = books.lock().unwrap().clone();
            let when = format!("round {round}");
            check_books(&server, key, &books, fee, &when).await;
            // Idempotent replays of this round's writes answer the same, and apply nothing.
            round_ops += replay_acked(&client, &server.base, key, &books.acked[*start..], &when).await;
            check_books(&server, key, &books, fee, &format!("{when}, after the replays")).await;
        }
        assert!(round_ops >= WORKERS, "round {round}: the clients really worked ({round_ops} writes)");
        let report = server.admin("GET", "/admin/v1/reports/conservation", None).await;
        assert_eq!(report.body["conserved"], json!(true), "round {round}: {}", report.body);
        assert_eq!(server.digest().await, replayed_digest(&url), "round {round}: live digest = replay");
    }
    let defunds: u64 = accounts.iter().map(|(_, b)| b.lock().unwrap().defunded).sum();
    assert!(defunds > 0, "defunds were among the writes");
    eprintln!("takeover times after SIGKILL (ms, lease {LEASE_MS}): {takeovers_ms:?}");
    drop(slots);
    dirs.remove();
    let _ = std::fs::remove_file(&keys_file);
}

/// The start of the zombie and standby tests: a cluster, an owner serving one account
/// with one eSIM, and a second node that has become its standby.
struct Pair {
    cluster: Cluster,
    client: HttpClient,
    dirs: [PathBuf; 2],
    first: Node,
    a: common::TestServer,
    second: Node,
    b: common::TestServer,
    account_id: String,
    key: String,
    iccid: String,
}

impl Pair {
    async fn start(name: &str, lease_ms: u64) -> Pair {
        let cluster = Cluster::start(name);
        let url = cluster.url();
        let client = unpooled_client();
        let dirs = [work_dir(&format!("{name}-a")), work_dir(&format!("{name}-b"))];
        let keys_file = key_file(&dirs[0]);
        let first = start_node(&dirs[0], &url, &keys_file, lease_ms);
        let a = common::TestServer::attach(first.base());
        wait_ready(&a, Duration::from_secs(10)).await;
        let (account_id, key) = a.account(1_000.0).await;
        let iccid = a.provision(&key, None).await;
        let second = start_node(&dirs[1], &url, &keys_file, lease_ms);
        let b = common::TestServer::attach(second.base());
        wait_standby(&client, &b.base).await;
        Pair { cluster, client, dirs, first, a, second, b, account_id, key, iccid }
    }
}

/// The zombie: the owner is frozen (SIGSTOP) past its lease, the standby takes over and
/// acknowledges writes; the old owner woken (SIGCONT) answers every write 503 (one sent
/// while it was frozen included) and none of them reaches the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_owner_acknowledges_nothing_after_the_takeover() {
    const LEASE_MS: u64 = 1_000;
    let Pair { cluster, client, dirs, mut first, a, mut second, b, account_id, key, iccid } =
        Pair::start("zombie", LEASE_MS).await;
    let url = cluster.url();
    let fee = dec(&a.api("GET", "/wallet/balance", &key, None).await.body["lifetime_usage_usd"]);
    let fund = a.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 5}))).await;
    assert_eq!(fund.status, 200, "{}", fund.body);
    let epoch_a: i64 = cluster.psql("SELECT epoch FROM shard_owner").parse().unwrap();

    signal(first.pid(), "STOP");
    let frozen_at = Instant::now();
    wait_ready(&b, Duration::from_secs(10)).await;
    assert!(frozen_at.elapsed() >= Duration::from_millis(LEASE_MS / 2), "no takeover before the lease ran out");
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner"), (epoch_a + 1).to_string());
    let fund = b.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 9}))).await;
    assert_eq!(fund.status, 200, "the new owner acknowledges writes: {}", fund.body);
    let head = cluster.psql("SELECT head FROM shard_owner");

    // A write reaches the frozen owner's socket; then it wakes.
    let (zombie_client, zombie_base, zombie_key, zombie_path) =
        (client.clone(), a.base.clone(), key.clone(), format!("/api/v2/reseller/esim/{iccid}/fund"));
    let frozen_write = tokio::spawn(async move {
        call(&zombie_client, &zombie_base, "POST", &zombie_path, &zombie_key, Some(json!({"amount": 7})), Some("z-0"))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(first.pid(), "CONT");
    let answered = frozen_write.await.unwrap().expect("the woken owner answers");
    assert_eq!(answered.0, 503, "{}", answered.1);
    assert_eq!(answered.1["code"], json!("SERVICE_UNAVAILABLE"), "{}", answered.1);
    // Every later write too, of every kind.
    let refused = [
        a.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 3}))).await,
        a.api("POST", "/esim/provision", &key, Some(json!({"end_user_reference": "z"}))).await,
        a.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), Some(json!({"amount_usd": 11}))).await,
    ];
    for reply in &refused {
        assert_eq!(reply.status, 503, "{}", reply.body);
    }
    let ready = a.call("GET", "/readyz", "", None).await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.to_string().contains("no longer owns"), "{}", ready.body);
    // None of them is in the store: the head did not move, no entry of the old epoch
    // after it, and the new owner's books have only its own fund.
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), head);
    assert_eq!(cluster.psql(&format!("SELECT count(*) FROM journal WHERE epoch = {epoch_a} AND seq >= {head}")), "0");
    let wallet = b.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(dec(&wallet.body["lifetime_usage_usd"]), fee + Decimal::from(14), "{}", wallet.body);
    let live = b.digest().await;
    assert_eq!(live, replayed_digest(&url));
    let log = log_of(&dirs[1]);
    assert!(log.contains("took shard 0 over") && log.contains(&format!("epoch={}", epoch_a + 1)), "{log}");

    first.kill();
    second.stop();
    remove_dirs(&dirs);
}

/// A standby never acknowledges a write while the owner's lease is live: for three
/// leases of an idle owner (its renewals keep the lease) every write to the standby is
/// 503 with Retry-After and Connection: close, the epoch does not move, and the owner
/// still acknowledges. Without a credential it answers 401 or 404, never the owner's
/// detail (the operator's, behind the admin token). A third node with a wrong or a
/// missing key file refuses to start. A graceful stop gives the lease back: the standby
/// takes over with every acknowledged change and the digest of `esim replay --store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_acknowledges_no_write_while_the_lease_is_live() {
    const LEASE_MS: u64 = 1_000;
    let Pair { cluster, dirs, mut first, a, mut second, b, account_id, key, iccid, .. } =
        Pair::start("standby", LEASE_MS).await;
    let url = cluster.url();
    let epoch = cluster.psql("SELECT epoch FROM shard_owner");
    let head = cluster.psql("SELECT head FROM shard_owner");

    let began = Instant::now();
    let mut tries = 0;
    while began.elapsed() < Duration::from_millis(3 * LEASE_MS) {
        let reply = b.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 1}))).await;
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert_eq!(reply.body["code"], json!("SERVICE_UNAVAILABLE"));
        assert!(reply.body["message"].as_str().unwrap().contains("standby"), "{}", reply.body);
        assert_eq!(reply.headers["retry-after"], "1");
        assert_eq!(reply.headers["connection"], "close");
        let topup =
            b.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), Some(json!({"amount_usd": 10}))).await;
        assert_eq!(topup.status, 503, "{}", topup.body);
        assert_eq!(b.call("GET", "/healthz", "", None).await.status, 200);
        let ready = b.call("GET", "/readyz", "", None).await;
        assert_eq!(ready.status, 503);
        assert!(ready.body["message"].as_str().unwrap().starts_with("standby"), "{}", ready.body);
        tries += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(tries >= 10, "{tries}");
    // Without a credential the standby answers only /healthz and /readyz, and says
    // nothing of the owner (its pid and host), its epoch or the journal's length.
    let owner = cluster.psql("SELECT owner FROM shard_owner");
    for (method, path, token, status) in [
        ("POST", format!("/api/v2/reseller/esim/{iccid}/fund"), "", 401),
        ("GET", "/admin/v1/state".to_string(), "", 401),
        ("GET", "/admin/v1/state".to_string(), key.as_str(), 401),
        ("GET", "/metrics".to_string(), "", 401),
        ("GET", "/x".to_string(), "", 404),
        ("GET", "/readyz".to_string(), "", 503),
    ] {
        let reply = b.call(method, &path, token, None).await;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        let text = reply.body.to_string();
        assert!(!text.contains(&owner) && !text.contains("epoch") && !text.contains("entries"), "{path}: {text}");
    }
    // The operator (the admin token) reads whom it follows.
    let detail = b.call("GET", "/readyz", common::ADMIN, None).await;
    assert!(detail.body["message"].as_str().unwrap().contains(&owner), "{}", detail.body);
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner"), epoch, "no takeover of a live lease");
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), head, "nothing appended by the standby");
    // The idle owner kept its lease and still acknowledges.
    let fund = a.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 4}))).await;
    assert_eq!(fund.status, 200, "{}", fund.body);
    // A standby whose key file is wrong, or missing, refuses to start, naming it.
    let hook =
        a.api("POST", "/webhooks", &key, Some(json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] }))).await;
    assert_eq!(hook.status, 201, "{}", hook.body);
    let third = work_dir("standby-c");
    let wrong = third.with_extension("other-key");
    std::fs::write(&wrong, format!("{}\n", "5a".repeat(32))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let missing = third.with_extension("missing-key");
    for (keys, says) in [(&wrong, "does not open the signing secret"), (&missing, "does not exist")] {
        let log = refused_start(pg::launch(&third, &url).arg("--lease-ms").arg(&LEASE_MS.to_string()), keys, &third);
        assert!(log.contains(&format!("the secret key file {} {says}", keys.display())), "{log}");
        assert!(log.contains("this process cannot be the store's standby"), "{log}");
    }
    assert!(!missing.exists(), "no key file made by the refused start");
    // Nor does it take the live owner's lease with --take-over (that would fence it).
    let node = pg::launch(&third, &url).arg("--lease-ms").arg(&LEASE_MS.to_string()).arg("--take-over");
    let log = refused_start(node, &wrong, &third);
    assert!(log.contains("--take-over refused: this process cannot serve the store"), "{log}");
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner"), epoch, "the owner is not fenced");
    remove_dirs(std::slice::from_ref(&third));
    let _ = std::fs::remove_file(&wrong);
    let wallet_before = a.api("GET", "/wallet/balance", &key, None).await.body;
    let digest_before = a.digest().await;

    first.stop();
    assert!(log_of(&dirs[0]).contains("gave the lease of shard 0 back"), "{}", log_of(&dirs[0]));
    wait_ready(&b, Duration::from_secs(10)).await;
    assert_eq!(b.digest().await, digest_before, "the standby followed every entry");
    assert_eq!(b.api("GET", "/wallet/balance", &key, None).await.body, wallet_before);
    let fund = b.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 2}))).await;
    assert_eq!(fund.status, 200, "{}", fund.body);
    assert_eq!(b.digest().await, replayed_digest(&url));
    second.stop();
    remove_dirs(&dirs);
}

/// Starts `node` with the key file `keys` in `dir` and expects the start refused (a
/// non-zero exit within 20 s): answers the node's log.
fn refused_start(mut node: process::Launch, keys: &std::path::Path, dir: &std::path::Path) -> String {
    node.key_file = keys.to_path_buf();
    let mut child = node.command().spawn().unwrap();
    let exit = process::wait_timeout(&mut child, Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let log = log_of(dir);
    assert!(!exit.expect("refused within 20 s").success(), "{log}");
    log
}
