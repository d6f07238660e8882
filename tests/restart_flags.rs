//! Start-up flags across restarts of one data dir: `--allow-insecure-webhooks` is the
//! setting of each start (journaled, so an offline replay agrees), and `--demo` makes
//! one demo account, not one per start.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use std::process::Command;

mod process;
use process::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_start_applies_its_own_webhook_setting_and_the_demo_account_is_made_once() {
    let dir = std::env::temp_dir().join(format!("esim-restart-flags-{}", std::process::id()));
    remove_data_dir(&dir);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let local_hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] });
    let mut key = String::new();
    let mut accounts = Vec::new();
    for (start_number, insecure) in [false, true, false].into_iter().enumerate() {
        let flags: &[&str] = if insecure { &["--allow-insecure-webhooks", "--demo"] } else { &["--demo"] };
        let mut server = start(&dir, flags);
        if start_number == 0 {
            let created = call(
                &client,
                &server.base,
                "POST",
                "/admin/v1/accounts",
                ADMIN,
                Some(json!({"contact_email": "a@b.example"})),
                None,
            )
            .await
            .unwrap();
            key = created.1["api_key"].as_str().unwrap().to_string();
            call(
                &client,
                &server.base,
                "POST",
                &format!("/admin/v1/accounts/{}/topups", created.1["account_id"].as_str().unwrap()),
                ADMIN,
                Some(json!({"amount_usd": 20})),
                None,
            )
            .await
            .unwrap();
        }
        let (status, body) =
            call(&client, &server.base, "POST", "/api/v2/reseller/webhooks", &key, Some(local_hook.clone()), None)
                .await
                .unwrap();
        let expected = if insecure { 201 } else { 400 };
        assert_eq!(status, expected, "start {start_number} (insecure {insecure}): {body}");
        let (_, state) = call(&client, &server.base, "GET", "/admin/v1/state", ADMIN, None, None).await.unwrap();
        let live = state["state_digest"].as_str().unwrap().to_string();
        let (_, report) =
            call(&client, &server.base, "GET", "/admin/v1/reports/conservation", ADMIN, None, None).await.unwrap();
        accounts.push(report["accounts"].as_array().map_or(0, Vec::len));
        unsafe_free_sigterm(&mut server.child);
        let replay =
            Command::new(env!("CARGO_BIN_EXE_esim")).args(["replay", "--data-dir"]).arg(&dir).output().unwrap();
        let text = String::from_utf8_lossy(&replay.stdout);
        assert!(text.contains(&format!("state_digest {live}")), "start {start_number}: live {live}, replay:\n{text}");
    }
    assert_eq!(accounts, [2, 2, 2], "the demo account and ours, once each");
    remove_data_dir(&dir);
}
