//! The journal and snapshots in PostgreSQL (`esim serve --store`), against a real
//! PostgreSQL cluster that each test makes: `initdb` into a temporary directory,
//! `pg_ctl start` on a free loopback port (and a socket in that directory), stopped and
//! removed when the test ends. A machine without `initdb` fails these tests with the
//! reason (Debian's `postgresql` package provides it).

use esim_engine::{AdminOp, Command as EngineCommand, Engine, EngineConfig, Millis};
use esim_http::journal::{SegmentHeader, SnapshotPolicy, FORMAT_VERSION};
use esim_http::server::JournalSink;
use esim_http::store_pg::{self, PgStore};
use esim_http::{ClockMode, JournalEntry};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
mod pg;
mod process;
use pg::{dec, esim_cli, free_port, launch, wait_ready, work_dir, Cluster};
use process::{call, remove_data_dir, unpooled_client, Started};

/// The state digest once no webhook outcome changes it any more (two reads 300 ms apart).
async fn settled_digest(server: &common::TestServer) -> String {
    let mut last = server.digest().await;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = server.digest().await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the state kept changing for 9 s");
}

/// A session over real HTTP, a graceful restart: the same digest and every acknowledged
/// change; `esim replay --store` and `esim report conservation --store` read the same
/// state; the second start applies no migration and bumps the epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_survives_a_restart_and_replay_reads_the_store() {
    let cluster = Cluster::start("session");
    let dir = work_dir("session");
    let url = cluster.url();
    let receiver = common::Receiver::start().await;

    let first = launch(&dir, &url).start(false);
    let server = common::TestServer::attach(first.running.base.clone());
    let (account_id, key) = server.account(500.0).await;
    let iccid = server.provision(&key, None).await;
    let funded = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 12.5}))).await;
    assert_eq!(funded.status, 200, "{}", funded.body);
    let webhook = server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
    assert_eq!(webhook.status, 201, "{}", webhook.body);
    let webhook_id = webhook.body["id"].as_str().unwrap().to_string();
    let second_iccid = server.provision(&key, None).await;
    receiver.wait_event("esim.provisioned").await;
    server.advance(3_600).await;
    let before = settled_digest(&server).await;
    let balance_before = server.api("GET", "/wallet/balance", &key, None).await.body;
    first.stop();
    // Every migration of this build, each once (the second, sharding's, since decision 177).
    let versions: Vec<String> = store_pg::MIGRATIONS.iter().map(|(version, _)| version.to_string()).collect();
    assert_eq!(cluster.psql("SELECT version FROM schema_migrations ORDER BY version"), versions.join("\n"));
    let applied_at = cluster.psql("SELECT applied_at FROM schema_migrations ORDER BY version");
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner WHERE shard = 0"), "1");

    let second = launch(&dir, &url).start(false);
    let server = common::TestServer::attach(second.running.base.clone());
    assert_eq!(server.digest().await, before, "the restart rebuilt the same state");
    for id in [&iccid, &second_iccid] {
        assert_eq!(server.api("GET", &format!("/esim/{id}"), &key, None).await.status, 200, "{id} survived");
    }
    assert_eq!(server.api("GET", &format!("/webhooks/{webhook_id}"), &key, None).await.status, 200);
    assert_eq!(server.api("GET", "/wallet/balance", &key, None).await.body, balance_before);
    let accounts = server.admin("GET", "/admin/v1/accounts", None).await;
    assert!(accounts.body.to_string().contains(&account_id), "{}", accounts.body);
    // Migrations ran once: the second start applied none.
    assert_eq!(cluster.psql("SELECT count(*) FROM schema_migrations"), versions.len().to_string());
    assert_eq!(cluster.psql("SELECT applied_at FROM schema_migrations ORDER BY version"), applied_at);
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner WHERE shard = 0"), "2");
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(log.contains(&format!("applied={}", versions.len())) && log.contains("applied=0"), "{log}");

    // A change after the restart, then the offline readers against the live store.
    let topped =
        server.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), Some(json!({"amount_usd": 17}))).await;
    assert_eq!(topped.status, 201, "{}", topped.body);
    // Webhook outcomes may still land: compare with a replay taken while the live
    // digest stood still.
    let mut matched = None;
    for _ in 0..50 {
        let live = server.digest().await;
        let replay = esim_cli(&["replay", "--store", &url]);
        assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
        if server.digest().await == live {
            let text = String::from_utf8_lossy(&replay.stdout).to_string();
            assert!(text.contains(&format!("state_digest {live}")), "live {live}, replay:\n{text}");
            assert!(String::from_utf8_lossy(&replay.stderr).contains("held by"), "replay notes the live owner");
            matched = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = matched.expect("the live digest stood still during a replay");
    assert!(text.contains("conserved    yes"), "{text}");
    let report = esim_cli(&["report", "conservation", "--store", &url, "--format", "json"]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["conserved"], json!(true), "{report}");
    // Read-only: neither took the shard.
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner WHERE shard = 0"), "2");
    second.stop();
    remove_data_dir(&dir);
}

/// SIGKILL under concurrent funds, twice: after each restart every acknowledged fund is
/// there and none twice (usage between the acknowledged sum and that plus what was in
/// doubt), and money is conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_load_loses_no_acknowledged_fund() {
    const CLIENTS: usize = 3;
    let cluster = Cluster::start("kill");
    let dir = work_dir("kill");
    let url = cluster.url();
    let client = unpooled_client();
    let admin = common::ADMIN;
    let mut keys = Vec::new();
    let mut iccids = Vec::new();
    // (acknowledged, in doubt) per client.
    let books: Arc<Mutex<Vec<(Decimal, Decimal)>>> = Arc::new(Mutex::new(vec![Default::default(); CLIENTS]));
    for round in 0..3 {
        let started: Started = launch(&dir, &url).start(false);
        let base = started.running.base.clone();
        let server = common::TestServer::attach(base.clone());
        // After a SIGKILL the lease of the killed process runs out first: until then
        // this start is a standby (decision 146).
        wait_ready(&server, Duration::from_secs(10)).await;
        if round == 0 {
            for _ in 0..CLIENTS {
                let (_, key) = server.account(100_000.0).await;
                iccids.push(server.provision(&key, None).await);
                keys.push(key);
            }
        } else {
            for (index, key) in keys.iter().enumerate() {
                let (acknowledged, in_doubt) = books.lock().unwrap()[index];
                let esim = server.api("GET", &format!("/esim/{}", iccids[index]), key, None).await;
                assert_eq!(esim.status, 200, "{}", esim.body);
                let wallet = server.api("GET", "/wallet/balance", key, None).await.body;
                let funded = dec(&wallet["lifetime_usage_usd"]) - Decimal::new(175, 2);
                assert!(funded >= acknowledged, "round {round}: funded {funded} lost acknowledged {acknowledged}");
                assert!(
                    funded <= acknowledged + in_doubt,
                    "round {round}: funded {funded} above acknowledged {acknowledged} + in doubt {in_doubt}"
                );
                books.lock().unwrap()[index] = (funded, Decimal::ZERO);
            }
            let report = server.admin("GET", "/admin/v1/reports/conservation", None).await;
            assert_eq!(report.body["conserved"], json!(true), "round {round}: {}", report.body);
        }
        if round == 2 {
            let live = server.digest().await;
            started.stop();
            let replay = esim_cli(&["replay", "--store", &url]);
            let text = String::from_utf8_lossy(&replay.stdout);
            assert!(text.contains(&format!("state_digest {live}")), "live {live}, replay:\n{text}");
            break;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = Vec::new();
        for index in 0..CLIENTS {
            let (client, base, books, stop) = (client.clone(), base.clone(), books.clone(), stop.clone());
            let (key, iccid) = (keys[index].clone(), iccids[index].clone());
            workers.push(tokio::spawn(async move {
                let mut step = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    step += 1;
                    let amount = Decimal::new(100 + (step % 7) as i64, 2);
                    books.lock().unwrap()[index].1 += amount;
                    let reply = call(
                        &client,
                        &base,
                        "POST",
                        &format!("/api/v2/reseller/esim/{iccid}/fund"),
                        &key,
                        Some(json!({ "amount": amount })),
                        Some(&format!("f-{round}-{index}-{step}")),
                    )
                    .await;
                    let mut book = books.lock().unwrap();
                    match reply {
                        Some((200, _)) => {
                            book[index].1 -= amount;
                            book[index].0 += amount;
                        }
                        Some(_) => book[index].1 -= amount,
                        // Died under us: this fund stays in doubt.
                        None => return step,
                    }
                }
                step
            }));
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        let mut running = started.running;
        let _ = admin;
        running.child.kill().unwrap(); // SIGKILL
        running.child.wait().unwrap();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut calls = 0;
        for worker in workers {
            calls += worker.await.unwrap();
        }
        assert!(calls >= 10, "the clients really worked ({calls} funds)");
    }
    remove_data_dir(&dir);
}

/// Fencing: while one server runs, a second takes the shard (a new epoch); the first's
/// next change answers 503 and is not in the store; the second serves every change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_owner_fences_the_first() {
    let cluster = Cluster::start("fence");
    let (dir_a, dir_b) = (work_dir("fence-a"), work_dir("fence-b"));
    let url = cluster.url();
    let first = launch(&dir_a, &url).start(false);
    let a = common::TestServer::attach(first.running.base.clone());
    let (account_id, key) = a.account(1_000.0).await;
    let iccid = a.provision(&key, None).await;
    let fund = a.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 5}))).await;
    assert_eq!(fund.status, 200, "{}", fund.body);
    let head_before = cluster.psql("SELECT head FROM shard_owner WHERE shard = 0");

    // The second server uses the same key file (it opens the same signing secrets), and
    // takes the shard while the first's lease is live (a planned switch-over).
    let mut launch_b = launch(&dir_b, &url).arg("--take-over");
    launch_b.key_file = process::key_file(&dir_a);
    let second = launch_b.start(false);
    let b = common::TestServer::attach(second.running.base.clone());
    assert_eq!(cluster.psql("SELECT epoch FROM shard_owner WHERE shard = 0"), "2");
    let digest_b = b.digest().await;

    let refused = a.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 9}))).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.body["code"], json!("SERVICE_UNAVAILABLE"), "{}", refused.body);
    let topup =
        a.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), Some(json!({"amount_usd": 3}))).await;
    assert_eq!(topup.status, 503, "a fenced server stays fenced: {}", topup.body);
    let ready = a.call("GET", "/readyz", "", None).await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.to_string().contains("no longer owns"), "{}", ready.body);
    // Nothing of the refused changes reached the store.
    assert_eq!(cluster.psql("SELECT head FROM shard_owner WHERE shard = 0"), head_before);
    assert_eq!(cluster.psql("SELECT count(*) FROM journal WHERE epoch = 2"), "0");
    assert_eq!(b.digest().await, digest_b);

    let fund = b.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 9}))).await;
    assert_eq!(fund.status, 200, "the new owner serves changes: {}", fund.body);
    let esim = b.api("GET", &format!("/esim/{iccid}"), &key, None).await;
    assert_eq!(esim.status, 200);
    assert_eq!(cluster.psql("SELECT count(*) FROM journal WHERE epoch = 2"), "1");
    let live = b.digest().await;
    second.stop();
    let mut first = first;
    first.running.child.kill().unwrap();
    first.running.child.wait().unwrap();
    let replay = esim_cli(&["replay", "--store", &url]);
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(text.contains(&format!("state_digest {live}")), "live {live}, replay:\n{text}");

    // A store that cannot be reached is a clear error, not a panic.
    let unreachable = format!("postgres://esim@127.0.0.1:{}/esim", free_port());
    let failed =
        esim_cli(&["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_b.to_str().unwrap(), "--store", &unreachable]);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("the PostgreSQL store: cannot connect"), "{stderr}");
    // `--standby-shards` on a store of one shard is refused, saying what to run instead.
    // (Spawned and waited for at most 10 s, so that a start that serves fails the test
    // instead of hanging it.)
    let mut standby = std::process::Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_b.to_str().unwrap(), "--store", &url])
        .args(["--standby-shards", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = process::wait_timeout(&mut standby, Duration::from_secs(10));
    let _ = standby.kill();
    let refused = standby.wait_with_output().unwrap();
    assert!(ended.is_some_and(|status| !status.success()), "refused at start: {ended:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("a store of one shard gets its hot standby"), "{stderr}");
    remove_data_dir(&dir_a);
    remove_data_dir(&dir_b);
}

fn header(seed: u64) -> SegmentHeader {
    let config = EngineConfig { seed, ..EngineConfig::default() };
    SegmentHeader {
        version: FORMAT_VERSION,
        config,
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    }
}

/// The store through its trait: snapshots on the policy (only the newest kept, every
/// entry kept), a reopen starts from the snapshot and reaches the same digest, a read
/// with `until` replays every entry, and an owner fenced by a newer epoch appends
/// nothing more.
#[test]
fn snapshots_and_fencing_through_the_trait() {
    let cluster = Cluster::start("trait");
    let url = cluster.url();
    let policy = SnapshotPolicy { every_entries: 5, every_bytes: u64::MAX };
    let fresh = header(7);
    let (mut store, recovery) = PgStore::open(&url, &fresh, policy).unwrap();
    assert!(recovery.engine.is_none(), "a new store");
    store.set_header(fresh.clone()).unwrap();
    let mut engine = Engine::new(fresh.config.clone(), fresh.start);
    let mut at = Millis::VIRTUAL_EPOCH;
    let create = EngineCommand::Admin(AdminOp::CreateAccount {
        contact_email: "t@x.example".into(),
        company_name: None,
        api_key_digest: esim_engine::KeyDigest::of("rsk_postgres_store_test"),
        api_key_prefix: "rsk_postgres".into(),
    });
    let account_id = match engine.handle(at, create.clone()) {
        Ok(esim_engine::Reply::AccountCreated(created)) => created.account_id,
        other => panic!("{other:?}"),
    };
    let mut pending = vec![JournalEntry::Command { at, command: create }];
    for step in 1..=24i64 {
        at = Millis(at.0 + 1_000);
        let command =
            EngineCommand::Admin(AdminOp::TopUp { account_id: account_id.clone(), amount_usd: Decimal::from(step) });
        let _ = engine.handle(at, command.clone());
        pending.push(JournalEntry::Command { at, command });
        if pending.len() == 5 {
            // The owner task is never asked to encode the state (decision 202).
            assert!(store.snapshot(&engine, pending.len() as u64).is_none());
            if step == 19 {
                store.wait_snapshot();
            }
            store.append(&pending).unwrap();
            pending.clear();
            if step == 19 {
                // A snapshot is made off the appending thread, from the store: covering
                // the 20 durable entries.
                store.wait_snapshot();
                assert_eq!(cluster.psql("SELECT covered FROM snapshot"), "20");
            }
        }
    }
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), "25");
    store.wait_snapshot();
    assert_eq!(cluster.psql("SELECT covered FROM snapshot"), "25", "only the newest snapshot is kept");
    assert_eq!(cluster.psql("SELECT count(*) FROM journal"), "25", "entries covered by it are kept");

    // A second owner takes the shard: the first appends nothing more.
    let (second, recovery) = PgStore::open(&url, &header(8), policy).unwrap();
    assert_eq!((recovery.from_snapshot, recovery.replayed, recovery.next_index), (25, 0, 25));
    assert_eq!(recovery.engine.as_ref().unwrap().state_digest(), engine.state_digest());
    assert_eq!(recovery.header.as_ref().unwrap().config.seed, 7, "the store keeps its header");
    assert_eq!(second.epoch(), store.epoch() + 1);
    let late = JournalEntry::Tick { at: Millis(at.0 + 1) };
    let error = store.append(std::slice::from_ref(&late)).unwrap_err();
    assert!(error.to_string().contains("taken by another process"), "{error}");
    assert!(store.fenced().is_some() && store.wedged().is_some());
    assert!(store.probe().is_err(), "a fenced store never takes writes again");
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), "25");

    // `until` reads every entry from the start (no snapshot).
    let (all, owner) = store_pg::read_only(&url, Some(Millis(at.0 + 10))).unwrap();
    assert_eq!((all.from_snapshot, all.replayed), (0, 25));
    assert_eq!(all.engine.unwrap().state_digest(), engine.state_digest());
    assert_eq!(owner.unwrap().epoch, second.epoch());
}

