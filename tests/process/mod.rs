//! Driving the real `esim serve` binary as a process: start it on a data dir, call it
//! over HTTP, stop it gracefully.

#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const ADMIN: &str = "crash-admin-token";

pub type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

pub struct Running {
    pub child: Child,
    pub base: String,
}

/// Starts `esim serve` on `dir` (virtual clock, seed 99) with `extra` arguments.
pub fn start(dir: &Path, extra: &[&str]) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--seed", "99", "--admin-token", ADMIN])
        .arg("--data-dir")
        .arg(dir)
        .args(extra)
        .env("RUST_LOG", "warn")
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
