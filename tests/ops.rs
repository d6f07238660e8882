//! The operator's view, over real HTTP on loopback: `/healthz`, `/readyz` (ready, and
//! not ready while the journal refuses writes), `/metrics` parsed by a Prometheus
//! text-format parser after real traffic (the values follow the traffic), and the JSON
//! log of the real `esim` binary (every request's lines carry the request id its answer
//! carried, and its account id; no API key anywhere).

mod common;
mod process;

use bytes::Bytes;
use common::TestServer;
use esim_engine::{Engine, EngineConfig, Millis};
use esim_http::server::{self, JournalSink, ServerOptions};
use esim_http::{ClockMode, JournalEntry, Service};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A request with the given extra headers; `token` as the bearer credential.
async fn send(
    server: &TestServer,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> common::Reply {
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    server.raw(method, path, token, &all, body).await
}

fn request_id_of(reply: &common::Reply) -> String {
    reply.headers.get("x-request-id").expect("every answer carries X-Request-Id").to_str().unwrap().to_string()
}

/// The value of the sample `name{labels}`: a counter's or gauge's value, a histogram's
/// observation count (its `+Inf` bucket). `None` when the series is absent.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found = scrape.samples.iter().find(|s| {
        s.metric == name && s.labels.len() == labels.len() && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
    })?;
    Some(match &found.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => *v,
        prometheus_parse::Value::Histogram(buckets) => {
            buckets.iter().find(|b| b.less_than.is_infinite()).expect("a +Inf bucket").count
        }
        prometheus_parse::Value::Summary(_) => panic!("{name} is a summary, not a histogram"),
    })
}