/// A TCP proxy in front of PostgreSQL that can cut the connection that sends `COMMIT`:
/// after forwarding it (the server commits, the client never hears) or before (the
/// server rolls back). One cut per arming; otherwise it relays both ways.
struct CuttingProxy {
    port: u16,
    /// 0 relay, 1 cut after forwarding COMMIT, 2 cut before forwarding it.
    mode: Arc<std::sync::atomic::AtomicU8>,
}

impl CuttingProxy {
    fn start(upstream: u16) -> CuttingProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(0));
        let armed = mode.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let cut = Arc::new(AtomicBool::new(false));
                let (mut from_client, mut to_server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut from_server, mut to_client) = (server, client);
                let (mode, cut_up, cut_down) = (armed.clone(), cut.clone(), cut);
                let (client_end, server_end) = (to_client.try_clone().unwrap(), to_server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let Ok(read) = from_client.read(&mut buffer) else { return };
                        if read == 0 {
                            let _ = to_server.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        let chunk = &buffer[..read];
                        let commit = chunk.windows(6).any(|w| w == b"COMMIT");
                        let armed_mode = if commit { mode.swap(0, Ordering::SeqCst) } else { 0 };
                        if armed_mode != 0 {
                            cut_up.store(true, Ordering::SeqCst);
                            if armed_mode == 1 {
                                let _ = to_server.write_all(chunk);
                                // The server commits; the client hears nothing.
                                std::thread::sleep(Duration::from_millis(300));
                            }
                            let _ = client_end.shutdown(std::net::Shutdown::Both);
                            let _ = to_server.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                        if to_server.write_all(chunk).is_err() {
                            return;
                        }
                    }
                });
                std::thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let Ok(read) = from_server.read(&mut buffer) else { return };
                        if read == 0 || cut_down.load(Ordering::SeqCst) || to_client.write_all(&buffer[..read]).is_err()
                        {
                            let _ = to_client.shutdown(std::net::Shutdown::Both);
                            let _ = server_end.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    }
                });
            }
        });
        CuttingProxy { port, mode }
    }

    fn arm(&self, mode: u8) {
        self.mode.store(mode, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A commit whose connection fails is never answered from a guess: the store ends the
/// old session, reads the row at the batch's index, and acknowledges the batch only
/// when it committed; a batch that did not commit is not applied, and the next append
/// continues at the same index (never twice).
#[test]
fn a_commit_whose_connection_fails_is_resolved_by_reading_the_store() {
    let cluster = Cluster::start("unknown");
    let proxy = CuttingProxy::start(cluster.port);
    let url = format!("postgres://esim@127.0.0.1:{}/esim", proxy.port);
    let fresh = header(9);
    let (mut store, _) = PgStore::open(&url, &fresh, SnapshotPolicy::default()).unwrap();
    store.set_header(fresh).unwrap();
    let tick = |second: i64| JournalEntry::Tick { at: Millis(Millis::VIRTUAL_EPOCH.0 + second * 1_000) };
    store.append(&[tick(1)]).unwrap();

    // Cut after COMMIT reached the server: committed, so acknowledged.
    proxy.arm(1);
    store.append(&[tick(2), tick(3)]).expect("the batch committed: the store finds it and acknowledges it");
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), "3");
    assert_eq!(cluster.psql("SELECT count(*) FROM journal"), "3");
    assert_eq!(proxy.mode.load(std::sync::atomic::Ordering::SeqCst), 0, "the cut happened");

    // Cut before COMMIT reached the server: not committed, so refused, and not applied.
    proxy.arm(2);
    let error = store.append(&[tick(4)]).unwrap_err();
    assert!(error.to_string().contains("not in the store"), "{error}");
    assert!(store.fenced().is_none(), "the store still owns the shard");
    assert_eq!(cluster.psql("SELECT head FROM shard_owner"), "3");
    assert_eq!(cluster.psql("SELECT count(*) FROM journal"), "3");
    store.probe().expect("the store takes writes again");
    let durable = store.reload().unwrap();
    assert_eq!(durable.now(), Millis(Millis::VIRTUAL_EPOCH.0 + 3_000), "the durable state ends at the third tick");
    store.append(&[tick(5)]).unwrap();
    assert_eq!(cluster.psql("SELECT string_agg(seq::text || ':' || at_ms::text, ',' ORDER BY seq) FROM journal"), {
        let at = |second: i64| Millis::VIRTUAL_EPOCH.0 + second * 1_000;
        format!("0:{},1:{},2:{},3:{}", at(1), at(2), at(3), at(5))
    });
}
