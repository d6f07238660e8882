//! Accounts sharded over engines in one process (issue 17, first slice): the real binary
//! with `--shards 4` over real HTTP. Accounts land on every shard; the end-to-end flows
//! (provision, fund, usage through the sandbox, defund, groups, webhooks, the events
//! API) run for an account on each shard; the clock moves every shard; conservation is
//! exact per shard and in total; a restart recovers every shard's digest, which `esim
//! replay` shows too; another shard count is refused.

mod common;
mod process;

use common::{verify_signature, Receiver, TestServer};
use esim_http::shards::{
    shard_of_account_id, shard_of_api_key, shard_of_event_id, shard_of_iccid, shard_of_uuid, shard_of_webhook_id,
};
use process::{remove_data_dir, unsafe_free_sigterm, Launch, Started};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::str::FromStr;

const SHARDS: usize = 4;

fn dec(value: &Value) -> Decimal {
    Decimal::from_str(&value.to_string()).unwrap_or_else(|_| panic!("{value} is no number"))
}

fn launch(dir: &std::path::Path) -> Launch {
    let mut launch = Launch::new(dir).arg("--shards").arg("4").arg("--allow-insecure-webhooks").arg("--demo=false");
    launch.admin_token = Some(common::ADMIN.to_string());
    launch
}

fn start(dir: &std::path::Path) -> (Started, TestServer) {
    let started = launch(dir).start(false);
    let server = TestServer::attach(started.running.base.clone());
    (started, server)
}

