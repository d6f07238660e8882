//! Fail-fast on a bug, against the real binary: with the test-only switch
//! `ESIM_TEST_PANIC_ON_FUND=1` every eSIM fund panics inside the engine; the process
//! must end non-zero within seconds (not limp on without its owner task), and a restart
//! without the switch on the same data dir has exactly the state from before the
//! panicking fund (virtual clock: time did not move), as has an offline replay.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

mod process;
use process::{call, esim_offline, remove_data_dir, wait_timeout, HttpClient, Launch, ADMIN};

async fn ok(client: &HttpClient, base: &str, method: &str, path: &str, token: &str, body: Option<Value>) -> Value {
    let (status, reply) = call(client, base, method, path, token, body, None)
        .await
        .unwrap_or_else(|| panic!("{method} {path}: no answer"));
    assert!((200..300).contains(&status), "{method} {path}: {status} {reply}");
    reply
}

async fn digest(client: &HttpClient, base: &str) -> String {
    ok(client, base, "GET", "/admin/v1/state", ADMIN, None).await["state_digest"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_engine_ends_the_process_and_the_restart_has_the_state_before_it() {
    let dir = std::env::temp_dir().join(format!("esim-fail-fast-{}", std::process::id()));
    remove_data_dir(&dir);
    let log = dir.with_extension("log");
    let _ = std::fs::remove_file(&log);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut launch =
        Launch::new(&dir).arg("--demo=false").env("ESIM_TEST_PANIC_ON_FUND", "1").env("RUST_BACKTRACE", "0");
    launch.log = Some(log.clone());
    launch.rust_log = "info".into();
    let mut server = launch.start(false);
    let base = server.running.base.clone();

    let created =
        ok(&client, &base, "POST", "/admin/v1/accounts", ADMIN, Some(json!({"contact_email": "ff@x.example"}))).await;
    let account = created["account_id"].as_str().unwrap().to_string();
    let key = created["api_key"].as_str().unwrap().to_string();
    ok(
        &client,
        &base,
        "POST",
        &format!("/admin/v1/accounts/{account}/topups"),
        ADMIN,
        Some(json!({"amount_usd": 100})),
    )
    .await;
    let provisioned = ok(&client, &base, "POST", "/api/v2/reseller/esim/provision", &key, None).await;
    let iccid = provisioned["iccid"].as_str().unwrap().to_string();
    ok(&client, &base, "POST", &format!("/sandbox/v1/esims/{iccid}/install"), ADMIN, None).await;
    let before = digest(&client, &base).await;
    let balance_before =
        ok(&client, &base, "GET", "/api/v2/reseller/wallet/balance", &key, None).await["balance_usd"].clone();

    // The fund panics inside the engine: the process ends, non-zero, within seconds.
    let started = Instant::now();
    let path = format!("/api/v2/reseller/esim/{iccid}/fund");
    let answer = call(&client, &base, "POST", &path, &key, Some(json!({"amount": 5})), Some("doomed-fund")).await;
    let exit = wait_timeout(&mut server.running.child, Duration::from_secs(10));
    let ended_in = started.elapsed();
    if exit.is_none() {
        let _ = server.running.child.kill();
        let _ = server.running.child.wait();
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect();
    println!(
        "the panicking fund got {answer:?}; the process ended after {ended_in:?} with {exit:?}; last log lines:\n{}",
        tail.join("\n")
    );
    let exit = exit.expect("the process still ran 10 s after the engine panicked");
    assert!(!exit.success(), "a panic ends the process with a failure status: {exit:?}");
    assert!(ended_in < Duration::from_secs(5), "ended within 5 s, not {ended_in:?}");
    assert!(text.contains("panicked") || text.contains("panic"), "the log names the panic:\n{text}");
    assert!(!matches!(answer, Some((200, _))), "the panicking fund was not acknowledged: {answer:?}");

    // Offline, then restarted without the switch: the state from before the fund.
    let replay = esim_offline(&["replay"], &dir);
    let replay_text = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(replay.status.success(), "{replay_text}");
    let replayed = replay_text.lines().find_map(|l| l.strip_prefix("state_digest ")).unwrap_or("").to_string();
    let mut again = Launch::new(&dir).arg("--demo=false");
    again.log = Some(log.clone());
    let server = again.start(false);
    let base = server.running.base.clone();
    let after = digest(&client, &base).await;
    let esim = ok(&client, &base, "GET", &format!("/api/v2/reseller/esim/{iccid}"), &key, None).await;
    let balance_after =
        ok(&client, &base, "GET", "/api/v2/reseller/wallet/balance", &key, None).await["balance_usd"].clone();
    println!(
        "digest before the panic {before}\n  replay after it       {replayed}\n  restarted             {after}\n\
         reseller balance {balance_before} -> {balance_after}; eSIM wallet {}",
        esim["wallet_balance_usd"]
    );
    assert_eq!(replayed, before, "the offline replay has the state from before the panic");
    assert_eq!(after, before, "the restart has the state from before the panic");
    assert_eq!(balance_after, balance_before, "the fund was not applied");
    // Without the switch the same fund (same Idempotency-Key) is applied normally.
    let (status, funded) =
        call(&client, &base, "POST", &path, &key, Some(json!({"amount": 5})), Some("doomed-fund")).await.unwrap();
    println!("the same fund without the switch: {status} {funded}");
    assert_eq!(status, 200, "{funded}");
    server.stop();
    remove_data_dir(&dir);
    let _ = std::fs::remove_file(&log);
}
