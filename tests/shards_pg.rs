//! Shards in the PostgreSQL store (issue 17): 4 shards over 2 real `esim serve`
//! processes on a throwaway cluster, node A owning shards 0 and 1, node B 2 and 3. The
//! end-to-end flows of `tests/shards.rs` run for an account on every shard through
//! EITHER node (a request for the other node's shard is forwarded to its owner); the
//! clock, admin lists, state and finance report fan out over both nodes and answer the
//! same through either; conservation is exact per shard and in total; each shard's
//! digest equals `esim replay --store`; a forward to a killed node answers 503 with
//! `Retry-After`. A first test serves the same store layout from one process.

mod common;
mod pg;
mod process;

use common::{verify_signature, Receiver, TestServer};
use esim_http::nodes::{LinkKey, FORWARDED_SHARD, NODE_PROOF, NOT_OWNER};
use esim_http::shards::{
    shard_of_account_id, shard_of_api_key, shard_of_event_id, shard_of_iccid, shard_of_uuid, shard_of_webhook_id,
};
use pg::{assert_replay_matches, dec, esim_cli, launch, work_dir, Cluster};
use process::{remove_data_dir, Started};
use rust_decimal::Decimal;
use serde_json::json;
use std::collections::BTreeSet;

const SHARDS: usize = 4;

