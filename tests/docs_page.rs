//! The front door (issue 37), end to end on the real `esim serve` binary: `GET /` answers
//! a browser the landing page and an API client the JSON index; the three OpenAPI
//! documents are public; `/docs/` is the API reference, and in a real headless browser
//! (Debian's Chromium, driven by Playwright for Python as in tests/dashboard.rs:
//! `tests/docs_page/render.py`) it renders every operation of each document with no
//! console error, no CSP violation and no request off the service's origin. Screenshots
//! of the landing page and the three references go to the target dir, or to
//! `docs/screenshots/` with `ESIM_UPDATE_SCREENSHOTS=1`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
mod process;
use process::{remove_data_dir, wait_timeout, HttpClient, Launch};

/// Playwright for Python, pinned like the dashboard test's (the same venv).
const PLAYWRIGHT: &str = "playwright==1.65.2";
/// Debian's Chromium (`apt-get install chromium`).
const CHROMIUM: &str = "/usr/bin/chromium";
/// The whole browser run is killed and the test fails past this.
const RENDER_DEADLINE: Duration = Duration::from_secs(240);

async fn get(client: &HttpClient, url: &str, accept: &str) -> (u16, http::HeaderMap, bytes::Bytes) {
    use http_body_util::BodyExt;
    let request = http::Request::get(url)
        .header(http::header::ACCEPT, accept)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), client.request(request)).await.unwrap().unwrap();
    let (parts, body) = response.into_parts();
    (parts.status.as_u16(), parts.headers, body.collect().await.unwrap().to_bytes())
}

/// The policy of an answer, checked for what every front door answer must hold.
fn strict_policy(path: &str, headers: &http::HeaderMap) -> String {
    let csp = headers["content-security-policy"].to_str().unwrap().to_string();
    for rule in ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"] {
        assert!(csp.contains(rule), "{path}: {rule} in {csp}");
    }
    assert!(!csp.contains("http") && !csp.contains("'unsafe-eval'"), "{path}: no remote source, no eval: {csp}");
    assert!(!csp.contains("script-src 'self' 'unsafe"), "{path}: no unsafe script source: {csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
    csp
}

async fn check_over_http(client: &HttpClient, base: &str) {
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let (status, headers, body) = get(client, &format!("{base}/"), browser).await;
    assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "text/html; charset=utf-8"));
    assert!(String::from_utf8_lossy(&body).contains("href=\"/docs/\""));
    let csp = strict_policy("/ (page)", &headers);
    assert!(!csp.contains("script-src"), "the landing page runs no script: {csp}");
    assert_eq!(headers["vary"], "Accept");
    for accept in ["*/*", "application/json"] {
        let (status, headers, body) = get(client, &format!("{base}/"), accept).await;
        assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "application/json"), "{accept}");
        let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(index["interface_version"], "2.0", "{index}");
        for (name, path) in index["links"].as_object().unwrap() {
            let path = path.as_str().unwrap();
            if name != "reseller_api" && name != "readiness" {
                let (status, _, _) = get(client, &format!("{base}{path}"), "*/*").await;
                assert_eq!(status, 200, "the index's {name} ({path}) answers without a credential");
            }
        }
    }
    for path in ["/api/v2/reseller/openapi.json", "/admin/v1/openapi.json", "/sandbox/v1/openapi.json"] {
        let (status, headers, body) = get(client, &format!("{base}{path}"), "*/*").await;
        assert_eq!((status, headers["content-type"].to_str().unwrap()), (200, "application/json"), "{path}");
        let document: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(document["openapi"], "3.1.0", "{path}");
    }
    for (path, status, content_type) in [
        ("/docs/", 200, "text/html; charset=utf-8"),
        ("/docs/docs.js", 200, "text/javascript; charset=utf-8"),
        ("/docs/redoc.standalone.js", 200, "text/javascript; charset=utf-8"),
        ("/docs/redoc-LICENSE.txt", 200, "text/plain; charset=utf-8"),
        ("/docs/nothing.js", 404, "application/json"),
    ] {
        let (got, headers, _) = get(client, &format!("{base}{path}"), "*/*").await;
        assert_eq!((got, headers["content-type"].to_str().unwrap()), (status, content_type), "{path}");
        strict_policy(path, &headers);
    }
    let (status, headers, _) = get(client, &format!("{base}/docs"), "*/*").await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (308, "/docs/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_landing_page_and_the_reference_work_in_a_real_browser() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: this test drives Debian's Chromium; install it with \
         `apt-get update && apt-get install -y --no-install-recommends chromium` (.ci/run does)"
    );
    let python = common::python_venv("dashboard-venv", &[PLAYWRIGHT], "import playwright.sync_api").join("python");
    let dir = std::env::temp_dir().join(format!("esim-docs-page-{}", std::process::id()));
    remove_data_dir(&dir);
    let started = Launch::new(&dir).arg("--demo=false").start(false);
    let base = started.running.base.clone();
    let client: HttpClient =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    check_over_http(&client, &base).await;

    let shots = common::screenshot_dir("docs-page-screenshots");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-page-render.json");
    let _ = std::fs::remove_file(&out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/docs_page/render.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .args([base.as_str()])
        .arg(&shots)
        .arg(&out)
        .env("PYTHONUNBUFFERED", "1")
        .spawn()
        .expect("python runs");
    let status = tokio::task::spawn_blocking(move || {
        let status = wait_timeout(&mut child, RENDER_DEADLINE);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        status
    })
    .await
    .unwrap();
    let status = status.unwrap_or_else(|| panic!("the browser run took over {RENDER_DEADLINE:?}"));
    assert!(status.success(), "the browser run failed ({status}); screenshots in {}", shots.display());

    let result: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(result["problems"], serde_json::json!([]), "{result}");
    for (api, at_least) in [("reseller", 39), ("admin", 12), ("sandbox", 6)] {
        let counted = &result["counted"][api];
        assert_eq!(counted["rendered"], counted["operations"], "{api}: {counted}");
        assert!(counted["operations"].as_u64() >= Some(at_least), "{api}: {counted}");
    }
    for name in ["landing.png", "docs-reseller.png", "docs-admin.png", "docs-sandbox.png"] {
        let png = std::fs::read(shots.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{name} is a real screenshot");
    }
    started.stop();
    remove_data_dir(&dir);
}
