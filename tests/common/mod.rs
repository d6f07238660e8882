//! End-to-end test support: the real server type on 127.0.0.1:0, a real HTTP client,
//! and a real webhook receiver that records what it gets.
#![allow(dead_code)]

use bytes::Bytes;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_http::server::{self, NoJournal, ServerOptions};
use esim_http::{ClockMode, Service};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

pub const ADMIN: &str = "test-admin-token";

pub struct TestServer {
    pub base: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Value,
    pub raw: Bytes,
}

impl TestServer {
    /// The real server on a free loopback port, virtual clock, insecure webhooks allowed.
    pub async fn start() -> TestServer {
        Self::start_with(ServerOptions::new(1, true)).await
    }

    pub async fn start_with(options: ServerOptions) -> TestServer {
        Self::start_on(options, ClockMode::Virtual).await
    }

    /// The real server on the given clock (service time starts at the virtual epoch).
    pub async fn start_on(options: ServerOptions, clock: ClockMode) -> TestServer {
        let config = EngineConfig { seed: 5, allow_insecure_webhooks: true, ..EngineConfig::default() };
        let secrets = esim_http::secrets::Secrets::seeded(5);
        let service = Service::new(Engine::new(config, Millis::VIRTUAL_EPOCH), ADMIN.into(), clock, secrets);
        let listener = esim_http::edge::listen("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(listener, service, Box::new(NoJournal), options, async {
            let _ = stopped.await;
        }));
        TestServer {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A client for a server started elsewhere (stopped by its owner).
    pub fn attach(base: String) -> TestServer {
        TestServer { base, client: Client::builder(TokioExecutor::new()).build_http(), stop: None, task: None }
    }

    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Reply {
        let mut request = http::Request::builder().method(method).uri(format!("{}{}", self.base, path));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.client.request(request.body(Full::new(body)).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let raw = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Reply { status, headers, body, raw }
    }

    pub async fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Reply {
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        self.raw(method, path, Some(token), &[("content-type", "application/json")], bytes).await
    }

    /// Reseller API call (path relative to /api/v2/reseller).
    pub async fn api(&self, method: &str, path: &str, key: &str, body: Option<Value>) -> Reply {
        self.call(method, &format!("/api/v2/reseller{path}"), key, body).await
    }

    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        self.call(method, path, ADMIN, body).await
    }

    /// A new account with a top-up; returns (account_id, api_key).
    pub async fn account(&self, amount: f64) -> (String, String) {
        let created = self
            .admin(
                "POST",
                "/admin/v1/accounts",
                Some(json!({"contact_email": "it@reseller.example", "company_name": "IT"})),
            )
            .await;
        assert_eq!(created.status, 201, "{}", created.body);
        let id = created.body["account_id"].as_str().unwrap().to_string();
        let key = created.body["api_key"].as_str().unwrap().to_string();
        if amount > 0.0 {
            let top = self
                .admin("POST", &format!("/admin/v1/accounts/{id}/topups"), Some(json!({"amount_usd": amount})))
                .await;
            assert_eq!(top.status, 201, "{}", top.body);
        }
        (id, key)
    }

    pub async fn advance(&self, seconds: u64) {
        let reply = self.admin("POST", "/sandbox/v1/clock/advance", Some(json!({ "seconds": seconds }))).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    /// `GET /admin/v1/state` once it has settled: two reads 100 ms apart agree. Webhook
    /// delivery outcomes and a pool's blocks are journaled off the request path, so a
    /// single read may catch them half way and differ from what was acknowledged.
    pub async fn settled_state(&self) -> Value {
        self.settled(|state| state).await
    }

    /// The admin state's inventory figures (pool and blocks) once no block is on its way.
    pub async fn settled_inventory(&self) -> Value {
        self.settled(|state| state["inventory"].clone()).await
    }

    /// `part` of the admin state once two reads of it 100 ms apart agree (at most 10 s).
    async fn settled(&self, part: impl Fn(Value) -> Value) -> Value {
        let mut seen = part(self.admin("GET", "/admin/v1/state", None).await.body);
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let later = part(self.admin("GET", "/admin/v1/state", None).await.body);
            if later == seen {
                break;
            }
            seen = later;
        }
        seen
    }

    /// Provisions from `key` until the service answers 503, which must be the spec's
    /// `NO_ESIMS_AVAILABLE`; every ICCID must be new to `iccids` and pass `check`. How
    /// many were provisioned.
    pub async fn provision_until_empty(
        &self,
        key: &str,
        iccids: &mut std::collections::BTreeSet<String>,
        check: impl Fn(&str),
    ) -> u64 {
        let mut count = 0;
        loop {
            let answer = self.api("POST", "/esim/provision", key, Some(json!({}))).await;
            if answer.status != 201 {
                assert_eq!(
                    (answer.status, answer.body["code"].clone()),
                    (503, json!("NO_ESIMS_AVAILABLE")),
                    "{}",
                    answer.body
                );
                return count;
            }
            let iccid = answer.body["iccid"].as_str().unwrap().to_string();
            check(&iccid);
            assert!(iccids.insert(iccid), "an ICCID issued twice");
            count += 1;
        }
    }

    pub async fn digest(&self) -> String {
        self.admin("GET", "/admin/v1/state", None).await.body["state_digest"].as_str().unwrap().to_string()
    }

    pub async fn provision(&self, key: &str, group_id: Option<&str>) -> String {
        let body = match group_id {
            Some(g) => json!({"group_id": g, "end_user_reference": "cust-1", "label": "Trip"}),
            None => json!({"end_user_reference": "cust-1", "label": "Trip"}),
        };
        let reply = self.api("POST", "/esim/provision", key, Some(body)).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.body["iccid"].as_str().unwrap().to_string()
    }
}

