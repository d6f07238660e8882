//! The developer dashboard (issue 18), end to end: the real `esim serve` binary (virtual
//! clock, insecure webhooks allowed for a loopback receiver, the demo account) driven in
//! a real headless browser, Debian's Chromium, by Playwright for Python
//! (`tests/dashboard/flows.py`, in a venv from PyPI; Playwright's own browsers are never
//! downloaded). The flows write screenshots of the reseller, operator and sandbox views to
//! the target dir, or to `docs/screenshots/` with `ESIM_UPDATE_SCREENSHOTS=1`.
//!
//! Here, over plain HTTP: the dashboard's headers (CSP, nosniff, referrer policy, content
//! types), its 404 with the API's error body, and that the key the browser created and
//! revoked answers 401.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
mod process;
use process::{call, remove_data_dir, wait_timeout, HttpClient, Launch, ADMIN};

/// Playwright for Python, pinned (it drives the system Chromium through CDP).
const PLAYWRIGHT: &str = "playwright==1.65.2";
/// Debian's Chromium (`apt-get install chromium`).
const CHROMIUM: &str = "/usr/bin/chromium";
/// The whole browser run is killed and the test fails past this.
const FLOWS_DEADLINE: Duration = Duration::from_secs(300);

async fn get(client: &HttpClient, url: &str) -> (http::StatusCode, http::HeaderMap, bytes::Bytes) {
    use http_body_util::BodyExt;
    let request = http::Request::get(url).body(http_body_util::Full::new(bytes::Bytes::new())).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(request)).await.unwrap().unwrap();
    let (parts, body) = response.into_parts();
    (parts.status, parts.headers, body.collect().await.unwrap().to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: this test drives Debian's Chromium; install it with \
         `apt-get update && apt-get install -y --no-install-recommends chromium` (.ci/run does)"
    );
    let python = common::python_venv("dashboard-venv", &[PLAYWRIGHT], "import playwright.sync_api").join("python");

    let dir = std::env::temp_dir().join(format!("esim-dashboard-{}", std::process::id()));
    remove_data_dir(&dir);
    let started = Launch::new(&dir).arg("--allow-insecure-webhooks").arg("--demo").start(true);
    let base = started.running.base.clone();
    let demo_key = started.demo_key.clone().expect("the demo key");
    let client: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();

    // The files and their headers, over plain HTTP.
    for (path, content_type) in [
        ("/dashboard/", "text/html; charset=utf-8"),
        ("/dashboard/app.js", "text/javascript; charset=utf-8"),
        ("/dashboard/app.css", "text/css; charset=utf-8"),
        ("/dashboard/nothing.js", "application/json"),
    ] {
        let (status, headers, body) = get(&client, &format!("{base}{path}")).await;
        let expected = if path.ends_with("nothing.js") { 404 } else { 200 };
        assert_eq!(status.as_u16(), expected, "{path}");
        assert_eq!(headers["content-type"], content_type, "{path}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        for rule in [
            "default-src 'none'",
            "script-src 'self';",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ] {
            assert!(csp.contains(rule), "{path}: {rule} in {csp}");
        }
        assert!(!csp.contains("script-src 'self' 'unsafe"), "no unsafe script source: {csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
        assert!(headers.contains_key("cache-control"), "{path}");
        if expected == 404 {
            let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(error["code"], "ROUTE_NOT_FOUND", "{error}");
            assert!(error["message"].is_string() && error["error"].is_string(), "{error}");
        }
    }
    let (status, headers, _) = get(&client, &format!("{base}/dashboard")).await;
    assert_eq!((status.as_u16(), headers["location"].to_str().unwrap()), (308, "/dashboard/"));

    // The flows in the browser.
    let shots = common::screenshot_dir("dashboard-screenshots");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-flows.json");
    let _ = std::fs::remove_file(&out);
    for name in ["reseller.png", "operator.png", "sandbox.png"] {
        let _ = std::fs::remove_file(shots.join(name));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard/flows.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .args([base.as_str(), demo_key.as_str(), ADMIN])
        .arg(&shots)
        .arg(&out)
        .env("PYTHONUNBUFFERED", "1")
        .spawn()
        .expect("python runs");
    let status = tokio::task::spawn_blocking(move || {
        let status = wait_timeout(&mut child, FLOWS_DEADLINE);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        status
    })
    .await
    .unwrap();
    let status = status.unwrap_or_else(|| panic!("the browser flows took over {FLOWS_DEADLINE:?}"));
    assert!(status.success(), "the browser flows failed ({status}); screenshots of the failure in {}", shots.display());

    // The key the browser created and revoked answers 401 over plain HTTP.
    let result: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let revoked = result["revoked_key"].as_str().expect("the flows report the revoked key");
    assert!(revoked.starts_with("rsk_") && revoked != demo_key);
    let (status, body) =
        call(&client, &base, "GET", "/api/v2/reseller/wallet/balance", revoked, None, None).await.unwrap();
    assert_eq!((status, body["code"].as_str()), (401, Some("INVALID_API_KEY")), "{body}");
    let (status, _) =
        call(&client, &base, "GET", "/api/v2/reseller/wallet/balance", &demo_key, None, None).await.unwrap();
    assert_eq!(status, 200, "the demo key still works");

    for name in ["reseller.png", "operator.png", "sandbox.png"] {
        let png = std::fs::read(shots.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{name} is a real screenshot");
    }
    started.stop();
    remove_data_dir(&dir);
}
