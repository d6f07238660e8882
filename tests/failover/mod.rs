//! What the failover tests on PostgreSQL share (`tests/postgres_failover.rs`,
//! `tests/shards_standby_pg.rs`): nodes killed when dropped, clients that write through
//! whichever node answers (the same Idempotency-Key on every retry), and the books of
//! what was acknowledged, checked against the service.

#![allow(dead_code)]

use crate::common;
use crate::pg::{dec, launch};
use crate::process::{self, call, remove_data_dir, HttpClient, Running};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `esim serve`, killed (SIGKILL) when dropped: a failed assertion leaves no
/// server behind.
pub struct Node {
    pub running: Running,
}

impl Node {
    pub fn base(&self) -> String {
        self.running.base.clone()
    }

    pub fn pid(&self) -> u32 {
        self.running.child.id()
    }

    /// SIGTERM, expecting exit 0.
    pub fn stop(&mut self) {
        process::unsafe_free_sigterm(&mut self.running.child);
    }

    pub fn kill(&mut self) {
        self.running.child.kill().unwrap();
        self.running.child.wait().unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Std signals only a child it has not reaped yet: never a reused pid.
        let _ = self.running.child.kill();
        let _ = self.running.child.wait();
    }
}

/// `esim serve --store` with a short lease, sharing the key file of the first node.
pub fn start_node(dir: &Path, url: &str, key_file: &Path, lease_ms: u64) -> Node {
    start_node_with(dir, url, key_file, lease_ms, &[])
}

/// [`start_node`] with more arguments (shards, the shards it owns or follows).
pub fn start_node_with(dir: &Path, url: &str, key_file: &Path, lease_ms: u64, args: &[&str]) -> Node {
    let mut node = launch(dir, url).arg("--lease-ms").arg(&lease_ms.to_string());
    for arg in args {
        node = node.arg(arg);
    }
    node.key_file = key_file.to_path_buf();
    Node { running: node.start(false).running }
}

pub fn log_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default()
}

pub async fn readyz(client: &HttpClient, base: &str) -> Option<(u16, Value)> {
    call(client, base, "GET", "/readyz", "", None, None).await
}