/// One account's things, on its shard.
struct Tenant {
    shard: usize,
    account_id: String,
    key: String,
    receiver: Receiver,
    secret: String,
    webhook_id: String,
    iccid: String,
    charged_usd: f64,
    group_id: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_shards_in_one_process_serve_every_flow_conserve_money_and_recover() {
    let dir = std::env::temp_dir().join(format!("esim-shards-{}", std::process::id()));
    remove_data_dir(&dir);
    let (mut started, server) = start(&dir);
    let mode = std::fs::metadata(dir.join("shards")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(dir.join("shards")).unwrap().trim(), "4");

    // Eight accounts: round-robin puts two on each shard; each key names its account's shard.
    let mut accounts = Vec::new();
    for _ in 0..2 * SHARDS {
        let (account_id, key) = server.account(500.0).await;
        let shard = shard_of_account_id(&account_id, SHARDS);
        assert_eq!(shard_of_api_key(&key, SHARDS), shard, "{account_id}'s key");
        accounts.push((shard, account_id, key));
    }
    let placed: Vec<usize> = accounts.iter().map(|a| a.0).collect();
    assert_eq!(placed, vec![0, 1, 2, 3, 0, 1, 2, 3], "round-robin placement");

    // An account on each shard: a webhook, an eSIM installed, funded and used, a group.
    let mut tenants = Vec::new();
    for (shard, account_id, key) in accounts.iter().take(SHARDS).cloned() {
        let receiver = Receiver::start().await;
        let hook = server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
        assert_eq!(hook.status, 201, "{}", hook.body);
        assert_eq!(shard_of_webhook_id(hook.body["id"].as_str().unwrap(), SHARDS), shard);
        let secret = hook.body["signing_secret"].as_str().unwrap().to_string();
        let webhook_id = hook.body["id"].as_str().unwrap().to_string();
        // The webhook test answers once the shard's own sender has the receiver's status.
        let tested = server.api("POST", &format!("/webhooks/{webhook_id}/test"), &key, None).await;
        assert_eq!((tested.status, tested.body["success"].clone()), (200, json!(true)), "{}", tested.body);
        let iccid = server.provision(&key, None).await;
        assert_eq!(shard_of_iccid(&iccid, SHARDS), shard, "{iccid}");
        let installed = server.admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await;
        assert_eq!(installed.status, 200, "{}", installed.body);
        let funded = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 20}))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        assert_eq!(funded.body["wallet_balance_usd"], json!(19.99));
        assert_eq!(funded.body["account_balance_remaining"], json!(478.25));
        let used = server
            .admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(json!({"mb": 500, "country": "DE"})))
            .await;
        assert_eq!(used.status, 200, "{}", used.body);
        let charged_usd = used.body["charged_usd"].as_f64().unwrap();
        assert!(charged_usd > 0.0);
        let group = server.api("POST", "/groups", &key, Some(json!({"name": format!("team {shard}")}))).await;
        assert_eq!(group.status, 201, "{}", group.body);
        let group_id = group.body["id"].as_str().unwrap().to_string();
        assert_eq!(shard_of_uuid(&group_id, SHARDS), shard);
        let funded = server.api("POST", &format!("/groups/{group_id}/fund"), &key, Some(json!({"amount": 27}))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        let member = server.provision(&key, Some(&group_id)).await;
        assert_eq!(shard_of_iccid(&member, SHARDS), shard);
        tenants.push(Tenant { shard, account_id, key, receiver, secret, webhook_id, iccid, charged_usd, group_id });
    }

    // Another shard's eSIM, group and account are unknown to a key; a garbled key is refused.
    for (i, tenant) in tenants.iter().enumerate() {
        let other = &tenants[(i + 1) % SHARDS];
        let foreign = server.api("GET", &format!("/esim/{}", other.iccid), &tenant.key, None).await;
        assert_eq!(foreign.status, 404, "{}", foreign.body);
        let foreign = server.api("GET", &format!("/groups/{}", other.group_id), &tenant.key, None).await;
        assert_eq!(foreign.status, 404, "{}", foreign.body);
        let foreign = server.api("GET", &format!("/webhooks/{}", other.webhook_id), &tenant.key, None).await;
        assert_eq!(foreign.status, 404, "{}", foreign.body);
    }
    for key in ["rsk_zz", &format!("rsk_03{}", "0".repeat(62)), &format!("rsk_ff{}", "0".repeat(62))] {
        let refused = server.api("GET", "/account", key, None).await;
        assert_eq!((refused.status, refused.body["code"].clone()), (401, json!("INVALID_API_KEY")), "{key}");
    }
    let unknown =
        server.admin("POST", "/admin/v1/accounts/acc_02ffffffffffffff/topups", Some(json!({"amount_usd": 10}))).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let unknown = server.admin("POST", "/sandbox/v1/esims/8944100000000000000/install", None).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // The reporting pause ends on every shard: one advance moves them all.
    server.advance(17 * 60).await;
    for tenant in &tenants {
        let detail = server.api("GET", &format!("/esim/{}", tenant.iccid), &tenant.key, None).await;
        assert_eq!(detail.body["total_data_charged_usd"].as_f64().unwrap(), tenant.charged_usd, "{}", detail.body);
        let defund = server.api("POST", &format!("/esim/{}/defund", tenant.iccid), &tenant.key, None).await;
        assert_eq!(defund.status, 202, "{}", defund.body);
        let group_defund = server.api("POST", &format!("/groups/{}/defund", tenant.group_id), &tenant.key, None).await;
        assert_eq!(group_defund.status, 200, "{}", group_defund.body);
    }
    let before: Vec<Decimal> = {
        let mut balances = Vec::new();
        for tenant in &tenants {
            balances.push(dec(&server.api("GET", "/wallet/balance", &tenant.key, None).await.body["balance_usd"]));
        }
        balances
    };
    server.advance(15 * 60).await;
    let state = server.admin("GET", "/admin/v1/state", None).await;
    let times: BTreeSet<String> =
        state.body["shards"].as_array().unwrap().iter().map(|s| s["now"].as_str().unwrap().to_string()).collect();
    assert_eq!(times.len(), 1, "every shard at the same time: {}", state.body);
    assert_eq!(state.body["now"], json!(times.iter().next().unwrap()));

    for (tenant, before) in tenants.iter().zip(before) {
        let after = dec(&server.api("GET", "/wallet/balance", &tenant.key, None).await.body["balance_usd"]);
        assert!(after > before, "shard {}: the returns settled ({before} -> {after})", tenant.shard);
        let defunded = tenant.receiver.wait_event("esim.defunded").await;
        assert_eq!(defunded.json()["data"]["iccid"], json!(tenant.iccid));
        tenant.receiver.wait_event("group.defunded").await;
        let deliveries = tenant.receiver.wait_for(5).await;
        for delivery in &deliveries {
            verify_signature(delivery, &tenant.secret);
            assert_eq!(shard_of_event_id(delivery.json()["id"].as_str().unwrap(), SHARDS), tenant.shard);
        }
        // The events API of the account's shard shows its events, each by id.
        let events = server.api("GET", "/events?limit=100", &tenant.key, None).await;
        assert_eq!(events.status, 200, "{}", events.body);
        let listed = events.body["events"].as_array().unwrap();
        assert!(listed.len() >= 6, "{}", events.body);
        for event in listed {
            let id = event["id"].as_str().unwrap();
            assert_eq!(shard_of_event_id(id, SHARDS), tenant.shard, "{id}");
            let shown = server.api("GET", &format!("/events/{id}"), &tenant.key, None).await;
            assert_eq!(shown.status, 200, "{}", shown.body);
        }
        let delivered = deliveries.iter().find(|d| d.event() == "esim.defunded").unwrap();
        let shown = server
            .api("GET", &format!("/events/{}", delivered.json()["id"].as_str().unwrap()), &tenant.key, None)
            .await;
        assert_eq!(shown.raw, delivered.body, "the events API answers the very bytes delivered");
        // Conservation of each account, on its shard.
        let report = server
            .admin("GET", &format!("/admin/v1/reports/conservation?account_id={}", tenant.account_id), None)
            .await;
        assert_eq!(report.status, 200, "{}", report.body);
        assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
        assert_eq!(report.body["accounts"][0]["account_id"], json!(tenant.account_id));
    }

    // Conservation per shard and in total, exact.
    let report = server.admin("GET", "/admin/v1/reports/conservation", None).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
    let rows = report.body["accounts"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["account_id"].as_str().unwrap()).collect();
    assert_eq!(names, ["shard-0", "shard-1", "shard-2", "shard-3"]);
    let mut top_ups = Decimal::ZERO;
    let mut closing = Decimal::ZERO;
    let mut fees = Decimal::ZERO;
    for row in rows {
        assert_eq!(dec(&row["difference_usd"]), Decimal::ZERO, "{row}");
        assert_eq!(dec(&row["money_in"]["top_ups_usd"]), Decimal::from(1000), "two accounts of $500 a shard: {row}");
        top_ups += dec(&row["money_in"]["top_ups_usd"]);
        closing += dec(&row["closing"]["total_usd"]);
        fees += dec(&row["spent"]["provisioning_fees_usd"]);
    }
    let total = &report.body["total"];
    assert_eq!(dec(&total["money_in"]["top_ups_usd"]), top_ups);
    assert_eq!(top_ups, Decimal::from(4000));
    assert_eq!(dec(&total["closing"]["total_usd"]), closing);
    assert_eq!(dec(&total["spent"]["provisioning_fees_usd"]), fees);
    assert_eq!(fees, Decimal::new(175, 2) * Decimal::from(2 * SHARDS as u64), "two eSIMs a shard");
    assert_eq!(dec(&total["difference_usd"]), Decimal::ZERO);
    let csv = server.call("GET", "/admin/v1/reports/conservation?format=csv", common::ADMIN, None).await;
    assert_eq!(csv.status, 200);
    assert!(String::from_utf8_lossy(&csv.raw).lines().any(|l| l.starts_with("shard-3,")), "csv has a row per shard");

    // The admin list: every account once, pages in a stable order.
    let all = server.admin("GET", "/admin/v1/accounts?limit=100", None).await;
    assert_eq!(all.body["total"], json!(2 * SHARDS), "{}", all.body);
    let listed: Vec<String> = all.body["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["account_id"].as_str().unwrap().to_string())
        .collect();
    let mut paged = Vec::new();
    for offset in (0..2 * SHARDS).step_by(3) {
        let page = server.admin("GET", &format!("/admin/v1/accounts?limit=3&offset={offset}"), None).await;
        assert_eq!(page.body["total"], json!(2 * SHARDS));
        paged.extend(
            page.body["accounts"].as_array().unwrap().iter().map(|a| a["account_id"].as_str().unwrap().to_string()),
        );
    }
    assert_eq!(paged, listed, "pages tile the list");
    let expected: BTreeSet<String> = accounts.iter().map(|a| a.1.clone()).collect();
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let shards_listed: Vec<u64> =
        all.body["accounts"].as_array().unwrap().iter().map(|a| a["shard"].as_u64().unwrap()).collect();
    assert!(shards_listed.windows(2).all(|w| w[0] <= w[1]), "shard by shard: {shards_listed:?}");

    // The inventory is one pool the shards take blocks from (decisions 185-189): 2 eSIMs
    // are provisioned, from whichever shards, and then every shard answers the spec's 503.
    let stock = server.admin("PUT", "/admin/v1/inventory", Some(json!({"available": 2}))).await;
    assert_eq!((stock.status, stock.body["available"].clone()), (200, json!(2)), "{}", stock.body);
    assert_eq!(stock.body["shards"].as_array().map(Vec::len), Some(SHARDS), "{}", stock.body);
    let mut provisioned = 0;
    for tenant in tenants.iter().chain(&tenants) {
        let answer = server.api("POST", "/esim/provision", &tenant.key, Some(json!({}))).await;
        match answer.status {
            201 => provisioned += 1,
            _ => assert_eq!((answer.status, answer.body["code"].clone()), (503, json!("NO_ESIMS_AVAILABLE"))),
        }
    }
    assert_eq!(provisioned, 2, "the pool's 2 eSIMs, no more");
    let figures = server.admin("GET", "/admin/v1/state", None).await.body["inventory"].clone();
    assert_eq!(figures, json!({"available": 0, "pool": 0, "shards": [0, 0, 0, 0]}));

    // A restart recovers every shard's digest; `esim replay` shows each and the same total.
    let live = server.settled_state().await;
    unsafe_free_sigterm(&mut started.running.child);
    let replay = std::process::Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["replay", "--data-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(replay.status.success(), "{text}");
    assert!(text.contains(&format!("state_digest {}", live["state_digest"].as_str().unwrap())), "{live}\n{text}");
    for (shard, part) in live["shards"].as_array().unwrap().iter().enumerate() {
        let line = format!("shard {shard}      {}", part["state_digest"].as_str().unwrap());
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    assert!(text.contains("accounts     8") && text.contains("conserved    yes"), "{text}");
    let report = std::process::Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["report", "conservation", "--format", "csv", "--data-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    assert_eq!(
        String::from_utf8_lossy(&report.stdout).lines().filter(|l| l.starts_with("shard-")).count(),
        SHARDS,
        "the offline report has a row per shard"
    );

    // Another shard count is refused with a clear message.
    let refused =
        Launch::new(&dir).arg("--shards").arg("2").command().stderr(std::process::Stdio::piped()).output().unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("made with 4 shard(s)") && said.contains("--shards 2"), "{said}");

    let (mut started, server) = start(&dir);
    let again = server.admin("GET", "/admin/v1/state", None).await.body;
    assert_eq!(again["state_digest"], live["state_digest"], "{again}\n{live}");
    for tenant in &tenants {
        let detail = server.api("GET", &format!("/esim/{}", tenant.iccid), &tenant.key, None).await;
        assert_eq!(detail.status, 200, "shard {} after the restart: {}", tenant.shard, detail.body);
    }
    // Placement continues round-robin after the restart (8 accounts: the next is shard 0).
    let (account_id, _) = server.account(0.0).await;
    assert_eq!(shard_of_account_id(&account_id, SHARDS), 0);

    // SIGKILL: every acknowledged change of every shard was durable before its answer.
    for tenant in &tenants {
        let funded =
            server.api("POST", &format!("/esim/{}/fund", tenant.iccid), &tenant.key, Some(json!({"amount": 9}))).await;
        assert_eq!(funded.status, 200, "funded again after its return settled: {}", funded.body);
        let topped = server
            .admin("POST", &format!("/admin/v1/accounts/{}/topups", tenant.account_id), Some(json!({"amount_usd": 10})))
            .await;
        assert_eq!(topped.status, 201, "{}", topped.body);
    }
    let acknowledged = server.settled_state().await;
    assert_ne!(acknowledged["state_digest"], again["state_digest"]);
    started.running.child.kill().unwrap();
    started.running.child.wait().unwrap();
    let (mut started, server) = start(&dir);
    let recovered = server.admin("GET", "/admin/v1/state", None).await.body;
    assert_eq!(recovered["shards"], acknowledged["shards"], "every shard recovered after SIGKILL");
    unsafe_free_sigterm(&mut started.running.child);
    remove_data_dir(&dir);
}
