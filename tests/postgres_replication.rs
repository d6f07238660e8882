//! PostgreSQL's own availability (issue 17): a primary with a synchronous standby on one
//! machine, `esim serve --store` given both hosts with `target_session_attrs=read-write`;
//! the primary killed (`-m immediate`) under concurrent fund calls and the standby
//! promoted; the same service process goes on, and every acknowledged fund is there,
//! none twice, money conserved, and the live digest equals `esim replay --store` of the
//! promoted server. Each run makes its own two clusters (`tests/pg`) and removes them.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

mod common;
mod pg;
mod process;
use pg::{dec, launch, replayed_digest, wait_ready, work_dir, Cluster};
use process::{call, remove_data_dir, unpooled_client, HttpClient};

const WORKERS: usize = 4;
/// The owner's lease in this test (`--lease-ms`): the service must still renew it once
/// the promoted standby is the primary.
const LEASE_MS: u64 = 3_000;
/// Each worker is an account of its own, under the reseller rate limit (100 a minute)
/// with its retries and replays.
const FUNDS_PER_WORKER: usize = 25;

/// One fund, sent again with the same Idempotency-Key on 503 or a connection error
/// until it is answered (at most 60 s): its status and answer.
async fn fund(client: &HttpClient, base: &str, key: &str, iccid: &str, amount: Decimal, idem: &str) -> (u16, Value) {
    let began = Instant::now();
    loop {
        let path = format!("/api/v2/reseller/esim/{iccid}/fund");
        match call(client, base, "POST", &path, key, Some(json!({ "amount": amount })), Some(idem)).await {
            Some((503, _)) | None => {
                assert!(began.elapsed() < Duration::from_secs(60), "{idem} unanswered for 60 s");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Some(answer) => return answer,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_synchronous_standby_keeps_every_acknowledged_fund() {
    let primary = Cluster::start("replication-primary");
    let standby = primary.replica("esim_standby");
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = 'esim_standby'");
    primary.psql("SELECT pg_reload_conf()");
    let began = Instant::now();
    while primary.psql("SELECT sync_state FROM pg_stat_replication WHERE application_name = 'esim_standby'") != "sync" {
        assert!(began.elapsed() < Duration::from_secs(20), "the standby never became synchronous");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Both hosts; the one that takes writes is used (the primary, then the promoted standby).
    let url = format!(
        "postgres://esim@127.0.0.1:{},127.0.0.1:{}/esim?target_session_attrs=read-write",
        primary.port, standby.port
    );
    let dir = work_dir("replication");
    let started = launch(&dir, &url).arg("--lease-ms").arg(&LEASE_MS.to_string()).start(false);
    let base = started.running.base.clone();
    let server = common::TestServer::attach(base.clone());
    wait_ready(&server, Duration::from_secs(10)).await;
    let mut accounts = Vec::new();
    for _ in 0..WORKERS {
        let (_, key) = server.account(1_000_000.0).await;
        let iccid = server.provision(&key, None).await;
        let wallet = server.api("GET", "/wallet/balance", &key, None).await;
        let fee = dec(&wallet.body["lifetime_usage_usd"]);
        accounts.push((key, iccid, fee));
    }
    let client = unpooled_client();

    let workers: Vec<_> = accounts
        .iter()
        .enumerate()
        .map(|(worker, (key, iccid, _))| {
            let (client, base, key, iccid) = (client.clone(), base.clone(), key.clone(), iccid.clone());
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for step in 0..FUNDS_PER_WORKER {
                    let amount = Decimal::new(100 + (worker * FUNDS_PER_WORKER + step) as i64, 2);
                    let idem = format!("w{worker}-s{step}");
                    let answer = fund(&client, &base, &key, &iccid, amount, &idem).await;
                    assert_eq!(answer.0, 200, "{idem}: {}", answer.1);
                    acked.push((idem, amount, answer.1));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                acked
            })
        })
        .collect();
    // The primary dies in the middle of the funds; the standby is promoted.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let killed_at = Instant::now();
    primary.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    standby.promote();
    let mut acknowledged = 0;
    let mut books = Vec::new();
    for worker in workers {
        books.push(worker.await.unwrap());
    }
    let resumed_ms = killed_at.elapsed().as_millis();
    // Past the lease: the owner still renews it on the promoted server and takes writes.
    tokio::time::sleep(Duration::from_millis(LEASE_MS + 1_000)).await;
    for ((key, iccid, fee), acked) in accounts.iter().zip(&mut books) {
        let amount = Decimal::new(99, 2);
        let answer = fund(&client, &base, key, iccid, amount, "after-the-lease").await;
        assert_eq!(answer.0, 200, "a fund a lease after the promotion: {}", answer.1);
        acked.push(("after-the-lease".to_string(), amount, answer.1));
        // Every acknowledged fund is in the account's lifetime usage, once.
        let funded: Decimal = acked.iter().map(|(_, amount, _)| *amount).sum();
        let wallet = server.api("GET", "/wallet/balance", key, None).await;
        assert_eq!(wallet.status, 200, "{}", wallet.body);
        assert_eq!(acked.len(), FUNDS_PER_WORKER + 1);
        assert_eq!(dec(&wallet.body["lifetime_usage_usd"]), *fee + funded, "every acknowledged fund, once");
        // Replays answer the same and apply nothing.
        for (idem, amount, answer) in acked.iter().step_by(7) {
            let again = fund(&client, &base, key, iccid, *amount, idem).await;
            assert_eq!((&again.0, &again.1), (&200, answer), "replay of {idem}");
        }
        let after = server.api("GET", "/wallet/balance", key, None).await;
        assert_eq!(after.body["lifetime_usage_usd"], wallet.body["lifetime_usage_usd"], "replays applied nothing");
        acknowledged += acked.len();
    }
    let report = server.admin("GET", "/admin/v1/reports/conservation", None).await;
    assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
    // The promoted server holds what the service shows.
    let promoted = format!("postgres://esim@127.0.0.1:{}/esim", standby.port);
    assert_eq!(server.digest().await, replayed_digest(&promoted), "live digest = replay of the promoted server");
    eprintln!("{acknowledged} funds acknowledged, all there after the promotion ({resumed_ms} ms after the kill)");
    drop(started);
    remove_data_dir(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
}
