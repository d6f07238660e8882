//! The HTTP edge holds against clients without keys and clients that only ping (issue
//! 35), over real HTTP on loopback:
//!
//! - 64 keyless HTTP/2 streams, and 70 keyless HTTP/1 connections, each declaring a
//!   1 MiB body for a path outside every API and never finishing it: authenticated
//!   writes are answered (not 503) within 1 s, 8 of 8 (the real binary);
//! - 1,030 HTTP/2 connections from one address that only send PINGs: a new client is
//!   answered within 1 s at every probe, the pinging ones are closed once idle, and one
//!   address never holds more than its share of the connection cap;
//! - a connection past its maximum age is closed gracefully;
//! - a client's `esim-forwarded-shard` steers nothing (the real binary, 2 shards);
//! - a 503 of a refused change carries `Retry-After`.
//!
//! Each test prints what it measured.

use bytes::Bytes;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_http::server::{self, JournalSink, ServerOptions};
use esim_http::{ClockMode, JournalEntry, Service};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::json;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

mod common;
mod process;
use common::TestServer;
use process::{remove_data_dir, Launch, Started};

/// The tests run one at a time (they time answers of one machine's servers).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A declared 1 MiB body that sends one small chunk and then never goes on.
struct StalledBody {
    sent: bool,
}

const DECLARED_BYTES: u64 = 1024 * 1024;

impl hyper::body::Body for StalledBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if self.sent {
            return Poll::Pending;
        }
        self.sent = true;
        Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from(vec![b' '; 1024])))))
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(DECLARED_BYTES)
    }
}

/// The real binary on a fresh data dir, the admin token of [`common::ADMIN`].
fn start_binary(name: &str, extra: &[&str]) -> (Started, TestServer, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("esim-edge-holds-{name}-{}", std::process::id()));
    remove_data_dir(&dir);
    let mut launch = Launch::new(&dir).arg("--demo=false");
    for arg in extra {
        launch = launch.arg(arg);
    }
    launch.admin_token = Some(common::ADMIN.to_string());
    let started = launch.start(false);
    let server = TestServer::attach(started.running.base.clone());
    (started, server, dir)
}

fn address_of(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().unwrap()
}

