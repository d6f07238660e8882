//! The server's group commit on a real data dir: under concurrent writes, with a
//! snapshot due every few entries, every acknowledged change is in the data dir and a
//! restart from the newest snapshot plus the journal after it rebuilds exactly the state
//! the server showed.

mod common;
use esim_engine::EngineConfig;
use esim_http::journal::{self, RecoverOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_taken_under_load_cover_exactly_what_was_acknowledged() {
    let dir = std::env::temp_dir().join(format!("esim-group-commit-{}", std::process::id()));
    // A snapshot is due every 25 entries: many are taken while appends are in flight.
    let config = EngineConfig { seed: 3, rate_limit_per_minute: u32::MAX, ..EngineConfig::default() };
    let running = common::JournaledServer::start(&dir, config).await;
    let server = running.server.clone();
    let (_, key) = server.account(100_000.0).await;
    let iccid = server.provision(&key, None).await;

    let mut clients = Vec::new();
    for _ in 0..16 {
        let (server, key, iccid) = (server.clone(), key.clone(), iccid.clone());
        clients.push(tokio::spawn(async move {
            let mut acknowledged = 0;
            for _ in 0..40 {
                let reply = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 1}))).await;
                assert_eq!(reply.status, 200, "{:?}", reply.body);
                acknowledged += 1;
            }
            acknowledged
        }));
    }
    let mut acknowledged = 0;
    for client in clients {
        acknowledged += client.await.unwrap();
    }
    assert_eq!(acknowledged, 640);
    let balance = server.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(balance.body["balance_usd"].as_f64(), Some(100_000.0 - 1.75 - 640.0));
    let live = server.digest().await;
    drop(server);
    running.stop().await;

    let snapshots = std::fs::read_dir(dir.join("snapshots")).unwrap().filter_map(Result::ok).count();
    let recovery = journal::recover(&dir, &RecoverOptions { repair: false, until: None }).unwrap();
    assert!(recovery.from_snapshot > 0, "a snapshot was written and used ({snapshots} files)");
    assert!(recovery.next_index >= 640, "every fund is journaled: {}", recovery.next_index);
    assert_eq!(recovery.engine.unwrap().state_digest(), live, "the restart rebuilds the state the server showed");
    let _ = std::fs::remove_dir_all(&dir);
}
