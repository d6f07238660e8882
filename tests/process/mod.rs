//! Driving the real `esim serve` binary as a process: start it on a data dir, call it
//! over HTTP, stop it gracefully.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const ADMIN: &str = "crash-admin-token";

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A client that opens a connection per request: none is kept to a server a test kills,
/// stops or freezes, so the next request reaches whichever server answers now.
pub fn unpooled_client() -> HttpClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).pool_max_idle_per_host(0).build_http()
}

pub struct Running {
    pub child: Child,
    pub base: String,
}

/// A server a test started never outlives it, even when the test fails (a kill is a
/// no-op for one that already ended).
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `esim serve` on `dir` (virtual clock, seed 99) with `extra` arguments.
pub fn start(dir: &Path, extra: &[&str]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--seed", "99", "--admin-token", ADMIN])
        .arg("--data-dir")
        .arg(dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .env("ESIM_SECRET_KEY_FILE", key_file(dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("esim serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_string();
    Running { child, base }
}

pub async fn call(
    client: &HttpClient,
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> Option<(u16, Value)> {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(request.body(Full::new(body)).unwrap()))
        .await
        .ok()?
        .ok()?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
}

/// Stops the server gracefully with SIGTERM (via the `kill` command, no unsafe code).
pub fn unsafe_free_sigterm(child: &mut Child) {
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "graceful stop exits 0: {exit:?}");
}

/// The secret key file of the data dir `dir`: beside it (`<dir>.secret-key`), never
/// inside it and never in $HOME; every restart of one data dir uses the same file.
pub fn key_file(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".secret-key");
    PathBuf::from(name)
}

/// Removes a data dir and its key file (the end of a test).
pub fn remove_data_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(key_file(dir));
}

/// How to start `esim serve`, for tests that need more than [`start`]: no admin token
/// flag (the server then writes `DIR/admin-token`), another seed, a umask, the log in a
/// file, extra environment.
pub struct Launch {
    pub dir: PathBuf,
    pub key_file: PathBuf,
    /// `--admin-token`; `None` passes none.
    pub admin_token: Option<String>,
    /// `--seed`; `None` passes none (the server draws one).
    pub seed: Option<u64>,
    /// Run under this umask (set by the shell before it execs the server).
    pub umask: Option<u32>,
    /// Where stderr (the log) goes; `None` discards it.
    pub log: Option<PathBuf>,
    pub rust_log: String,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

impl Launch {
    /// Virtual clock, seed 99, the admin token [`ADMIN`], the key file [`key_file`].
    pub fn new(dir: &Path) -> Launch {
        Launch {
            dir: dir.to_path_buf(),
            key_file: key_file(dir),
            admin_token: Some(ADMIN.to_string()),
            seed: Some(99),
            umask: None,
            log: None,
            rust_log: "warn".into(),
            env: Vec::new(),
            args: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: &str) -> Launch {
        self.args.push(arg.to_string());
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Launch {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// The command, stdout piped; stderr to the log file (appended) or discarded.
    pub fn command(&self) -> Command {
        let mut command = Command::new("sh");
        let umask = self.umask.map(|m| format!("umask {m:03o} && ")).unwrap_or_default();
        command.arg("-c").arg(format!("{umask}exec \"$0\" \"$@\"")).arg(env!("CARGO_BIN_EXE_esim"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--data-dir"]).arg(&self.dir);
        if let Some(token) = &self.admin_token {
            command.args(["--admin-token", token]);
        }
        if let Some(seed) = self.seed {
            command.args(["--seed", &seed.to_string()]);
        }
        command.args(&self.args);
        command.env("RUST_LOG", &self.rust_log).env("ESIM_SECRET_KEY_FILE", &self.key_file);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command.stdout(Stdio::piped()).stdin(Stdio::null());
        match &self.log {
            Some(path) => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
                command.stderr(file);
            }
            None => {
                command.stderr(Stdio::null());
            }
        }
        command
    }

    /// Starts the server and reads its first stdout line (and the demo key line, when
    /// `demo_line`); panics if it does not start.
    pub fn start(&self, demo_line: bool) -> Started {
        let mut child = self.command().spawn().expect("esim serve starts");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let Some(base) = line.trim().strip_prefix("listening on ").map(str::to_string) else {
            let _ = wait_timeout(&mut child, Duration::from_secs(5));
            let log = self.log.as_ref().map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default();
            panic!("esim serve did not start: first line {line:?}; exit {:?}; log:\n{log}", child.try_wait());
        };
        let mut demo_key = None;
        if demo_line {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let key = line
                .trim()
                .strip_prefix("demo account API key (shown once): ")
                .unwrap_or_else(|| panic!("second line: {line:?}"));
            demo_key = Some(key.to_string());
        }
        // Keep reading stdout so the server never blocks on a full pipe.
        let rest = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut reader, &mut text);
            text
        });
        Started { running: Running { child, base }, demo_key, stdout_rest: Some(rest) }
    }
}

pub struct Started {
    pub running: Running,
    /// The demo key printed on the second line, if asked for.
    pub demo_key: Option<String>,
    /// Whatever else the server prints on stdout (read to its end by a thread).
    pub stdout_rest: Option<std::thread::JoinHandle<String>>,
}

impl Started {
    pub fn pid(&self) -> u32 {
        self.running.child.id()
    }

    /// SIGTERM, expecting exit 0; returns whatever else it printed on stdout.
    pub fn stop(mut self) -> String {
        unsafe_free_sigterm(&mut self.running.child);
        self.stdout_rest.take().map(|t| t.join().unwrap()).unwrap_or_default()
    }
}

/// Waits for a child for at most `limit`; `None` if it still runs.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file under `dir`, recursively, with whether it is a directory.
pub fn walk(dir: &Path) -> Vec<(PathBuf, bool)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let is_dir = std::fs::symlink_metadata(&path).unwrap().is_dir();
            if is_dir {
                pending.push(path.clone());
            }
            found.push((path, is_dir));
        }
    }
    found.sort();
    found
}

/// `esim <args> --data-dir <dir>` run to its end.
pub fn esim_offline(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_esim")).args(args).arg("--data-dir").arg(dir).output().unwrap()
}
