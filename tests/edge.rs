//! The connection-level guards of the real binary (`esim serve`, release build, real
//! HTTP on loopback): idle sockets at the descriptor limit, a thousand keyless
//! near-megabyte bodies, silent and stalled clients. Each test prints its figures.
//! The tests run one at a time (they measure one process's CPU, memory and timing).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

const ADMIN: &str = "edge-admin-token";
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `esim serve` on a fresh data dir, its stderr (the log) in a file.
struct Server {
    child: Child,
    address: SocketAddr,
    dir: PathBuf,
    log: PathBuf,
}

impl Server {
    /// Starts the binary; with `descriptors`, under that `RLIMIT_NOFILE` (soft and hard,
    /// set by the shell's `ulimit -n` before it execs the server: no unsafe code here).
    fn start(name: &str, descriptors: Option<u64>) -> Server {
        let dir = std::env::temp_dir().join(format!("esim-edge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let log = dir.with_extension("log");
        // The secret key file beside the data dir (never in $HOME, never inside the dir).
        let key_file = dir.with_extension("secret-key");
        let stderr = std::fs::File::create(&log).unwrap();
        let limit = descriptors.map(|n| format!("ulimit -n {n} && ")).unwrap_or_default();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("{limit}exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_esim"))
            .args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--seed", "7", "--demo=false"])
            .args(["--admin-token", ADMIN, "--data-dir"])
            .arg(&dir)
            .env("RUST_LOG", "info")
            .env("ESIM_SECRET_KEY_FILE", &key_file)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("esim serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let address = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .parse()
            .unwrap();
        Server { child, address, dir, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// Resident memory (VmRSS) in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// User plus system CPU time so far, in clock ticks (1/100 s on Linux).
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        // After the command name: state is field 3, utime 14 and stime 15.
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }

    /// One HTTP/1.1 exchange on a new connection; the raw answer (empty on failure).
    async fn exchange(&self, request: &str, within: Duration) -> String {
        let exchange = async {
            let mut stream = TcpStream::connect(self.address).await.ok()?;
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await.ok()?;
            Some(String::from_utf8_lossy(&answer).into_owned())
        };
        tokio::time::timeout(within, exchange).await.ok().flatten().unwrap_or_default()
    }

    async fn openapi_status(&self, within: Duration) -> String {
        let answer = self
            .exchange("GET /api/v2/reseller/openapi.json HTTP/1.1\r\nHost: edge\r\nConnection: close\r\n\r\n", within)
            .await;
        answer.lines().next().unwrap_or("").to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(self.dir.with_extension("secret-key"));
    }
}

/// (a) 400 sockets that never send a byte against a server allowed 300 descriptors:
/// the server stays under its connection cap (no "Too many open files" loop), its log
/// and CPU stay small, and once the sockets close a normal request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_at_the_descriptor_limit_neither_spin_nor_flood_the_log() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = Server::start("idle", Some(300));
    assert!(server.openapi_status(Duration::from_secs(5)).await.contains(" 200 "));
    let (log_before, cpu_before) = (server.log_bytes(), server.cpu_ticks());
    let mut sockets = Vec::new();
    for _ in 0..400 {
        sockets.push(TcpStream::connect(server.address).await.expect("the listen backlog takes the connection"));
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (log_grown, cpu) = (server.log_bytes() - log_before, server.cpu_ticks() - cpu_before);
    drop(sockets);
    let started = Instant::now();
    let status = server.openapi_status(Duration::from_secs(10)).await;
    let answered_in = started.elapsed();
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    let emfile_lines = log.lines().filter(|l| l.contains("Too many open files")).count();
    println!(
        "idle sockets: log grew {log_grown} bytes, CPU {:.2} s over 10 s, {emfile_lines} accept-error lines, \
         answered after close in {answered_in:?} ({status})",
        cpu as f64 / 100.0
    );
    assert!(log_grown < 1_000_000, "the log grew {log_grown} bytes");
    assert!(cpu < 300, "{:.2} s of CPU in 10 s: the server spins", cpu as f64 / 100.0);
    assert!(status.contains(" 200 "), "no answer once the idle sockets closed: {status:?}");
}

/// (b) 1,000 connections without an API key, each declaring a 1,048,000-byte body and
/// sending most of it: the server's resident memory rises by less than 200 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keyless_near_megabyte_bodies_keep_memory_bounded() {
    const CONNECTIONS: usize = 1_000;
    const DECLARED: usize = 1_048_000;
    const SENT: usize = 1_000_000;
    static BODY: [u8; SENT] = [b' '; SENT];
    let _one = ONE_AT_A_TIME.lock().await;
    let server = Server::start("bodies", None);
    assert!(server.openapi_status(Duration::from_secs(5)).await.contains(" 200 "));
    let baseline = server.rss_kib();
    let address = server.address;
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        clients.spawn(async move {
            let Ok(mut stream) = TcpStream::connect(address).await else { return "no connection".to_string() };
            let head = format!(
                "POST /api/v2/reseller/esim/provision HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\n\
                 Content-Length: {DECLARED}\r\n\r\n"
            );
            if stream.write_all(head.as_bytes()).await.is_err() {
                return "closed before the body".to_string();
            }
            let _ = tokio::time::timeout(Duration::from_secs(15), stream.write_all(&BODY)).await;
            let mut answer = vec![0u8; 512];
            match tokio::time::timeout(Duration::from_secs(15), stream.read(&mut answer)).await {
                Ok(Ok(read)) if read > 12 => String::from_utf8_lossy(&answer[9..12]).into_owned(),
                Ok(_) => "closed".to_string(),
                Err(_) => "no answer".to_string(),
            }
        });
    }
    let mut peak = baseline;
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    loop {
        tokio::select! {
            done = clients.join_next() => match done {
                Some(outcome) => *outcomes.entry(outcome.unwrap()).or_default() += 1,
                None => break,
            },
            _ = tokio::time::sleep(Duration::from_millis(50)) => peak = peak.max(server.rss_kib()),
        }
    }
    peak = peak.max(server.rss_kib());
    let rise_mb = (peak - baseline) as f64 / 1024.0;
    println!(
        "keyless bodies: RSS baseline {:.1} MB, peak {:.1} MB, rise {rise_mb:.1} MB in {:?}; outcomes {outcomes:?}",
        baseline as f64 / 1024.0,
        peak as f64 / 1024.0,
        started.elapsed()
    );
    assert!(rise_mb < 200.0, "RSS rose by {rise_mb:.1} MB");
    assert!(server.openapi_status(Duration::from_secs(10)).await.contains(" 200 "), "the server still answers");
}

/// (c) A connection that sends nothing is closed after the first byte timeout (10 s),
/// so is one that sends part of the HTTP/2 preface and stops, and a body that stalls
/// midway gets 408 REQUEST_TIMEOUT after the body read timeout (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_a_stalled_body_gets_408() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = Server::start("silent", None);
    let closed_after = |prefix: &'static [u8]| {
        let address = server.address;
        async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream.write_all(prefix).await.unwrap();
            let started = Instant::now();
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte)).await;
            assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the server closes: {read:?}");
            started.elapsed()
        }
    };
    let stalled_body = async {
        let started = Instant::now();
        let answer = server
            .exchange(
                &format!(
                    "POST /admin/v1/accounts HTTP/1.1\r\nHost: edge\r\nAuthorization: Bearer {ADMIN}\r\n\
                     Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"contact_email\": "
                ),
                Duration::from_secs(30),
            )
            .await;
        (started.elapsed(), answer)
    };
    let (silent, partial_preface, (stalled, answer)) =
        tokio::join!(closed_after(b""), closed_after(b"PRI * HTTP/2.0\r\n"), stalled_body);
    println!("silent connection closed after {silent:?}, partial preface after {partial_preface:?}, stalled body answered after {stalled:?}");
    for waited in [silent, partial_preface] {
        assert!(waited >= Duration::from_secs(9) && waited < Duration::from_secs(15), "{waited:?}");
    }
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(stalled >= Duration::from_secs(9) && stalled < Duration::from_secs(15), "{stalled:?}");
}

/// An idle HTTP/2 connection (hyper has no idle timeout for HTTP/2) is closed after the
/// idle timeout, here shortened on the in-process server (a request in flight is never
/// idle: see the unit tests of `esim_http::edge`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut options = esim_http::server::ServerOptions::new(1, true);
    options.edge.idle_timeout = Duration::from_millis(500);
    options.edge.first_byte_timeout = Duration::from_millis(500);
    let server = common::TestServer::start_with(options).await;
    let address = server.base.trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let request = |path: &str| http::Request::get(format!("http://{address}{path}")).body(Empty::new()).unwrap();
    let response = sender.send_request(request("/api/v2/reseller/openapi.json")).await.unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();
    let idle_from = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(10), connection).await;
    let idle_for = idle_from.elapsed();
    println!("idle HTTP/2 connection closed after {idle_for:?}");
    assert!(closed.is_ok(), "the idle HTTP/2 connection stayed open");
    assert!(idle_for >= Duration::from_millis(400) && idle_for < Duration::from_secs(3), "{idle_for:?}");
    server.stop().await;
}
