//! When the journal cannot take a change (disk full, unwritable data dir), the service
//! answers 503 with the spec's error body for changes, keeps serving reads from the
//! durable state, and never acknowledges what it did not journal.

mod common;
use common::ADMIN;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_transport::server::{self, JournalSink, ServerOptions};
use esim_transport::{ClockMode, JournalEntry, Service};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A journal whose disk can be made to fail; its durable state is an engine that applied
/// exactly the entries that were appended.
struct FlakyDisk {
    durable: Engine,
    failing: Arc<AtomicBool>,
}

impl JournalSink for FlakyDisk {
    fn append(&mut self, entries: &[JournalEntry]) -> std::io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("no space left on device"));
        }
        for entry in entries {
            entry.clone().replay(&mut self.durable);
        }
        Ok(())
    }
    fn reload(&mut self) -> Result<Engine, String> {
        Ok(self.durable.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_journal_answers_503_for_changes_and_keeps_serving_reads() {
    let config = EngineConfig { seed: 1, ..EngineConfig::default() };
    let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
    let failing = Arc::new(AtomicBool::new(false));
    let sink = FlakyDisk { durable: engine.clone(), failing: failing.clone() };
    let service = Service::new(engine, ADMIN.into(), ClockMode::Virtual, esim_transport::secrets::Secrets::seeded(1));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, service, Box::new(sink), ServerOptions::new(1, true), async {
        let _ = stopped.await;
    }));
    let server = common::TestServer::attach(base);
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