fn node(dir: &std::path::Path, url: &str, own: Option<&str>) -> (Started, TestServer) {
    let mut launch = launch(dir, url).arg("--shards").arg("4");
    if let Some(own) = own {
        launch = launch.arg("--own-shards").arg(own);
    }
    let started = launch.start(false);
    let server = TestServer::attach(started.running.base.clone());
    (started, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_serves_four_shards_of_a_store_and_refuses_another_count() {
    let cluster = Cluster::start("shards-one");
    let url = cluster.url();
    let dir = work_dir("shards-one");
    let (started, server) = node(&dir, &url, None);
    assert_eq!(cluster.psql("SELECT shards FROM store_meta"), "4");
    let mut placed = Vec::new();
    for _ in 0..SHARDS {
        let (account_id, key) = server.account(100.0).await;
        let shard = shard_of_account_id(&account_id, SHARDS);
        assert_eq!(shard_of_api_key(&key, SHARDS), shard);
        let iccid = server.provision(&key, None).await;
        assert_eq!(shard_of_iccid(&iccid, SHARDS), shard);
        placed.push(shard);
    }
    assert_eq!(placed, [0, 1, 2, 3], "round-robin placement");
    // Each shard has its own owner row (this process's address in it) and journal.
    assert_eq!(cluster.psql("SELECT count(*) FROM shard_owner"), "4");
    let address = cluster.psql("SELECT DISTINCT address FROM shard_owner");
    assert_eq!(address, server.base, "every row names this process");
    for shard in 0..SHARDS {
        let rows = cluster.psql(&format!("SELECT count(*) FROM journal WHERE shard = {shard}"));
        assert!(rows.parse::<u64>().unwrap() > 0, "shard {shard} has entries");
    }
    let live = server.settled_state().await;
    started.stop();
    assert_replay_matches(&url, &live);
    let report = esim_cli(&["report", "conservation", "--store", &url, "--format", "csv"]);
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let csv = String::from_utf8_lossy(&report.stdout).to_string();
    assert_eq!(csv.lines().filter(|l| l.starts_with("shard-")).count(), SHARDS, "{csv}");

    // Another count is refused naming both; the same count (or none) serves the same state.
    let refused =
        launch(&dir, &url).arg("--shards").arg("2").command().stderr(std::process::Stdio::piped()).output().unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("made with 4 shard(s)") && said.contains("--shards 2"), "{said}");
    // A node must own shards of the store, and forward to a plain http:// address.
    for (flag, value, said_here) in [
        ("--own-shards", "4", "names shard 4, but the store has 4 shard(s)"),
        ("--advertise-url", "https://node-a:8443", "must be http://host:port"),
    ] {
        let refused =
            launch(&dir, &url).arg(flag).arg(value).command().stderr(std::process::Stdio::piped()).output().unwrap();
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains(said_here), "{flag} {value}: {said}");
    }
    let again = launch(&dir, &url).start(false);
    let server = TestServer::attach(again.running.base.clone());
    assert_eq!(server.admin("GET", "/admin/v1/state", None).await.body["state_digest"], live["state_digest"]);
    again.stop();
    remove_data_dir(&dir);
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
async fn four_shards_over_two_nodes_serve_every_flow_through_either_node() {
    let cluster = Cluster::start("shards-two");
    let url = cluster.url();
    let (dir_a, dir_b) = (work_dir("shards-a"), work_dir("shards-b"));
    let (started_a, a) = node(&dir_a, &url, Some("0,1"));
    let (mut started_b, b) = node(&dir_b, &url, Some("2,3"));
    let nodes = [&a, &b];
    assert_eq!(cluster.psql("SELECT shard, address FROM shard_owner ORDER BY shard").lines().count(), 4);
    for (shard, owner) in [(0, &a), (1, &a), (2, &b), (3, &b)] {
        assert_eq!(cluster.psql(&format!("SELECT address FROM shard_owner WHERE shard = {shard}")), owner.base);
    }

    // Accounts made through A and B in turn: each node places round-robin, so every
    // shard gets two, and each key names its account's shard.
    let mut accounts = Vec::new();
    for i in 0..2 * SHARDS {
        let (account_id, key) = nodes[i % 2].account(500.0).await;
        let shard = shard_of_account_id(&account_id, SHARDS);
        assert_eq!(shard_of_api_key(&key, SHARDS), shard, "{account_id}'s key");
        accounts.push((shard, account_id, key));
    }
    let mut per_shard = [0; SHARDS];
    for (shard, _, _) in &accounts {
        per_shard[*shard] += 1;
    }
    assert_eq!(per_shard, [2; SHARDS], "{accounts:?}", accounts = accounts.iter().map(|a| a.0).collect::<Vec<_>>());

    // An account on each shard: every call goes to the node it is NOT owned by for odd
    // steps and to its owner for even ones (`via(step)`), so both paths serve each flow.
    let mut tenants = Vec::new();
    let mut seen = BTreeSet::new();
    for (shard, account_id, key) in accounts.iter().cloned() {
        if !seen.insert(shard) {
            continue;
        }
        let owner = shard / 2;
        let via = |step: usize| nodes[(owner + step) % 2];
        let receiver = Receiver::start().await;
        let hook = via(1).api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
        assert_eq!(hook.status, 201, "{}", hook.body);
        let webhook_id = hook.body["id"].as_str().unwrap().to_string();
        assert_eq!(shard_of_webhook_id(&webhook_id, SHARDS), shard);
        let secret = hook.body["signing_secret"].as_str().unwrap().to_string();
        let tested = via(0).api("POST", &format!("/webhooks/{webhook_id}/test"), &key, None).await;
        assert_eq!((tested.status, tested.body["success"].clone()), (200, json!(true)), "{}", tested.body);
        let iccid = via(1).provision(&key, None).await;
        assert_eq!(shard_of_iccid(&iccid, SHARDS), shard, "{iccid}");
        let installed = via(1).admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await;
        assert_eq!(installed.status, 200, "{}", installed.body);
        let funded = via(1).api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 20}))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        assert_eq!(funded.body["wallet_balance_usd"], json!(19.99));
        assert_eq!(funded.body["account_balance_remaining"], json!(478.25));
        // The Idempotency-Key travels with a forward: the same key through the other
        // node answers the same bytes and moves nothing more.
        let path = format!("/api/v2/reseller/esim/{iccid}/fund");
        let idempotency = format!("fund-once-{shard}");
        let headers = [("content-type", "application/json"), ("idempotency-key", idempotency.as_str())];
        let body = bytes::Bytes::from(json!({"amount": 1}).to_string());
        let once = via(1).raw("POST", &path, Some(&key), &headers, body.clone()).await;
        assert_eq!(once.status, 200, "{}", once.body);
        assert_eq!(once.body["account_balance_remaining"], json!(477.25), "{}", once.body);
        let again = via(0).raw("POST", &path, Some(&key), &headers, body).await;
        assert_eq!((again.status, &again.raw), (200, &once.raw));
        let used = via(0)
            .admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(json!({"mb": 500, "country": "DE"})))
            .await;
        assert_eq!(used.status, 200, "{}", used.body);
        let charged_usd = used.body["charged_usd"].as_f64().unwrap();
        assert!(charged_usd > 0.0);
        let group = via(1).api("POST", "/groups", &key, Some(json!({"name": format!("team {shard}")}))).await;
        assert_eq!(group.status, 201, "{}", group.body);
        let group_id = group.body["id"].as_str().unwrap().to_string();
        assert_eq!(shard_of_uuid(&group_id, SHARDS), shard);
        let funded = via(0).api("POST", &format!("/groups/{group_id}/fund"), &key, Some(json!({"amount": 27}))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        let member = via(1).provision(&key, Some(&group_id)).await;
        assert_eq!(shard_of_iccid(&member, SHARDS), shard);
        // The same answer through either node.
        let through_a = a.api("GET", &format!("/esim/{iccid}"), &key, None).await;
        let through_b = b.api("GET", &format!("/esim/{iccid}"), &key, None).await;
        assert_eq!((through_a.status, &through_a.body), (200, &through_b.body));
        tenants.push(Tenant { shard, account_id, key, receiver, secret, webhook_id, iccid, charged_usd, group_id });
    }
    assert_eq!(tenants.iter().map(|t| t.shard).collect::<BTreeSet<_>>().len(), SHARDS);

    // Another shard's things are unknown to a key, whichever node is asked; a garbled
    // key is refused by both.
    for (i, tenant) in tenants.iter().enumerate() {
        let other = &tenants[(i + 1) % SHARDS];
        for server in nodes {
            let foreign = server.api("GET", &format!("/esim/{}", other.iccid), &tenant.key, None).await;
            assert_eq!(foreign.status, 404, "{}", foreign.body);
            let foreign = server.api("GET", &format!("/groups/{}", other.group_id), &tenant.key, None).await;
            assert_eq!(foreign.status, 404, "{}", foreign.body);
            let foreign = server.api("GET", &format!("/webhooks/{}", other.webhook_id), &tenant.key, None).await;
            assert_eq!(foreign.status, 404, "{}", foreign.body);
        }
    }
    for key in [format!("rsk_03{}", "0".repeat(62)), format!("rsk_ff{}", "0".repeat(62))] {
        for server in nodes {
            let refused = server.api("GET", "/account", &key, None).await;
            assert_eq!((refused.status, refused.body["code"].clone()), (401, json!("INVALID_API_KEY")), "{key}");
        }
    }

    // The reporting pause ends on every shard: one advance through B moves all four.
    b.advance(17 * 60).await;
    for (i, tenant) in tenants.iter().enumerate() {
        let server = nodes[i % 2];
        let detail = server.api("GET", &format!("/esim/{}", tenant.iccid), &tenant.key, None).await;
        assert_eq!(detail.body["total_data_charged_usd"].as_f64().unwrap(), tenant.charged_usd, "{}", detail.body);
        let defund = server.api("POST", &format!("/esim/{}/defund", tenant.iccid), &tenant.key, None).await;
        assert_eq!(defund.status, 202, "{}", defund.body);
        let server = nodes[(i + 1) % 2];
        let group_defund = server.api("POST", &format!("/groups/{}/defund", tenant.group_id), &tenant.key, None).await;
        assert_eq!(group_defund.status, 200, "{}", group_defund.body);
    }
    let mut before = Vec::new();
    for tenant in &tenants {
        before.push(dec(&a.api("GET", "/wallet/balance", &tenant.key, None).await.body["balance_usd"]));
    }
    a.advance(15 * 60).await;
    let state = b.admin("GET", "/admin/v1/state", None).await;
    let times: BTreeSet<String> =
        state.body["shards"].as_array().unwrap().iter().map(|s| s["now"].as_str().unwrap().to_string()).collect();
    assert_eq!(times.len(), 1, "every shard at the same time: {}", state.body);

    for (tenant, before) in tenants.iter().zip(before) {
        let after = dec(&b.api("GET", "/wallet/balance", &tenant.key, None).await.body["balance_usd"]);
        assert!(after > before, "shard {}: the returns settled ({before} -> {after})", tenant.shard);
        let defunded = tenant.receiver.wait_event("esim.defunded").await;
        assert_eq!(defunded.json()["data"]["iccid"], json!(tenant.iccid));
        tenant.receiver.wait_event("group.defunded").await;
        let deliveries = tenant.receiver.wait_for(5).await;
        for delivery in &deliveries {
            verify_signature(delivery, &tenant.secret);
            assert_eq!(shard_of_event_id(delivery.json()["id"].as_str().unwrap(), SHARDS), tenant.shard);
        }
        // The events API, through both nodes.
        let events = a.api("GET", "/events?limit=100", &tenant.key, None).await;
        assert_eq!(events.status, 200, "{}", events.body);
        assert_eq!(events.body, b.api("GET", "/events?limit=100", &tenant.key, None).await.body);
        let listed = events.body["events"].as_array().unwrap();
        assert!(listed.len() >= 6, "{}", events.body);
        let delivered = deliveries.iter().find(|d| d.event() == "esim.defunded").unwrap();
        for server in nodes {
            let shown = server
                .api("GET", &format!("/events/{}", delivered.json()["id"].as_str().unwrap()), &tenant.key, None)
                .await;
            assert_eq!(shown.raw, delivered.body, "the events API answers the very bytes delivered");
        }
        // Conservation of each account, on its shard, through either node.
        let path = format!("/admin/v1/reports/conservation?account_id={}", tenant.account_id);
        let report = a.admin("GET", &path, None).await;
        assert_eq!(report.status, 200, "{}", report.body);
        assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
        assert_eq!(report.body, b.admin("GET", &path, None).await.body);
    }

    // Conservation per shard and in total, exact, and the same through both nodes.
    let report = a.admin("GET", "/admin/v1/reports/conservation", None).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body, b.admin("GET", "/admin/v1/reports/conservation", None).await.body);
    assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
    let rows = report.body["accounts"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["account_id"].as_str().unwrap()).collect();
    assert_eq!(names, ["shard-0", "shard-1", "shard-2", "shard-3"]);
    let (mut top_ups, mut closing, mut fees) = (Decimal::ZERO, Decimal::ZERO, Decimal::ZERO);
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
    let csv_a = a.call("GET", "/admin/v1/reports/conservation?format=csv", common::ADMIN, None).await;
    let csv_b = b.call("GET", "/admin/v1/reports/conservation?format=csv", common::ADMIN, None).await;
    assert_eq!((csv_a.status, &csv_a.raw), (200, &csv_b.raw));
    assert!(String::from_utf8_lossy(&csv_a.raw).lines().any(|l| l.starts_with("shard-3,")), "a row per shard");

    // The admin list: every account once, the same pages through either node.
    let all = a.admin("GET", "/admin/v1/accounts?limit=100", None).await;
    assert_eq!(all.body["total"], json!(2 * SHARDS), "{}", all.body);
    assert_eq!(all.body, b.admin("GET", "/admin/v1/accounts?limit=100", None).await.body);
    let listed: Vec<String> = all.body["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["account_id"].as_str().unwrap().to_string())
        .collect();
    let mut paged = Vec::new();
    for offset in (0..2 * SHARDS).step_by(3) {
        let page = nodes[offset % 2].admin("GET", &format!("/admin/v1/accounts?limit=3&offset={offset}"), None).await;
        paged.extend(
            page.body["accounts"].as_array().unwrap().iter().map(|a| a["account_id"].as_str().unwrap().to_string()),
        );
    }
    assert_eq!(paged, listed, "pages tile the list");
    let expected: BTreeSet<String> = accounts.iter().map(|a| a.1.clone()).collect();
    assert_eq!(listed.iter().cloned().collect::<BTreeSet<_>>(), expected);

    // The state is the same through both nodes, and each shard's digest is what
    // `esim replay --store` rebuilds from the store.
    let live = a.settled_state().await;
    assert_eq!(live, b.admin("GET", "/admin/v1/state", None).await.body);
    assert_replay_matches(&url, &live);

    // A forwarded request (signed as a node signs it, decision 218) for a shard the
    // receiving node does not own is refused, never forwarded again.
    let tenant_b = tenants.iter().find(|t| t.shard == 2).unwrap();
    let proof = LinkKey::new(common::ADMIN).proof(2, &http::Method::GET, "/api/v2/reseller/account");
    let refused = a
        .raw(
            "GET",
            "/api/v2/reseller/account",
            Some(&tenant_b.key),
            &[(FORWARDED_SHARD, "2"), (NODE_PROOF, &proof)],
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!((refused.status, refused.body["code"].clone()), (503, json!("SERVICE_UNAVAILABLE")));
    assert_eq!(refused.headers[NOT_OWNER], "2");

    // Node B killed: A answers its own shards and 503 with Retry-After for B's.
    started_b.running.child.kill().unwrap();
    started_b.running.child.wait().unwrap();
    let gone = a.api("GET", "/account", &tenant_b.key, None).await;
    assert_eq!((gone.status, gone.body["code"].clone()), (503, json!("SERVICE_UNAVAILABLE")), "{}", gone.body);
    assert_eq!(gone.headers[http::header::RETRY_AFTER], "1");
    let gone = a.admin("GET", "/admin/v1/state", None).await;
    assert_eq!(gone.status, 503, "a fan-out needs every shard: {}", gone.body);
    let tenant_a = tenants.iter().find(|t| t.shard == 0).unwrap();
    assert_eq!(a.api("GET", "/account", &tenant_a.key, None).await.status, 200);

    // B again: it takes its shards back (waiting out its old lease) and serves them.
    let (started_b, b) = node(&dir_b, &url, Some("2,3"));
    assert_eq!(a.api("GET", "/account", &tenant_b.key, None).await.status, 200, "A reads B's new address");
    let after = b.settled_state().await;
    assert_eq!(after["state_digest"], live["state_digest"], "nothing acknowledged was lost");
    started_a.stop();
    started_b.stop();
    remove_data_dir(&dir_a);
    remove_data_dir(&dir_b);
}

/// The pool's row in PostgreSQL (decisions 190-191): takes from two connections (as two
/// nodes' would be) at once never grant more than the row held, each grant is what the
/// row lost, a set starts a new generation both connections see, and a sharded store
/// without the row gets an empty one.
#[test]
fn concurrent_takes_from_two_connections_never_grant_more_than_the_pool_held() {
    use esim_http::pool::InventoryPool;
    use esim_http::store_pg::{prepare_shards, PgPool};
    let cluster = Cluster::start("pool-takes");
    let url = cluster.url();
    assert_eq!(prepare_shards(&url, Some(4), 100).unwrap(), 4);
    assert_eq!(cluster.psql("SELECT available, generation FROM inventory_pool"), "100|0");
    // Prepared again (another node starting): the row is kept, not made anew.
    assert_eq!(prepare_shards(&url, None, 999).unwrap(), 4);
    let pools = [std::sync::Arc::new(PgPool::open(&url).unwrap()), std::sync::Arc::new(PgPool::open(&url).unwrap())];
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let pool = pools[i % 2].clone();
            std::thread::spawn(move || {
                let mut taken = 0;
                loop {
                    let grant = pool.take(7).unwrap();
                    assert!(grant.count <= 7, "{grant:?}");
                    if grant.count == 0 {
                        return taken;
                    }
                    taken += grant.count;
                }
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 100, "every eSIM of the pool granted once, none twice");
    assert_eq!(cluster.psql("SELECT available FROM inventory_pool"), "0");
    assert_eq!(pools[0].set(5).unwrap(), 1);
    assert_eq!((pools[1].available(), pools[1].generation()), (0, 0), "what the other connection last read");
    pools[1].refresh().unwrap();
    assert_eq!((pools[1].available(), pools[1].generation()), (5, 1));
    let grant = pools[1].take(3).unwrap();
    assert_eq!((grant.count, grant.generation), (3, 1));
    assert_eq!(pools[0].take(3).unwrap().count, 2, "the last block is what is left");
    // A store sharded before the pool's migration has no row: it gets an empty pool
    // (its shards keep what they hold, decision 190), never the initial inventory again.
    cluster.psql("DELETE FROM inventory_pool");
    assert_eq!(prepare_shards(&url, Some(4), 100).unwrap(), 4);
    assert_eq!(cluster.psql("SELECT available, generation FROM inventory_pool"), "0|0");
}

/// The global pool over 2 nodes (decisions 190-193): blocks of 3, an inventory of 20 set
/// through one node; the state's inventory is the same through both; a node restart
/// (graceful, and after SIGKILL) keeps pool + blocks exact; every eSIM is provisioned once, from accounts on every
/// shard through either node, before NO_ESIMS_AVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_pool_serves_every_shard_of_both_nodes_exactly() {
    let cluster = Cluster::start("pool-two");
    let url = cluster.url();
    let (dir_a, dir_b) = (work_dir("pool-a"), work_dir("pool-b"));
    let start = |dir: &std::path::Path, own: &str| {
        let started = launch(dir, &url)
            .arg("--shards")
            .arg("4")
            .arg("--own-shards")
            .arg(own)
            .arg("--pool-block")
            .arg("3")
            .start(false);
        let server = TestServer::attach(started.running.base.clone());
        (started, server)
    };
    let (started_a, a) = start(&dir_a, "0,1");
    let (started_b, b) = start(&dir_b, "2,3");
    // A new store: the whole initial inventory in the pool, each shard a block of it.
    let figures = a.settled_inventory().await;
    assert_eq!(figures["available"], json!(100_000), "{figures}");
    assert_eq!(figures["shards"], json!([3, 3, 3, 3]), "each shard took its first block at start");
    assert_eq!(b.settled_inventory().await, figures, "the same through either node");

    // Accounts through A and B in turn (each node places round-robin): one kept per shard.
    let mut keys = Vec::new();
    for i in 0..2 * SHARDS {
        let (account_id, key) = [&a, &b][i % 2].account(100.0).await;
        let shard = shard_of_account_id(&account_id, SHARDS);
        if keys.iter().all(|(placed, _)| *placed != shard) {
            keys.push((shard, key));
        }
    }
    keys.sort();
    assert_eq!(keys.iter().map(|(shard, _)| *shard).collect::<Vec<_>>(), [0, 1, 2, 3]);
    // Set through node B: the pool row holds 20 and every shard's old block is gone.
    let set = b.admin("PUT", "/admin/v1/inventory", Some(json!({"available": 20}))).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.body["available"], json!(20));
    let figures = a.settled_inventory().await;
    assert_eq!(figures["available"], json!(20), "{figures}");
    assert_eq!(b.settled_inventory().await, figures);

    // Two provisionings per shard, through the node that does not own it.
    let mut iccids = BTreeSet::new();
    for (shard, key) in &keys {
        for _ in 0..2 {
            let iccid = [&a, &b][(shard / 2 + 1) % 2].provision(key, None).await;
            assert_eq!(shard_of_iccid(&iccid, SHARDS), *shard);
            assert!(iccids.insert(iccid));
        }
    }
    let figures = a.settled_inventory().await;
    assert_eq!(figures["available"], json!(12), "{figures}");
    assert_eq!(b.settled_inventory().await, figures);
    let pool_before = cluster.psql("SELECT available FROM inventory_pool");

    // Node B restarts: its shards keep their blocks, the pool keeps its row, nothing
    // is granted twice.
    started_b.stop();
    let (started_b, b) = start(&dir_b, "2,3");
    let figures_after = b.settled_inventory().await;
    assert_eq!(figures_after["available"], json!(12), "{figures_after}");
    assert_eq!(a.settled_inventory().await, figures_after);
    assert_eq!(cluster.psql("SELECT available FROM inventory_pool"), pool_before, "a restart takes no block");

    // Node A killed (no block on its way: each shard holds 1 of 3) and started again
    // (waiting out its old lease): its shards' blocks are journaled, nothing is taken again.
    let mut started_a = started_a;
    started_a.running.child.kill().unwrap();
    started_a.running.child.wait().unwrap();
    let (started_a, a) = start(&dir_a, "0,1");
    let figures_killed = a.settled_inventory().await;
    assert_eq!(figures_killed, figures_after, "SIGKILL keeps pool and blocks exact");
    assert_eq!(b.settled_inventory().await, figures_killed);
    assert_eq!(cluster.psql("SELECT available FROM inventory_pool"), pool_before);

    // Every eSIM left, from whichever shard, through either node.
    let mut provisioned = 0;
    for round in 0..2 {
        for (shard, key) in &keys {
            provisioned += [&a, &b][(shard + round) % 2]
                .provision_until_empty(key, &mut iccids, |iccid| assert_eq!(shard_of_iccid(iccid, SHARDS), *shard))
                .await;
        }
    }
    assert_eq!(provisioned, 12, "every eSIM of the pool once");
    assert_eq!(iccids.len(), 20);
    let figures = a.settled_inventory().await;
    assert_eq!((figures["available"].clone(), figures["pool"].clone()), (json!(0), json!(0)), "{figures}");
    assert_eq!(b.settled_inventory().await, figures);
    let live = a.settled_state().await;
    started_a.stop();
    started_b.stop();
    assert_replay_matches(&url, &live);
    remove_data_dir(&dir_a);
    remove_data_dir(&dir_b);
}
