//! The global eSIM inventory pool of a sharded service (issue 17; decisions 185 to 189):
//! the real binary with `--shards 4 --pool-block 3` over real HTTP. Every eSIM of a small
//! pool is provisioned, from accounts on any shard, before `NO_ESIMS_AVAILABLE`; a shard
//! whose block is spent waits for the next one instead of refusing; a graceful restart
//! keeps pool + blocks exact, SIGKILL loses at most one block per shard and grants none
//! twice; ICCIDs are unique; a data dir sharded before the pool keeps its shards' stock.

mod common;
mod process;

use common::TestServer;
use esim_http::shards::shard_of_account_id;
use process::{remove_data_dir, unsafe_free_sigterm, Launch, Started};
use serde_json::{json, Value};
use std::collections::BTreeSet;

const SHARDS: usize = 4;
const BLOCK_ESIMS: u64 = 3;

fn start(dir: &std::path::Path) -> (Started, TestServer) {
    let mut launch = Launch::new(dir)
        .arg("--shards")
        .arg(&SHARDS.to_string())
        .arg("--pool-block")
        .arg(&BLOCK_ESIMS.to_string())
        .arg("--demo=false");
    launch.admin_token = Some(common::ADMIN.to_string());
    let started = launch.start(false);
    let server = TestServer::attach(started.running.base.clone());
    (started, server)
}

fn available(figures: &Value) -> u64 {
    let pool = figures["pool"].as_u64().expect("the pool is shown");
    let blocks: u64 =
        figures["shards"].as_array().expect("each shard's block").iter().map(|b| b.as_u64().unwrap()).sum();
    assert_eq!(figures["available"].as_u64(), Some(pool + blocks), "{figures}");
    assert!(figures["shards"].as_array().unwrap().iter().all(|b| b.as_u64().unwrap() <= BLOCK_ESIMS), "{figures}");
    pool + blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_esim_of_the_pool_is_provisioned_once_from_any_shard_and_restarts_keep_it_exact() {
    let dir = std::env::temp_dir().join(format!("esim-pool-{}", std::process::id()));
    remove_data_dir(&dir);
    let (mut started, server) = start(&dir);

    // A new data dir: the whole initial inventory in the pool, each shard a block of it.
    let mode = std::fs::metadata(dir.join("pool")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    let figures = server.settled_inventory().await;
    assert_eq!(available(&figures), 100_000, "{figures}");
    assert_eq!(figures["shards"], json!([3, 3, 3, 3]), "each shard took its first block at start");

    // An account on each shard (placed round-robin), with money for every provisioning.
    let mut keys = Vec::new();
    for shard in 0..SHARDS {
        let (account_id, key) = server.account(100.0).await;
        assert_eq!(shard_of_account_id(&account_id, SHARDS), shard);
        keys.push(key);
    }

    // The operator sets 20: the pool holds 20 and the shards' old blocks are gone.
    let set = server.admin("PUT", "/admin/v1/inventory", Some(json!({"available": 20}))).await;
    assert_eq!((set.status, set.body["available"].clone()), (200, json!(20)), "{}", set.body);
    assert_eq!(available(&server.settled_inventory().await), 20);
    let bad = server.admin("PUT", "/admin/v1/inventory", Some(json!({"available": -1}))).await;
    assert_eq!((bad.status, bad.body["code"].clone()), (400, json!("VALIDATION_ERROR")), "{}", bad.body);

    // Shard 0 provisions past its block of 3, six at once: those that find its counter
    // at 0 wait for its next block while the pool holds eSIMs, never answering
    // NO_ESIMS_AVAILABLE then.
    let mut iccids = BTreeSet::new();
    let mut at_once = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let (base, key) = (server.base.clone(), keys[0].clone());
        at_once.spawn(async move { TestServer::attach(base).provision(&key, None).await });
    }
    while let Some(iccid) = at_once.join_next().await {
        assert!(iccids.insert(iccid.expect("every provisioning answered 201")));
    }
    let mut provisioned = 6;
    assert_eq!(available(&server.settled_inventory().await) + provisioned, 20);

    // A graceful restart keeps pool + blocks exact.
    unsafe_free_sigterm(&mut started.running.child);
    let (mut started, server) = start(&dir);
    assert_eq!(available(&server.settled_inventory().await) + provisioned, 20, "nothing lost nor granted twice");

    // SIGKILL while shards take blocks: at most one block per shard is lost (taken from
    // the pool, its grant not yet journaled), none granted twice.
    for key in &keys[1..] {
        iccids.insert(server.provision(key, None).await);
        provisioned += 1;
    }
    started.running.child.kill().unwrap();
    started.running.child.wait().unwrap();
    let (mut started, server) = start(&dir);
    let left = available(&server.settled_inventory().await);
    assert!(left + provisioned <= 20, "granted twice: {left} left after {provisioned}");
    assert!(left + provisioned + SHARDS as u64 * BLOCK_ESIMS >= 20, "more than a block per shard lost: {left}");

    // Every eSIM left is provisioned, from whichever shard holds it, then every shard
    // answers NO_ESIMS_AVAILABLE.
    let mut drained = 0;
    for key in &keys {
        drained += server.provision_until_empty(key, &mut iccids, |_| {}).await;
    }
    assert_eq!(drained, left, "every eSIM of pool and blocks provisioned");
    assert_eq!(server.settled_inventory().await, json!({"available": 0, "pool": 0, "shards": [0, 0, 0, 0]}));
    assert_eq!(iccids.len() as u64, provisioned + drained, "ICCIDs unique");

    // A data dir sharded before the pool (no DIR/pool): it starts with an empty pool and
    // its shards keep their own stock (here the blocks of a new set).
    let set = server.admin("PUT", "/admin/v1/inventory", Some(json!({"available": 9}))).await;
    assert_eq!(set.status, 200, "{}", set.body);
    let before = server.settled_inventory().await;
    unsafe_free_sigterm(&mut started.running.child);
    std::fs::remove_file(dir.join("pool")).unwrap();
    let (mut started, server) = start(&dir);
    let after = server.settled_inventory().await;
    assert_eq!(after["pool"], json!(0), "{after}");
    assert_eq!(after["shards"], before["shards"], "the shards keep their stock");
    unsafe_free_sigterm(&mut started.running.child);
    remove_data_dir(&dir);
}
