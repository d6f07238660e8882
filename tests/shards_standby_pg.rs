//! A hot standby per shard of a sharded PostgreSQL store (issue 17): 4 shards, node A
//! owning shards 0 and 1, node B 2 and 3, and node C (`--standby-shards 2,3`, owning none)
//! following shards 2 and 3 while it forwards their requests to B. Under concurrent
//! fund, provision and defund calls on an account of every shard, through every node,
//! the owner of shards 2 and 3 is killed with SIGKILL, round after round: the standby
//! takes both shards over and serves them, a new standby takes its place, and after each
//! takeover every acknowledged change is present, nothing is applied twice (idempotent
//! replays answer the same and change nothing), money is conserved per shard and in
//! total, and every shard's digest equals `esim replay --store`. Last, the zombie: the
//! owner frozen past its lease (SIGSTOP), the standby takes over and acknowledges, the
//! old owner woken (SIGCONT) acknowledges nothing more for those shards itself: its
//! requests for them reach the new owner.

mod common;
mod failover;
mod pg;
mod process;

use common::TestServer;
use failover::{check_books, log_of, replay_acked, signal, start_node_with, work, write, Books, Node, WorkDirs};
use pg::{assert_replay_matches, dec, launch, wait_ready, Cluster};
use process::{key_file, unpooled_client, wait_timeout};
use rust_decimal::Decimal;
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 4;
const LEASE_MS: u64 = 1_500;
/// SIGKILLs of the owner of shards 2 and 3 (the unsharded store's test kills 10 times).
const KILLS: usize = 3;

/// How many times the node logging to `dir`'s log started serving a shard it took over.
fn adopted(dir: &Path) -> usize {
    log_of(dir).matches("serving a shard taken over").count()
}