/// One POST a receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    pub fn event(&self) -> String {
        self.json()["event"].as_str().unwrap().to_string()
    }
}

/// A real webhook receiver on loopback; answers with `status` (changeable).
pub struct Receiver {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    pub status: Arc<AtomicU16>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(200));
        let (store, answer) = (received.clone(), status.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (store, answer) = (store.clone(), answer.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                        let (store, answer) = (store.clone(), answer.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                            store.lock().unwrap().push(Received { headers: parts.headers, body });
                            let status = answer.load(Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder().status(status).body(Full::new(Bytes::new())).unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { url: format!("http://{address}/hooks"), received, status }
    }

    /// Waits until at least `count` deliveries arrived (at most 10 s).
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        for _ in 0..1_000 {
            if self.received.lock().unwrap().len() >= count {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.received.lock().unwrap().clone()
    }

    pub fn events(&self) -> Vec<String> {
        self.received.lock().unwrap().iter().map(Received::event).collect()
    }

    /// Waits for an event by name (at most 10 s).
    pub async fn wait_event(&self, name: &str) -> Received {
        for _ in 0..1_000 {
            if let Some(found) = self.received.lock().unwrap().iter().find(|r| r.event() == name) {
                return found.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no {name} event arrived; got {:?}", self.events());
    }
}

/// Verifies a delivery's signature with an HMAC computed here, independently.
pub fn verify_signature(delivery: &Received, secret: &str) {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(&delivery.body);
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let header = delivery.headers.get("x-service-signature").expect("signature header").to_str().unwrap();
    assert_eq!(header, expected, "signature of {}", delivery.event());
    let envelope = delivery.json();
    assert_eq!(delivery.headers.get("x-service-event-id").unwrap().to_str().unwrap(), envelope["id"].as_str().unwrap());
    assert!(delivery.headers.get("x-service-timestamp").is_some());
    assert!(delivery.headers.get("x-service-delivery-attempt").is_some());
}

/// The `bin` dir of a Python venv under the target dir with `packages` installed from
/// PyPI, made once per target dir: a venv where the `ready` snippet runs is reused.
pub fn python_venv(name: &str, packages: &[&str], ready: &str) -> std::path::PathBuf {
    use std::process::Command;
    static MADE: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let venv = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let bin = venv.join("bin");
    let is_ready = || Command::new(bin.join("python")).args(["-c", ready]).status().is_ok_and(|s| s.success());
    if !is_ready() {
        let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().expect("python3 runs");
        assert!(made.success(), "python3 -m venv {}", venv.display());
        let pip = Command::new(bin.join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages)
            .status()
            .expect("pip runs");
        assert!(pip.success(), "pip install {packages:?} (PyPI)");
    }
    assert!(is_ready(), "the venv {name} has {packages:?}");
    bin
}

/// A real server with a real journal (a snapshot every 25 entries) on `dir`, made afresh,
/// on the virtual clock; its secrets are seeded with the engine's seed.
pub struct JournaledServer {
    pub server: Arc<TestServer>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl JournaledServer {
    pub async fn start(dir: &std::path::Path, config: EngineConfig) -> JournaledServer {
        use esim_http::journal::{FileJournal, SegmentHeader, SnapshotPolicy, FORMAT_VERSION};
        let _ = std::fs::remove_dir_all(dir);
        let engine = Engine::new(config.clone(), Millis::VIRTUAL_EPOCH);
        let secrets = esim_http::secrets::Secrets::seeded(config.seed);
        let header = SegmentHeader {
            version: FORMAT_VERSION,
            config,
            clock: ClockMode::Virtual,
            start: engine.now(),
            first_index: 0,
        };
        let policy = SnapshotPolicy { every_entries: 25, every_bytes: u64::MAX };
        let journal = FileJournal::open(dir, header, policy).unwrap();
        let service = Service::new(engine, ADMIN.into(), ClockMode::Virtual, secrets);
        let listener = esim_http::edge::listen("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let options = ServerOptions::new(1, true);
        let task = tokio::spawn(server::serve(listener, service, Box::new(journal), options, async {
            let _ = stopped.await;
        }));
        JournaledServer { server: Arc::new(TestServer::attach(base)), stop, task }
    }

    /// Stops the server; the client goes first, so no idle pooled connection holds up the
    /// graceful shutdown.
    pub async fn stop(self) {
        let JournaledServer { server, stop, task } = self;
        drop(server);
        let _ = stop.send(());
        task.await.unwrap().unwrap();
    }
}

/// Where a browser test writes its screenshots: `docs/screenshots/` with
/// `ESIM_UPDATE_SCREENSHOTS=1` (the images the README and docs show), else `scratch` in
/// the target's temporary dir.
pub fn screenshot_dir(scratch: &str) -> std::path::PathBuf {
    if std::env::var("ESIM_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(scratch)
    }
}