fn parse_metrics(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the text format parses")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_the_traffic_and_the_json_log_carries_request_and_account_ids() {
    let dir = std::env::temp_dir().join(format!("esim-ops-{}", std::process::id()));
    process::remove_data_dir(&dir);
    let log = std::env::temp_dir().join(format!("esim-ops-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut launch = process::Launch::new(&dir).arg("--log-format").arg("json").arg("--allow-insecure-webhooks");
    launch.log = Some(log.clone());
    launch.rust_log = "info".into();
    let started = launch.start(true);
    let key = started.demo_key.clone().unwrap();
    let server = TestServer::attach(started.running.base.clone());
    let admin = Some(process::ADMIN);

    // Health: no key needed.
    let health = send(&server, "GET", "/healthz", None, &[], None).await;
    assert_eq!((health.status, health.body.clone()), (200, json!({"status": "ok"})));
    let generated_health = request_id_of(&health);
    assert!(generated_health.starts_with("req_"), "{generated_health}");
    let ready = send(&server, "GET", "/readyz", None, &[], None).await;
    assert_eq!((ready.status, ready.body.clone()), (200, json!({"status": "ready"})));

    // Traffic: an eSIM, FUNDS funds with client request ids, one request with none, one
    // with an id that is not kept (too long), one webhook test to a closed port.
    let account = send(&server, "GET", "/api/v2/reseller/account", Some(&key), &[], None).await;
    assert_eq!(account.status, 200, "{}", account.body);
    let account_id = account.body["id"].as_str().or(account.body["account_id"].as_str()).unwrap().to_string();
    assert!(account_id.starts_with("acc_"), "{}", account.body);
    let generated_account = request_id_of(&account);
    assert!(generated_account.starts_with("req_") && generated_account != generated_health);

    let provisioned = send(
        &server,
        "POST",
        "/api/v2/reseller/esim/provision",
        Some(&key),
        &[],
        Some(json!({"end_user_reference": "ops-1"})),
    )
    .await;
    assert_eq!(provisioned.status, 201, "{}", provisioned.body);
    let iccid = provisioned.body["iccid"].as_str().unwrap().to_string();
    const FUNDS: usize = 3;
    let mut fund_ids = Vec::new();
    for n in 0..FUNDS {
        let id = format!("ops-fund.{n}");
        let funded = send(
            &server,
            "POST",
            &format!("/api/v2/reseller/esim/{iccid}/fund"),
            Some(&key),
            &[("x-request-id", &id)],
            Some(json!({"amount": 1})),
        )
        .await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        assert_eq!(request_id_of(&funded), id, "a plain client id is echoed");
        fund_ids.push(id);
    }
    let too_long = "x".repeat(65);
    let odd =
        send(&server, "GET", "/api/v2/reseller/wallet/balance", Some(&key), &[("x-request-id", &too_long)], None).await;
    assert_eq!(odd.status, 200, "{}", odd.body);
    assert!(request_id_of(&odd).starts_with("req_"), "a 65-character id is replaced");

    let webhook = send(
        &server,
        "POST",
        "/api/v2/reseller/webhooks",
        Some(&key),
        &[],
        Some(json!({"url": "http://127.0.0.1:9/closed", "events": ["*"]})),
    )
    .await;
    assert_eq!(webhook.status, 201, "{}", webhook.body);
    let webhook_id = webhook.body["id"].as_str().unwrap().to_string();
    let tested = send(
        &server,
        "POST",
        &format!("/api/v2/reseller/webhooks/{webhook_id}/test"),
        Some(&key),
        &[("x-request-id", "ops-webhook-test")],
        None,
    )
    .await;
    assert!(tested.status < 500, "{} {}", tested.status, tested.body);

    // The rate limit: GET /account until refused, then two more (each refused).
    let mut limited = 0;
    for _ in 0..200 {
        let reply = send(&server, "GET", "/api/v2/reseller/account", Some(&key), &[], None).await;
        if reply.status == 429 {
            limited += 1;
            if limited == 3 {
                break;
            }
        }
    }
    assert_eq!(limited, 3, "the limit of 100 a minute was reached");

    // /metrics: the admin token only.
    let refused = send(&server, "GET", "/metrics", Some(&key), &[], None).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    let scraped = send(&server, "GET", "/metrics", admin, &[], None).await;
    assert_eq!(scraped.status, 200);
    assert!(scraped.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    let text = String::from_utf8(scraped.raw.to_vec()).unwrap();
    assert!(!text.contains("rsk_") && !text.contains(&iccid), "no key or id becomes a label:\n{text}");
    let scrape = parse_metrics(&text);
    let requests = |endpoint: &str, status: &str| {
        sample(&scrape, "esim_http_requests_total", &[("endpoint", endpoint), ("status", status)]).unwrap_or(0.0)
    };
    assert_eq!(requests("FundEsim", "200"), FUNDS as f64, "{text}");
    assert_eq!(requests("ProvisionEsim", "201"), 1.0);
    assert_eq!(requests("healthz", "200"), 1.0);
    assert_eq!(requests("readyz", "200"), 1.0);
    assert_eq!(requests("metrics", "401"), 1.0);
    assert_eq!(requests("Account", "429"), 3.0);
    assert_eq!(sample(&scrape, "esim_http_rate_limited_total", &[("endpoint", "Account")]), Some(3.0));
    assert_eq!(
        sample(&scrape, "esim_http_request_duration_seconds", &[("endpoint", "FundEsim")]),
        Some(FUNDS as f64),
        "one latency observation per fund"
    );
    // Every change was journaled: provision, funds, webhook (and the demo account at start).
    let batches = sample(&scrape, "esim_journal_batch_entries", &[]).expect("journal batch sizes");
    assert!(batches >= 1.0, "{text}");
    assert_eq!(sample(&scrape, "esim_journal_commit_seconds", &[]), Some(batches), "one commit time per batch");
    let engine_commands = sample(&scrape, "esim_engine_command_seconds", &[]).expect("engine command time");
    assert!(engine_commands >= (FUNDS + 3) as f64, "{engine_commands}");
    let age = sample(&scrape, "esim_snapshot_age_seconds", &[]).expect("snapshot age");
    assert!((0.0..600.0).contains(&age), "{age}");
    assert!(sample(&scrape, "esim_open_connections", &[]).expect("open connections") >= 1.0);
    assert!(sample(&scrape, "esim_webhook_retry_queue_depth", &[]).is_some(), "{text}");
    let failed_attempts = sample(&scrape, "esim_webhook_deliveries_total", &[("outcome", "failed")]).unwrap_or(0.0);
    assert!(failed_attempts >= 1.0, "the test delivery to a closed port failed:\n{text}");
    assert_eq!(sample(&scrape, "esim_ready", &[]), Some(1.0));

    // Its pooled connections closed first, so the graceful stop has none to wait for.
    drop(server);
    let printed = started.stop();
    assert!(!printed.contains("rsk_"), "stdout after the key line: {printed}");

    // The log: every line JSON; the ids of the answers in the lines; no key.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.contains("rsk_") && !logged.contains(&key), "a key in the log:\n{logged}");
    let lines: Vec<Value> = logged
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let of_request = |id: &str| -> Vec<&Value> { lines.iter().filter(|l| l["span"]["request_id"] == id).collect() };
    for id in fund_ids.iter().map(String::as_str).chain([generated_account.as_str()]) {
        let mine = of_request(id);
        assert!(!mine.is_empty(), "no line of request {id}:\n{logged}");
        for line in mine {
            assert_eq!(line["span"]["account_id"], account_id.as_str(), "{line}");
        }
    }
    // The failed webhook attempt is logged, naming its webhook.
    let attempt = lines
        .iter()
        .find(|l| l["fields"]["message"] == "webhook delivery attempt failed")
        .unwrap_or_else(|| panic!("no failed attempt logged:\n{logged}"));
    assert_eq!(attempt["fields"]["webhook_id"], webhook_id.as_str(), "{attempt}");
    assert_eq!(lines.last().unwrap()["fields"]["message"], "service stopped", "the last line");
    process::remove_data_dir(&dir);
    let _ = std::fs::remove_file(&log);
}

/// A journal whose appends can be made to fail (a full disk); its durable state is an
/// engine that applied exactly the appended entries.
struct FlakyDisk {
    durable: Arc<Mutex<Engine>>,
    failing: Arc<AtomicBool>,
}

impl JournalSink for FlakyDisk {
    fn append(&mut self, entries: &[JournalEntry]) -> std::io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("no space left on device"));
        }
        let mut durable = self.durable.lock().unwrap();
        for entry in entries {
            entry.clone().replay(&mut durable);
        }
        Ok(())
    }
    fn reload(&mut self) -> Result<Engine, String> {
        Ok(self.durable.lock().unwrap().clone())
    }
    fn probe(&mut self) -> std::io::Result<()> {
        match self.failing.load(Ordering::SeqCst) {
            true => Err(std::io::Error::other("no space left on device")),
            false => Ok(()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_with_the_reason_while_the_journal_refuses_writes() {
    let engine = Engine::new(EngineConfig { seed: 3, ..EngineConfig::default() }, Millis::VIRTUAL_EPOCH);
    let failing = Arc::new(AtomicBool::new(false));
    let sink = FlakyDisk { durable: Arc::new(Mutex::new(engine.clone())), failing: failing.clone() };
    let secrets = esim_http::secrets::Secrets::seeded(3);
    let service = Service::new(engine, common::ADMIN.into(), ClockMode::Virtual, secrets);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = TestServer::attach(format!("http://{}", listener.local_addr().unwrap()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, service, Box::new(sink), ServerOptions::new(1, true), async {
        let _ = stopped.await;
    }));

    let (account_id, key) = server.account(20.0).await;
    assert_eq!(send(&server, "GET", "/readyz", None, &[], None).await.status, 200);

    failing.store(true, Ordering::SeqCst);
    let topup =
        server.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), Some(json!({"amount_usd": 5}))).await;
    assert_eq!(topup.status, 503, "{}", topup.body);
    let not_ready = send(&server, "GET", "/readyz", None, &[], None).await;
    assert_eq!(not_ready.status, 503, "{}", not_ready.body);
    assert_eq!(not_ready.body["code"], "SERVICE_UNAVAILABLE", "the spec's error body: {}", not_ready.body);
    let reason = not_ready.body["message"].as_str().unwrap();
    assert!(reason.contains("journal cannot be written") && reason.contains("no space left"), "{reason}");
    // Alive all the same, and reads still served.
    assert_eq!(send(&server, "GET", "/healthz", None, &[], None).await.status, 200);
    assert_eq!(server.api("GET", "/account", &key, None).await.status, 200);

    // Room again: the probe (every second) accepts changes, and /readyz follows.
    failing.store(false, Ordering::SeqCst);
    let mut status = 0;
    for _ in 0..50 {
        status = send(&server, "GET", "/readyz", None, &[], None).await.status;
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "ready again once the journal takes writes");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[test]
fn serve_help_names_the_log_controls_and_the_operator_endpoints() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_esim")).args(["serve", "--help"]).output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).unwrap();
    for needle in ["--log-format", "ESIM_LOG_FORMAT", "RUST_LOG", "X-Request-Id", "/healthz", "/readyz", "/metrics"] {
        assert!(text.contains(needle), "`esim serve --help` does not mention {needle}:\n{text}");
    }
}