/// 8 authenticated `POST /groups`, each on a new connection: their statuses and the
/// longest answer time.
async fn eight_authenticated_writes(server: &TestServer, key: &str) -> (Vec<u16>, Duration) {
    let mut statuses = Vec::new();
    let mut longest = Duration::ZERO;
    for attempt in 0..8 {
        let client = TestServer::attach(server.base.clone());
        let started = Instant::now();
        let body = Some(json!({ "name": format!("group {attempt}") }));
        let reply = tokio::time::timeout(Duration::from_secs(5), client.api("POST", "/groups", key, body)).await;
        longest = longest.max(started.elapsed());
        statuses.push(reply.map_or(0, |reply| reply.status));
    }
    (statuses, longest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_bodies_on_64_http2_streams_do_not_hold_back_authenticated_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (started, server, dir) = start_binary("h2-keyless", &[]);
    let (_, key) = server.account(100.0).await;
    let address = address_of(&server.base);
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake::<_, _, StalledBody>(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let mut streams = tokio::task::JoinSet::new();
    for _ in 0..64 {
        sender.ready().await.unwrap();
        let request = http::Request::post(format!("http://{address}/x"))
            .header(http::header::CONTENT_LENGTH, DECLARED_BYTES)
            .body(StalledBody { sent: false })
            .unwrap();
        let response = sender.send_request(request);
        streams.spawn(async move {
            match tokio::time::timeout(Duration::from_secs(10), response).await {
                Ok(Ok(response)) => response.status().as_u16(),
                Ok(Err(_)) => 1,
                Err(_) => 0,
            }
        });
    }
    // The keyless streams are open (or answered) before the writes are tried.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (statuses, longest) = eight_authenticated_writes(&server, &key).await;
    let mut keyless = std::collections::BTreeMap::<u16, usize>::new();
    while let Some(status) = streams.join_next().await {
        *keyless.entry(status.unwrap()).or_default() += 1;
    }
    println!("64 keyless HTTP/2 streams answered {keyless:?}; authenticated writes {statuses:?}, longest {longest:?}");
    assert!(statuses.iter().all(|&status| status == 201), "{statuses:?}");
    assert!(longest < Duration::from_secs(1), "{longest:?}");
    assert_eq!(keyless.get(&404), Some(&64), "each keyless stream is answered 404 from its headers: {keyless:?}");
    connection.abort();
    started.stop();
    remove_data_dir(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_bodies_on_70_http1_connections_do_not_hold_back_authenticated_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (started, server, dir) = start_binary("h1-keyless", &[]);
    let (_, key) = server.account(100.0).await;
    let address = address_of(&server.base);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..70 {
        clients.spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let head = format!("POST /x HTTP/1.1\r\nHost: edge\r\nContent-Length: {DECLARED_BYTES}\r\n\r\n");
            stream.write_all(head.as_bytes()).await.unwrap();
            let _ = stream.write_all(&[b' '; 1024]).await;
            // Never more of the body: what does the server say, and does it close?
            let mut answer = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
            let text = String::from_utf8_lossy(&answer).to_lowercase();
            (text.lines().next().unwrap_or("").to_string(), text.contains("connection: close"), read.is_ok())
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (statuses, longest) = eight_authenticated_writes(&server, &key).await;
    let mut answers = std::collections::BTreeMap::<(String, bool, bool), usize>::new();
    while let Some(answer) = clients.join_next().await {
        *answers.entry(answer.unwrap()).or_default() += 1;
    }
    println!("70 keyless HTTP/1 connections: {answers:?}; authenticated writes {statuses:?}, longest {longest:?}");
    assert!(statuses.iter().all(|&status| status == 201), "{statuses:?}");
    assert!(longest < Duration::from_secs(1), "{longest:?}");
    let expected = ("http/1.1 404 not found".to_string(), true, true);
    assert_eq!(answers.get(&expected), Some(&70), "404, Connection: close, closed: {answers:?}");
    started.stop();
    remove_data_dir(&dir);
}

/// Raises this process's soft descriptor limit to its hard limit (the pinging test
/// holds both ends of 1,030 connections).
fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `GET /healthz` on a new HTTP/1 connection from 127.0.0.1: how long the answer took,
/// `None` without one within 2 s.
async fn probe(address: SocketAddr) -> Option<Duration> {
    let started = Instant::now();
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.ok()?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n").await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        answer.starts_with(b"HTTP/1.1 200").then_some(())
    };
    tokio::time::timeout(Duration::from_secs(2), exchange).await.ok().flatten()?;
    Some(started.elapsed())
}

/// One pinging client from 127.0.0.2: an HTTP/2 connection that makes one request, then
/// only PINGs every 200 ms. Whether it got its answer, and when the connection ended.
async fn pinging_client(address: SocketAddr) -> (bool, Instant) {
    let connected = async {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind("127.0.0.2:0".parse().unwrap()).ok()?;
        let stream = socket.connect(address).await.ok()?;
        let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_millis(200))
            .keep_alive_while_idle(true)
            .handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .ok()?;
        let connection = tokio::spawn(connection);
        let request = http::Request::get(format!("http://{address}/healthz")).body(Empty::new()).unwrap();
        let answered = match sender.send_request(request).await {
            Ok(response) => response.into_body().collect().await.is_ok(),
            Err(_) => false,
        };
        let _ = tokio::time::timeout(Duration::from_secs(60), connection).await;
        Some(answered)
    };
    let answered = connected.await.unwrap_or(false);
    (answered, Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pinging_http2_connections_do_not_lock_out_a_new_client() {
    const PINGING: usize = 1_030;
    let _one = ONE_AT_A_TIME.lock().await;
    let descriptors = raise_descriptor_limit();
    assert!(
        descriptors >= 2 * PINGING as u64 + 200,
        "the test needs {} descriptors, has {descriptors}",
        2 * PINGING + 200
    );
    let mut options = ServerOptions::new(1, true);
    let idle = Duration::from_secs(2);
    options.edge.idle_timeout = idle;
    options.edge.first_byte_timeout = idle;
    let server = TestServer::start_with(options).await;
    let address = address_of(&server.base);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..PINGING {
        clients.spawn(pinging_client(address));
    }
    let opened = Instant::now();
    // Probes from another address every 200 ms, through the idle timeout and past it.
    let mut probes = Vec::new();
    while opened.elapsed() < idle + Duration::from_secs(2) {
        probes.push(probe(address).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut answered, mut last_end, mut still_open) = (0, opened, 0);
    let give_up = tokio::time::Instant::now() + idle + Duration::from_secs(20);
    loop {
        match tokio::time::timeout_at(give_up, clients.join_next()).await {
            Ok(Some(ended)) => {
                let (got_answer, at) = ended.unwrap();
                answered += usize::from(got_answer);
                last_end = last_end.max(at);
            }
            Ok(None) => break,
            Err(_) => {
                still_open = clients.len();
                clients.abort_all();
                break;
            }
        }
    }
    assert_eq!(still_open, 0, "PINGs kept {still_open} connections open for {:?}", opened.elapsed());
    let slowest = probes.iter().flatten().max().copied();
    let unanswered = probes.iter().filter(|probe| probe.is_none()).count();
    let all_closed_after = last_end.duration_since(opened);
    println!(
        "{PINGING} pinging HTTP/2 connections: {answered} got their answer (the rest were over their address's \
         share), all closed {all_closed_after:?} after they opened (idle timeout {idle:?}); {} probes, {unanswered} \
         unanswered, slowest {slowest:?}",
        probes.len()
    );
    assert_eq!(unanswered, 0, "a new client was locked out: {probes:?}");
    assert!(slowest.unwrap() < Duration::from_secs(1), "{probes:?}");
    let share =
        esim_http::edge::address_share(esim_http::edge::CONNECTIONS_PER_ADDRESS_MAX, esim_http::edge::CONNECTIONS_MAX);
    assert!(answered <= share, "one address held {answered} connections, its share is {share}");
    assert!(answered > 0, "the pinging clients were served at all");
    assert!(all_closed_after < idle + Duration::from_secs(6), "PINGs kept connections open: {all_closed_after:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_its_maximum_age_is_closed_gracefully() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut options = ServerOptions::new(1, true);
    options.edge.connection_age_max = Duration::from_secs(1);
    let server = TestServer::start_with(options).await;
    let address = address_of(&server.base);
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let opened = Instant::now();
    let mut answered = 0;
    // A busy client: a request every 100 ms is never idle, yet its connection ends.
    while opened.elapsed() < Duration::from_secs(5) {
        if sender.ready().await.is_err() {
            break;
        }
        let request = http::Request::get(format!("http://{address}/healthz")).body(Empty::new()).unwrap();
        match sender.send_request(request).await {
            Ok(response) if response.status() == 200 => answered += 1,
            _ => break,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(5), connection).await;
    let lived = opened.elapsed();
    println!("a busy HTTP/2 connection with a 1 s maximum age: {answered} answers, closed after {lived:?}");
    assert!(matches!(closed, Ok(Ok(Ok(())))), "closed gracefully (GOAWAY): {closed:?}");
    assert!(lived >= Duration::from_millis(900) && lived < Duration::from_secs(3), "{lived:?}");
    assert!(answered >= 5, "requests before the maximum age were answered: {answered}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_forwarded_shard_header_is_not_trusted() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (started, server, dir) = start_binary("forged-shard", &["--shards", "2", "--allow-insecure-webhooks"]);
    let forged = esim_http::nodes::FORWARDED_SHARD;
    // A key of the shard its account was placed on; the header names the other one.
    let (_, key) = server.account(10.0).await;
    let key_shard = esim_http::shards::shard_of_api_key(&key, 2);
    let other = (1 - key_shard).to_string();
    let path = "/api/v2/reseller/account";
    let steered = server.raw("GET", path, Some(&key), &[(forged, other.as_str())], Bytes::new()).await;
    let out_of_range = server.raw("GET", path, Some(&key), &[(forged, "9")], Bytes::new()).await;
    let with_a_made_up_proof = server
        .raw("GET", path, Some(&key), &[(forged, other.as_str()), ("esim-node-proof", &"00".repeat(32))], Bytes::new())
        .await;
    // A sandbox clock move named for one shard still moves every shard's clock.
    let clock = || server.admin("GET", "/sandbox/v1/clock", None);
    let before = clock().await.body;
    let advance = json!({ "seconds": 3600 }).to_string();
    let moved = server
        .raw(
            "POST",
            "/sandbox/v1/clock/advance",
            Some(common::ADMIN),
            &[(forged, "1"), ("content-type", "application/json")],
            Bytes::from(advance),
        )
        .await;
    let after = clock().await.body;
    println!(
        "forged {forged}: steered {}, out of range {}, made-up proof {}; clock advance {} moved shard 0's clock from {before} to {after}",
        steered.status, out_of_range.status, with_a_made_up_proof.status, moved.status
    );
    assert_eq!(steered.status, 200, "the key's own shard answered: {}", steered.body);
    assert_eq!(out_of_range.status, 200, "the header was ignored, not refused: {}", out_of_range.body);
    assert_eq!(with_a_made_up_proof.status, 200, "{}", with_a_made_up_proof.body);
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_ne!(before, after, "the advance reached shard 0 too");
    started.stop();
    remove_data_dir(&dir);
}

/// A journal that never takes a write: every change is refused with 503.
struct DeadDisk {
    durable: Engine,
}

impl JournalSink for DeadDisk {
    fn append(&mut self, _entries: &[JournalEntry]) -> std::io::Result<()> {
        Err(std::io::Error::other("the disk is gone"))
    }
    fn reload(&mut self) -> Result<Engine, String> {
        Ok(self.durable.clone())
    }
    fn probe(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::other("the disk is gone"))
    }
    fn blocks(&self) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_change_and_an_unready_service_say_when_to_retry() {
    let _one = ONE_AT_A_TIME.lock().await;
    let config = EngineConfig { seed: 3, ..EngineConfig::default() };
    let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
    let secrets = esim_http::secrets::Secrets::seeded(3);
    let sink = DeadDisk { durable: engine.clone() };
    let service = Service::new(engine, common::ADMIN.into(), ClockMode::Virtual, secrets);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = TestServer::attach(format!("http://{}", listener.local_addr().unwrap()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, service, Box::new(sink), ServerOptions::new(1, true), async {
        let _ = stopped.await;
    }));
    let account = json!({ "contact_email": "a@b.example" });
    let first = server.admin("POST", "/admin/v1/accounts", Some(account.clone())).await;
    let refused = server.admin("POST", "/admin/v1/accounts", Some(account)).await;
    let ready = server.raw("GET", "/readyz", None, &[], Bytes::new()).await;
    let retry = |reply: &common::Reply| reply.headers.get(http::header::RETRY_AFTER).cloned();
    println!(
        "dead journal: first change {} (Retry-After {:?}), next {} (Retry-After {:?}), /readyz {} (Retry-After {:?})",
        first.status,
        retry(&first),
        refused.status,
        retry(&refused),
        ready.status,
        retry(&ready)
    );
    for reply in [&first, &refused, &ready] {
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert_eq!(retry(reply).as_ref().map(|v| v.to_str().unwrap()), Some("1"), "{}", reply.body);
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}