/// Waits until the node logging to `dir`'s log has adopted `count` shards in all.
async fn wait_adopted(dir: &Path, count: usize) -> Duration {
    let began = Instant::now();
    while adopted(dir) < count {
        assert!(began.elapsed() < Duration::from_secs(20), "no takeover after 20 s:\n{}", log_of(dir));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    began.elapsed()
}

/// Waits until the node logging to `dir`'s log follows shards 2 and 3.
async fn wait_following(dir: &Path) {
    let began = Instant::now();
    loop {
        let log = log_of(dir);
        if log.contains("following shard 2 as its hot standby") && log.contains("following shard 3 as its hot standby")
        {
            return;
        }
        assert!(began.elapsed() < Duration::from_secs(10), "not following:\n{log}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The owner (epoch and address) of `shard` as the store says.
fn owner_row(cluster: &Cluster, shard: usize) -> (i64, String) {
    let row = cluster.psql(&format!("SELECT epoch || ' ' || address FROM shard_owner WHERE shard = {shard}"));
    let (epoch, address) = row.split_once(' ').expect("epoch and address");
    (epoch.parse().unwrap(), address.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_node_takes_over_the_shards_of_a_killed_node_and_loses_nothing() {
    let cluster = Cluster::start("shard-standby");
    let url = cluster.url();
    let client = unpooled_client();
    let mut dirs = WorkDirs::new("shard-standby");
    let dir_a = dirs.next();
    let keys_file = key_file(&dir_a);
    let start = |dir: &Path, role: &[&str]| {
        let mut args = vec!["--shards", "4"];
        args.extend_from_slice(role);
        start_node_with(dir, &url, &keys_file, LEASE_MS, &args)
    };
    let node_a = start(&dir_a, &["--own-shards", "0,1"]);
    let a = TestServer::attach(node_a.base());
    wait_ready(&a, Duration::from_secs(10)).await;
    let dir_b = dirs.next();
    let node_b = start(&dir_b, &["--own-shards", "2,3"]);
    wait_ready(&TestServer::attach(node_b.base()), Duration::from_secs(10)).await;
    let dir_c = dirs.next();
    let node_c = start(&dir_c, &["--standby-shards", "2,3"]);
    wait_following(&dir_c).await;
    // `owner` serves shards 2 and 3; `standby` follows them.
    let (mut owner, mut owner_dir) = (node_b, dir_b);
    let (mut standby, mut standby_dir) = (node_c, dir_c);

    // An account on every shard, each with an eSIM, made through the standby node (its
    // requests reach the owners: A for 0 and 1, B for 2 and 3).
    let through_c = TestServer::attach(standby.base());
    let mut accounts: Vec<(usize, String, Arc<Mutex<Books>>)> = Vec::new();
    let mut fee = Decimal::ZERO;
    while accounts.len() < SHARDS {
        let (account_id, key) = through_c.account(1_000_000.0).await;
        let shard = esim_http::shards::shard_of_account_id(&account_id, SHARDS);
        if accounts.iter().any(|(placed, _, _)| *placed == shard) {
            continue;
        }
        through_c.provision(&key, None).await;
        fee = dec(&through_c.api("GET", "/wallet/balance", &key, None).await.body["lifetime_usage_usd"]);
        assert!(fee > Decimal::ZERO);
        accounts.push((shard, key, Arc::new(Mutex::new(Books { provisioned: 1, ..Books::default() }))));
    }
    accounts.sort_by_key(|(shard, _, _)| *shard);
    let nodes = Arc::new(Mutex::new(vec![node_a.base(), owner.base(), standby.base()]));

    let mut takeovers_ms = Vec::new();
    for round in 0..KILLS {
        let when = format!("round {round}");
        // A new minute of service time: each key's rate window starts afresh.
        a.advance(61).await;
        let epochs: Vec<i64> = (2..4).map(|shard| owner_row(&cluster, shard).0).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let round_start: Vec<usize> = accounts.iter().map(|(_, _, b)| b.lock().unwrap().acked.len()).collect();
        let workers: Vec<_> = accounts
            .iter()
            .map(|(shard, key, books)| {
                tokio::spawn(work(
                    client.clone(),
                    nodes.clone(),
                    key.clone(),
                    round,
                    *shard,
                    books.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(250)).await;
        let adopted_before = adopted(&standby_dir);
        owner.kill();
        takeovers_ms.push(wait_adopted(&standby_dir, adopted_before + 2).await.as_millis());
        for (shard, epoch) in (2..4).zip(&epochs) {
            let (now, address) = owner_row(&cluster, shard);
            assert_eq!(now, epoch + 1, "{when}: shard {shard} taken over once");
            assert_eq!(address, standby.base(), "{when}: shard {shard}'s owner address is the standby's");
        }
        for shard in 0..2 {
            assert_eq!(owner_row(&cluster, shard).1, node_a.base(), "{when}: A keeps shard {shard}");
        }
        // The standby serves; a new standby takes its place.
        let dir = dirs.next();
        let replacement = start(&dir, &["--standby-shards", "2,3"]);
        wait_following(&dir).await;
        std::mem::swap(&mut owner, &mut standby);
        std::mem::swap(&mut owner_dir, &mut standby_dir);
        let killed = std::mem::replace(&mut standby, replacement);
        drop(killed);
        standby_dir = dir;
        *nodes.lock().unwrap() = vec![node_a.base(), owner.base(), standby.base()];
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            worker.await.unwrap();
        }

        // Through every node: the books of every shard.
        for base in [node_a.base(), owner.base(), standby.base()] {
            let server = TestServer::attach(base.clone());
            for (shard, key, books) in &accounts {
                let books = books.lock().unwrap().clone();
                check_books(&server, key, &books, fee, &format!("{when}, shard {shard} through {base}")).await;
            }
        }
        // Idempotent replays of this round's writes (through A: forwarded for 2 and 3)
        // answer the same and apply nothing.
        let mut round_ops = 0;
        for ((shard, key, books), start) in accounts.iter().zip(&round_start) {
            let books = books.lock().unwrap().clone();
            round_ops += replay_acked(&client, &a.base, key, &books.acked[*start..], &when).await;
            check_books(&a, key, &books, fee, &format!("{when}, shard {shard}, after the replays")).await;
        }
        assert!(round_ops >= SHARDS, "{when}: the clients really worked ({round_ops} writes)");
        let report = a.admin("GET", "/admin/v1/reports/conservation", None).await;
        assert_eq!(report.status, 200, "{}", report.body);
        assert_eq!(report.body["conserved"], json!(true), "{when}: {}", report.body);
        let live = a.settled_state().await;
        assert_eq!(
            live,
            TestServer::attach(owner.base()).settled_state().await,
            "{when}: one state through A and the new owner"
        );
        assert_replay_matches(&url, &live);
    }
    let defunds: u64 = accounts.iter().map(|(_, _, b)| b.lock().unwrap().defunded).sum();
    assert!(defunds > 0, "defunds were among the writes");
    eprintln!("shards 2 and 3 taken over after SIGKILL in (ms, lease {LEASE_MS}): {takeovers_ms:?}");

    // The zombie: the owner of shards 2 and 3 frozen past its lease.
    a.advance(61).await;
    let (_, key_2, books_2) = &accounts[2];
    let (zombie_epoch, _) = owner_row(&cluster, 2);
    let adopted_before = adopted(&standby_dir);
    signal(owner.running.child.id(), "STOP");
    wait_adopted(&standby_dir, adopted_before + 2).await;
    // A new eSIM on shard 2 (the workers' last one may be being defunded).
    let iccid = TestServer::attach(standby.base()).provision(key_2, None).await;
    let fund = |node: &Node, amount: i64, idem: &str| {
        let (client, nodes, key, iccid, idem) =
            (client.clone(), Mutex::new(vec![node.base()]), key_2.clone(), iccid.clone(), idem.to_string());
        async move { write(&client, &nodes, &key, &format!("/esim/{iccid}/fund"), json!({"amount": amount}), &idem).await }
    };
    let acked = fund(&standby, 9, "zombie-1").await;
    assert_eq!(acked.status, 200, "the new owner acknowledges: {}", acked.answer);
    let head = cluster.psql("SELECT head FROM shard_owner WHERE shard = 2");
    signal(owner.running.child.id(), "CONT");
    // Through the woken node: refused (503) until it knows it lost the shard, then
    // forwarded to the new owner, which applies it once.
    let acked = fund(&owner, 7, "zombie-2").await;
    assert_eq!(acked.status, 200, "{}", acked.answer);
    assert_eq!(
        cluster.psql(&format!(
            "SELECT count(*) FROM journal WHERE shard = 2 AND epoch = {zombie_epoch} AND seq >= {head}"
        )),
        "0",
        "nothing of the old epoch after the takeover"
    );
    {
        let mut books = books_2.lock().unwrap();
        books.provisioned += 1;
        books.funded += Decimal::from(16);
    }
    let books = books_2.lock().unwrap().clone();
    for base in [node_a.base(), owner.base(), standby.base()] {
        check_books(&TestServer::attach(base), key_2, &books, fee, "after the zombie woke").await;
    }
    let live = a.settled_state().await;
    assert_replay_matches(&url, &live);
    let zombie_log = log_of(&owner_dir);
    assert!(
        zombie_log.contains("no longer owns") || zombie_log.contains("the journal was taken over"),
        "the zombie says it lost the shards:\n{zombie_log}"
    );

    drop((node_a, owner, standby));
    dirs.remove();
    let _ = std::fs::remove_file(&keys_file);
}

/// A key file of its own (another key than the nodes' one), mode 0600.
fn other_key_file(path: &Path) -> std::path::PathBuf {
    std::fs::write(path, format!("{}\n", "5a".repeat(32))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    path.to_path_buf()
}

/// A node of the 2-shard store at `url` following shard 1 with `keys` that must refuse
/// to start: its exit (non-zero, within 20 s) and log.
fn refused_standby(dir: &Path, url: &str, keys: &Path) -> String {
    let mut node = launch(dir, url).arg("--lease-ms").arg(&LEASE_MS.to_string());
    for arg in ["--shards", "2", "--standby-shards", "1"] {
        node = node.arg(arg);
    }
    node.key_file = keys.to_path_buf();
    let mut child = node.command().spawn().unwrap();
    let exit = wait_timeout(&mut child, Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let log = log_of(dir);
    let exit = exit.unwrap_or_else(|| panic!("a standby that cannot serve its shard still runs after 20 s:\n{log}"));
    assert!(!exit.success(), "{exit:?}\n{log}");
    log
}

/// A standby checks before it takes (issue 35): a node with `--standby-shards 1` whose
/// secret key file is wrong or missing refuses to start, naming the file (and makes no
/// key file); one started while shard 1 held no sealed secret, with a wrong key, never
/// takes the shard over once one is sealed and the owner is killed (the owner row is
/// left as it was, so a node with the right key takes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_that_cannot_open_its_shards_secrets_neither_starts_nor_takes_over() {
    let cluster = Cluster::start("standby-keys");
    let url = cluster.url();
    let mut dirs = WorkDirs::new("standby-keys");
    let dir_a = dirs.next();
    let keys_file = key_file(&dir_a);
    let start = |dir: &Path, keys: &Path, role: &[&str]| {
        let mut args = vec!["--shards", "2"];
        args.extend_from_slice(role);
        start_node_with(dir, &url, keys, LEASE_MS, &args)
    };
    let node_a = start(&dir_a, &keys_file, &["--own-shards", "0"]);
    let a = TestServer::attach(node_a.base());
    wait_ready(&a, Duration::from_secs(10)).await;
    let dir_b = dirs.next();
    let mut node_b = start(&dir_b, &keys_file, &["--own-shards", "1"]);
    wait_ready(&TestServer::attach(node_b.base()), Duration::from_secs(10)).await;
    // C: another key, while shard 1 holds no sealed secret (nothing tells the keys apart).
    let dir_c = dirs.next();
    let wrong = other_key_file(&dir_c.with_extension("other-key"));
    let node_c = start(&dir_c, &wrong, &["--standby-shards", "1"]);
    let began = Instant::now();
    while !log_of(&dir_c).contains("following shard 1 as its hot standby") {
        assert!(began.elapsed() < Duration::from_secs(10), "C does not follow:\n{}", log_of(&dir_c));
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // A webhook of an account of shard 1: its signing secret sealed with the nodes' key.
    let key = loop {
        let (account_id, key) = a.account(10.0).await;
        if esim_http::shards::shard_of_account_id(&account_id, 2) == 1 {
            break key;
        }
    };
    let hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] });
    let made = a.api("POST", "/webhooks", &key, Some(hook)).await;
    assert_eq!(made.status, 201, "{}", made.body);

    // A new standby with the wrong key file, and one with none: refused, naming it.
    let dir_d = dirs.next();
    let log = refused_standby(&dir_d, &url, &wrong);
    assert!(log.contains(&format!("the secret key file {} does not open", wrong.display())), "{log}");
    assert!(log.contains("this node cannot be the standby of shard 1"), "{log}");
    let dir_e = dirs.next();
    let missing = dir_e.with_extension("missing-key");
    let log = refused_standby(&dir_e, &url, &missing);
    assert!(log.contains(&format!("the secret key file {} does not exist", missing.display())), "{log}");
    assert!(!missing.exists(), "no key file made by the refused start");

    // The owner of shard 1 killed: C, which cannot open the new secret, does not take it.
    let (epoch, address) = owner_row(&cluster, 1);
    node_b.kill();
    tokio::time::sleep(Duration::from_millis(4 * LEASE_MS)).await;
    let log_c = log_of(&dir_c);
    assert!(log_c.contains("this standby cannot serve the shard: it does not take it over"), "{log_c}");
    assert!(!log_c.contains("serving a shard taken over"), "{log_c}");
    assert_eq!(owner_row(&cluster, 1), (epoch, address), "the owner row is left as it was");
    // A standby with the right key takes it over and serves it.
    let dir_f = dirs.next();
    let node_f = start(&dir_f, &keys_file, &["--standby-shards", "1"]);
    wait_adopted(&dir_f, 1).await;
    assert_eq!(owner_row(&cluster, 1), (epoch + 1, node_f.base()));
    let hooks = TestServer::attach(node_f.base()).api("GET", "/webhooks", &key, None).await;
    assert_eq!(hooks.status, 200, "{}", hooks.body);
    drop((node_a, node_b, node_c, node_f));
    dirs.remove();
    for file in [keys_file, wrong] {
        let _ = std::fs::remove_file(file);
    }
}