/// Waits until the node at `base` says it is a standby.
pub async fn wait_standby(client: &HttpClient, base: &str) {
    let began = Instant::now();
    loop {
        if let Some((503, body)) = readyz(client, base).await {
            if body["message"].as_str().is_some_and(|m| m.starts_with("standby")) {
                return;
            }
        }
        assert!(began.elapsed() < Duration::from_secs(10), "{base} did not become a standby");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An acknowledged write and its answer (replayed later with the same key).
#[derive(Clone, Debug)]
pub struct Acked {
    pub path: String,
    pub body: Value,
    pub idempotency_key: String,
    pub status: u16,
    pub answer: Value,
}

/// One write, sent to the nodes in turn (on 503 or a connection error, the next one,
/// with the same Idempotency-Key) until one answers it finally.
pub async fn write(
    client: &HttpClient,
    nodes: &Mutex<Vec<String>>,
    key: &str,
    path: &str,
    body: Value,
    idempotency_key: &str,
) -> Acked {
    let began = Instant::now();
    let mut attempt = 0usize;
    loop {
        let base = {
            let nodes = nodes.lock().unwrap();
            nodes[attempt % nodes.len()].clone()
        };
        attempt += 1;
        let reply = call(
            client,
            &base,
            "POST",
            &format!("/api/v2/reseller{path}"),
            key,
            Some(body.clone()),
            Some(idempotency_key),
        )
        .await;
        match reply {
            Some((503, _)) | None => {
                assert!(began.elapsed() < Duration::from_secs(30), "{path} found no owner for 30 s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some((status, answer)) => {
                return Acked {
                    path: path.to_string(),
                    body,
                    idempotency_key: idempotency_key.to_string(),
                    status,
                    answer,
                }
            }
        }
    }
}

/// What one worker (one account) had acknowledged.
#[derive(Clone, Default)]
pub struct Books {
    pub provisioned: u64,
    pub funded: Decimal,
    pub defunded: u64,
    pub acked: Vec<Acked>,
}

/// A worker's round: provision an eSIM, fund it twice, defund it; again, until `stop`
/// or `ops_max` writes (the per-key rate limit of 100 a minute counts from each
/// takeover's start: a round stays under it with its replays).
pub async fn work(
    client: HttpClient,
    nodes: Arc<Mutex<Vec<String>>>,
    key: String,
    round: usize,
    worker: usize,
    books: Arc<Mutex<Books>>,
    stop: Arc<AtomicBool>,
) {
    const OPS_MAX: usize = 30;
    let mut iccid = String::new();
    for step in 0..OPS_MAX {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let idem = format!("r{round}-w{worker}-s{step}");
        let phase = step % 4;
        let (path, body) = match phase {
            0 => ("/esim/provision".to_string(), json!({"end_user_reference": idem, "label": "failover"})),
            1 | 2 => (format!("/esim/{iccid}/fund"), json!({"amount": Decimal::new(100 + step as i64, 2)})),
            _ => (format!("/esim/{iccid}/defund"), json!({})),
        };
        let acked = write(&client, &nodes, &key, &path, body.clone(), &idem).await;
        let expected = [201, 200, 200, 202][phase];
        assert_eq!(acked.status, expected, "{path}: {}", acked.answer);
        {
            let mut books = books.lock().unwrap();
            match phase {
                0 => {
                    iccid = acked.answer["iccid"].as_str().unwrap().to_string();
                    books.provisioned += 1;
                }
                1 | 2 => books.funded += dec(&body["amount"]),
                _ => books.defunded += 1,
            }
            books.acked.push(acked);
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Every acknowledged change is there and none twice: lifetime usage is the fees of the
/// eSIMs provisioned plus every fund, the eSIM count is the provisions.
pub async fn check_books(server: &common::TestServer, key: &str, books: &Books, fee: Decimal, when: &str) {
    let wallet = server.api("GET", "/wallet/balance", key, None).await;
    assert_eq!(wallet.status, 200, "{when}: {}", wallet.body);
    let expected = fee * Decimal::from(books.provisioned) + books.funded;
    assert_eq!(dec(&wallet.body["lifetime_usage_usd"]), expected, "{when}: lifetime usage");
    let list = server.api("GET", "/esim/list?limit=1", key, None).await;
    assert_eq!(list.body["total"], json!(books.provisioned), "{when}: eSIMs provisioned");
}

/// The nodes' data dirs and logs go (the nodes were stopped or killed).
pub fn remove_dirs(dirs: &[PathBuf]) {
    for dir in dirs {
        remove_data_dir(dir);
        let _ = std::fs::remove_file(dir.with_extension("log"));
    }
}

/// The data dirs a test's nodes get, numbered in order (`<prefix>-0`, `<prefix>-1`, ...
/// under [`crate::pg::work_dir`]), removed together with their logs at the end.
pub struct WorkDirs {
    prefix: &'static str,
    made: Vec<PathBuf>,
}

impl WorkDirs {
    pub fn new(prefix: &'static str) -> WorkDirs {
        WorkDirs { prefix, made: Vec::new() }
    }

    /// The next node's dir.
    pub fn next(&mut self) -> PathBuf {
        let dir = crate::pg::work_dir(&format!("{}-{}", self.prefix, self.made.len()));
        self.made.push(dir.clone());
        dir
    }

    /// Removes every dir made, and its log.
    pub fn remove(&self) {
        remove_dirs(&self.made);
    }
}

/// `kill -STOP` / `kill -CONT` (no unsafe code).
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill").args([&format!("-{name}"), &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Sends every write of `acked` again to `base` with its Idempotency-Key: each must
/// answer what it answered the first time (status and body). Returns how many.
pub async fn replay_acked(client: &HttpClient, base: &str, key: &str, acked: &[Acked], when: &str) -> usize {
    for write in acked {
        let reply = call(
            client,
            base,
            "POST",
            &format!("/api/v2/reseller{}", write.path),
            key,
            Some(write.body.clone()),
            Some(&write.idempotency_key),
        )
        .await
        .unwrap_or_else(|| panic!("{when}: {base} answers"));
        assert_eq!((reply.0, &reply.1), (write.status, &write.answer), "{when}: replay of {write:?}");
    }
    acked.len()
}
