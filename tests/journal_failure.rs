//! When the journal cannot take a change (disk full, unwritable data dir), the service
//! answers 503 with the spec's error body for changes, keeps serving reads from the
//! durable state, and never acknowledges what it did not journal.

mod common;
use common::ADMIN;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_http::server::{self, JournalSink, ServerOptions};
use esim_http::{ClockMode, JournalEntry, Service};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A journal whose disk can be made to fail; its durable state is an engine that applied
/// exactly the entries that were appended. Each append takes `sync_ms` (a disk's sync),
/// so that the owner task applies further requests while one is in flight.
struct FlakyDisk {
    durable: Arc<Mutex<Engine>>,
    failing: Arc<AtomicBool>,
    /// Appends that failed so far.
    failures: Arc<AtomicUsize>,
    sync_ms: u64,
}

impl FlakyDisk {
    fn new(engine: &Engine, failing: &Arc<AtomicBool>, sync_ms: u64) -> FlakyDisk {
        FlakyDisk {
            durable: Arc::new(Mutex::new(engine.clone())),
            failing: failing.clone(),
            failures: Arc::new(AtomicUsize::new(0)),
            sync_ms,
        }
    }
}

impl JournalSink for FlakyDisk {
    fn append(&mut self, entries: &[JournalEntry]) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(self.sync_ms));
        if self.failing.load(Ordering::SeqCst) {
            self.failures.fetch_add(1, Ordering::SeqCst);
            return Err(std::io::Error::other("no space left on device"));
        }
        let mut durable = self.durable.lock().unwrap();
        for entry in entries {
            entry.clone().replay(&mut durable);
        }
        Ok(())
    }
    fn reload(&mut self) -> Result<Engine, String> {
        Ok(self.durable.lock().unwrap().clone())
    }
}

/// The real server on 127.0.0.1 over `sink`: its client, its stop switch and its task.
async fn serve_on(
    engine: Engine,
    sink: FlakyDisk,
) -> (common::TestServer, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    let secrets = esim_http::secrets::Secrets::seeded(engine.config().seed);
    let service = Service::new(engine, ADMIN.into(), ClockMode::Virtual, secrets);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, service, Box::new(sink), ServerOptions::new(1, true), async {
        let _ = stopped.await;
    }));
    (common::TestServer::attach(base), stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_journal_answers_503_for_changes_and_keeps_serving_reads() {
    let config = EngineConfig { seed: 1, ..EngineConfig::default() };
    let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
    let failing = Arc::new(AtomicBool::new(false));
    let sink = FlakyDisk::new(&engine, &failing, 0);
    let (server, stop, task) = serve_on(engine, sink).await;
    let (_, key) = server.account(50.0).await;
    let iccid = server.provision(&key, None).await;
    assert_eq!(server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 10}))).await.status, 200);

    failing.store(true, Ordering::SeqCst);
    let refused = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 5}))).await;
    assert_eq!((refused.status, refused.body["code"].clone()), (503, json!("SERVICE_UNAVAILABLE")));
    assert!(refused.body["error"].is_string() && refused.body["message"].is_string());
    let balance = server.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(balance.status, 200, "reads keep working");
    assert_eq!(balance.body["balance_usd"], json!(38.25), "the refused fund is not kept");

    failing.store(false, Ordering::SeqCst);
    assert_eq!(server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 5}))).await.status, 200);
    assert_eq!(server.api("GET", "/wallet/balance", &key, None).await.body["balance_usd"], json!(33.25));
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// Pipelined group commit under a failing disk: while one append is in flight the next
/// requests are applied; when it fails, neither its requests nor the later ones are
/// acknowledged, and every acknowledged fund is in the durable state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_append_acknowledges_nothing_applied_after_it() {
    let config = EngineConfig { seed: 2, rate_limit_per_minute: u32::MAX, ..EngineConfig::default() };
    let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
    let failing = Arc::new(AtomicBool::new(false));
    let sink = FlakyDisk::new(&engine, &failing, 3);
    let (durable, failures) = (sink.durable.clone(), sink.failures.clone());
    let (server, stop, task) = serve_on(engine, sink).await;
    let server = Arc::new(server);
    let (_, key) = server.account(100_000.0).await;
    let iccid = server.provision(&key, None).await;

    // 16 clients fund $1 each until the disk has failed one append at a time, four times
    // (so the group applied during a failed append meets a sound disk). The clients keep
    // the appends coming, so every episode meets one; a bound on each wait keeps a broken
    // server from hanging the test.
    let done = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (failing, failures, done) = (failing.clone(), failures.clone(), done.clone());
        tokio::spawn(async move {
            for episode in 1..=4 {
                tokio::time::sleep(Duration::from_millis(30)).await;
                failing.store(true, Ordering::SeqCst);
                let started = std::time::Instant::now();
                while failures.load(Ordering::SeqCst) < episode {
                    assert!(started.elapsed() < Duration::from_secs(20), "no append met the failing disk");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                failing.store(false, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut clients = Vec::new();
    for _ in 0..16 {
        let (server, key, iccid, done) = (server.clone(), key.clone(), iccid.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !done.load(Ordering::SeqCst) && statuses.len() < 5_000 {
                let reply = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 1}))).await;
                statuses.push(reply.status);
            }
            statuses
        }));
    }
    let mut statuses = Vec::new();
    for client in clients {
        statuses.extend(client.await.unwrap());
    }
    flipper.await.unwrap();
    let acknowledged = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!(acknowledged + refused, statuses.len(), "only 200 and 503: {statuses:?}");
    assert!(
        acknowledged > 0 && refused > 0,
        "the disk failed during the run: {acknowledged} acknowledged, {refused} refused"
    );

    // One more fund once the disk is back, so the service accepts changes again.
    failing.store(false, Ordering::SeqCst);
    let mut last = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 1}))).await;
    while last.status == 503 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        last = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 1}))).await;
    }
    assert_eq!(last.status, 200);
    let balance = server.api("GET", "/wallet/balance", &key, None).await;
    let expected = 100_000.0 - 1.75 - (acknowledged + 1) as f64;
    assert_eq!(balance.body["balance_usd"].as_f64(), Some(expected), "every acknowledged fund, and none other");
    let live = server.digest().await;
    assert_eq!(live, durable.lock().unwrap().state_digest(), "the live state is the durable one");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
