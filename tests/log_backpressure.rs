//! A log reader that stops never stops the service (decision 212): `esim serve` with its
//! stderr a pipe nobody reads (a stuck log collector: the pipe holds 64 KiB, a few
//! hundred request lines) answers every request, and the lines that did not fit its
//! bounded queue (`--log-buffer-lines`, here 100) are counted on `/metrics`. Written
//! where they were made, the lines stopped every request after about 400 of them.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

mod process;
use process::{remove_data_dir, Launch, Running, ADMIN};

/// Requests sent: each writes one line at `info`, several times what the pipe and the
/// queue hold together.
const REQUESTS: usize = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_log_reader_never_stops_the_service() {
    let dir = std::env::temp_dir().join(format!("esim-log-stuck-{}", std::process::id()));
    remove_data_dir(&dir);
    let mut launch = Launch::new(&dir).arg("--log-buffer-lines").arg("100");
    launch.rust_log = "info".into();
    let mut command = launch.command();
    command.stderr(Stdio::piped());
    let mut child = command.spawn().expect("esim serve starts");
    // Held open and never read: once the pipe is full, a write to it waits for ever.
    let _stuck_reader = child.stderr.take().expect("piped");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_string();
    let server = Running { child, base: base.clone() };
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));

    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<Bytes>>();
    let get = |path: &str, token: &str| {
        let request = http::Request::get(format!("{base}{path}"))
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let sent = client.request(request);
        async move {
            let response = tokio::time::timeout(Duration::from_secs(5), sent).await.ok()?.ok()?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, String::from_utf8_lossy(&body).to_string()))
        }
    };
    for n in 0..REQUESTS {
        // A wrong key: 401, one `request` line at info (and no engine work).
        let answer = get("/api/v2/reseller/account", "rsk_not_a_key").await;
        assert_eq!(answer.map(|(status, _)| status), Some(401), "request {n} of {REQUESTS} was not answered in 5 s");
    }
    let (status, text) = get("/metrics", ADMIN).await.expect("the metrics answer");
    assert_eq!(status, 200, "{text}");
    let dropped: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("esim_log_lines_dropped_total "))
        .unwrap_or_else(|| panic!("no esim_log_lines_dropped_total in:\n{text}"))
        .trim()
        .parse()
        .unwrap();
    // At most 100 queued and a pipe's worth written; the rest were dropped and counted.
    assert!(dropped >= (REQUESTS / 2) as f64, "{dropped} lines counted as dropped of {REQUESTS}");
    assert!(dropped <= REQUESTS as f64 + 10.0, "{dropped} dropped of about {REQUESTS} lines");
    drop(server);
    remove_data_dir(&dir);
}
