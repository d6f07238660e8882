//! `esim serve --store` of a sharded store (decisions 177-181): this node takes the
//! shards it owns (each as the unsharded store's owner takes shard 0: its own epoch,
//! lease, journal and snapshots), writes its address to their owner rows, and forwards
//! requests for the other shards to their owners. The shards it follows as their
//! standby are loaded and checked against the key file first: a node that could not
//! serve one does not start (decision 235).

use super::engine_start::{
    admin_token, continue_or_start_shard, existing_demo, print_demo, server_options, settle_demo, shard_header,
    start_service, store_options, Demo,
};
use super::key_file::KeyFile;
use super::standby_shard::StandbyShard;
use super::start::{run_to_end, Start};
use super::start_checks::{check_before_taking, check_recovered};
use crate::journal::{Recovery, SegmentHeader, SnapshotPolicy};
use crate::pool::{InventoryPool, PoolSettings};
use crate::server::{self, ShardPart};
use crate::standby;
use crate::store_pg::{self, Opened, PgStore, StoreOptions};
use crate::Service;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How many times a node waits for another process's live lease on a shard it is to
/// own before it gives up (each wait: the lease left, at most the longest lease).
const SHARD_LEASE_WAITS: u32 = 3;

/// The shards a node of a `shards`-shard store takes: `--own-shards` (each below the
/// count, sorted, no repeats), else every shard.
pub fn shards_to_own(asked: Option<&[u32]>, shards: u32) -> Result<Vec<u32>, String> {
    assert!(shards >= 1, "a store has at least one shard");
    let Some(asked) = asked else { return Ok((0..shards).collect()) };
    let mut own: Vec<u32> = asked.to_vec();
    own.sort_unstable();
    own.dedup();
    if let Some(bad) = own.iter().find(|&&k| k >= shards) {
        return Err(format!(
            "--own-shards names shard {bad}, but the store has {shards} shard(s) (0 to {})",
            shards - 1
        ));
    }
    if own.is_empty() {
        return Err("--own-shards names no shard: a node serves at least one".into());
    }
    Ok(own)
}

/// The shards a node of a sharded store owns and those it follows as their standby
/// (`--own-shards`, `--standby-shards`): no shard in both.
pub fn node_shards(
    own_shards: Option<&[u32]>,
    standby_shards: Option<&[u32]>,
    shards: u32,
) -> Result<(Vec<u32>, Vec<u32>), String> {
    let standby = match standby_shards {
        Some(asked) => shards_to_own(Some(asked), shards)?,
        None => Vec::new(),
    };
    // A standby node without --own-shards owns none at start (decision 199).
    let own = match (own_shards, standby.is_empty()) {
        (None, false) => Vec::new(),
        (asked, _) => shards_to_own(asked, shards)?,
    };
    if let Some(both) = own.iter().find(|k| standby.contains(k)) {
        return Err(format!(
            "shard {both} is in both --own-shards and --standby-shards: a node owns a shard or follows it"
        ));
    }
    Ok((own, standby))
}

/// The address other nodes forward to: `--advertise-url`, else the bound address.
pub fn advertise_url(asked: Option<&str>, bound: std::net::SocketAddr) -> Result<String, String> {
    let Some(url) = asked else { return Ok(format!("http://{bound}")) };
    let authority = url.strip_prefix("http://").map(|rest| rest.trim_end_matches('/')).unwrap_or_default();
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']');
    if authority.is_empty() || !authority.bytes().all(plain) {
        return Err(format!(
            "--advertise-url {url:?} must be http://host:port (nodes forward to each other over plain HTTP on a \
             private network in this slice)"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// This node's part of a sharded store: who it is, and the shards it owns and follows.
struct Node {
    url: String,
    shards: u32,
    own: Vec<u32>,
    standby: Vec<u32>,
    /// What other nodes forward this node's shards' requests to.
    address: String,
    store: StoreOptions,
}

/// Serves this node's shards of a `shards`-shard store on `listener`, forwarding the others.
pub(crate) fn serve_store_shards(mut start: Start, shards: u32, listener: TcpListener) -> Result<(), String> {
    let options = &start.options;
    let url = options.store.clone().expect("called with a store");
    let (own, standby) = node_shards(options.own_shards.as_deref(), options.standby_shards.as_deref(), shards)?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let address = advertise_url(options.advertise_url.as_deref(), bound)?;
    let node = Node { url, shards, own, standby, address, store: store_options(options) };
    let followers = follow_checked(&start.runtime, &node, &start.keys)?;
    let (taken, replayed) = take_owned(&start, &node)?;
    // Every check has passed: from here on the start writes.
    let key = start.keys.key()?;
    let admin_token = admin_token(&start.options)?;
    let secrets = (key, admin_token);
    let (mut parts, demo) = start_owned(&start, &node, taken, &secrets)?;
    for (shard, part) in parts.iter_mut().enumerate() {
        if let ShardPart::Local(service, journal) = part {
            journal
                .append(&service.drain_journal())
                .map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
        }
    }
    let locator = store_pg::Locator::new(&node.url).map_err(|e| e.to_string())?;
    let forwarder = Arc::new(crate::nodes::Forwarder::new(locator, shards as usize));
    // The global eSIM pool is the store's row, shared by every node (decisions 190-191):
    // this node's shards start at 0 (new) and take their first block at start.
    let pool: Arc<dyn InventoryPool> =
        Arc::new(store_pg::PgPool::open(&node.url).map_err(|e| format!("the inventory pool: {e}"))?);
    let Start { options, fresh, runtime, shutdown, .. } = start;
    let options = Arc::new(options);
    run_to_end(runtime, async move {
        println!("listening on http://{bound}");
        print_demo(demo, bound, &options.data_dir);
        tracing::info!(
            shards, own = ?node.own, standby = ?node.standby, advertise = %node.address, clock = ?options.clock,
            speed = options.speed.unwrap_or(1), from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let (adopt, adopted) = tokio::sync::mpsc::channel(shards as usize);
        for (shard, follower) in followers {
            let follow = StandbyShard {
                options: options.clone(),
                shard,
                shards,
                address: node.address.clone(),
                store: node.store,
                fresh: fresh.clone(),
                secrets: secrets.clone(),
            };
            tokio::spawn(follow.run(follower, adopt.clone()));
        }
        let mut server = server_options(&options);
        server.pool = Some(PoolSettings { pool, block_esims: options.pool_block });
        let node = server::NodeOptions { forwarder, adopted, admin_token: secrets.1, mode: options.clock };
        server::serve_nodes(listener, parts, Some(node), server, shutdown).await.map_err(|e| e.to_string())
    })
}

/// A shard this node took: its number, its store and what was recovered from it.
type TakenShard = (u32, PgStore, Recovery);

/// Each shard the node owns, checked (with `--take-over`, before its lease is taken) and
/// taken; and the entries read from snapshots and replayed, summed.
fn take_owned(start: &Start, node: &Node) -> Result<(Vec<TakenShard>, (u64, u64)), String> {
    let mut taken = Vec::with_capacity(node.own.len());
    let mut replayed = (0, 0);
    for &shard in &node.own {
        check_before_taking(&start.options, &start.keys, &node.url, Some(shard))?;
        let header = shard_header(&start.fresh, shard, node.shards);
        let (store, recovery) = take_store_shard(&node.url, shard, &node.address, &header, node.store)
            .map_err(|e| format!("shard {shard}: {e}"))?;
        if let Some(engine) = &recovery.engine {
            check_recovered(&start.options, &start.keys, engine, &format!("shard {shard}"))?;
        }
        replayed = (replayed.0 + recovery.from_snapshot, replayed.1 + recovery.replayed);
        taken.push((shard, store, recovery));
    }
    Ok((taken, replayed))
}

/// Every shard's part of the node: the service of each shard it took, the others
/// remote; and the demo account when this node owns shard 0 (decision 169).
fn start_owned(
    start: &Start,
    node: &Node,
    taken: Vec<TakenShard>,
    secrets: &(Arc<crate::secrets::SealingKey>, String),
) -> Result<(Vec<ShardPart>, Option<Demo>), String> {
    let (options, shards) = (&start.options, node.shards);
    let mut parts: Vec<ShardPart> = (0..shards).map(|_| ShardPart::Remote).collect();
    let mut new_store = true;
    for (shard, mut store, recovery) in taken {
        let (engine, header, new) = continue_or_start_shard(recovery, options.clock, &start.fresh, (shard, shards));
        new_store &= new;
        store.set_header(header).map_err(|e| format!("shard {shard}: {e}"))?;
        let service = start_service(options, engine, secrets.clone(), (shard, shards))?;
        parts[shard as usize] = ShardPart::Local(service, Box::new(store));
    }
    // Only this node's shards are aligned: another node's are aligned by it, and the next
    // clock advance brings every shard to one time (decision 171).
    crate::shards::align_virtual_clocks(local(&mut parts))?;
    let demo = match local(&mut parts).into_iter().next() {
        Some(service) if node.own.first() == Some(&0) => {
            let existing = existing_demo([&*service]);
            settle_demo(existing, options.demo, new_store, service)?
        }
        _ => None,
    };
    Ok((parts, demo))
}

/// The services of the shards this node serves itself.
fn local(parts: &mut [ShardPart]) -> Vec<&mut Service> {
    parts
        .iter_mut()
        .filter_map(|part| match part {
            ShardPart::Local(service, _) => Some(service),
            ShardPart::Remote => None,
        })
        .collect()
}

/// Takes shard `shard` of the store for this node, writing `address` to its owner row.
/// A live lease of another process (a node that just stopped, or one that still serves
/// it) is waited out a few times; `--take-over` takes it at once.
fn take_store_shard(
    url: &str,
    shard: u32,
    address: &str,
    fresh: &SegmentHeader,
    options: StoreOptions,
) -> Result<(PgStore, Recovery), String> {
    let mut waits = 0;
    loop {
        let opened = PgStore::open_shard(url, shard as i32, Some(address), fresh, SnapshotPolicy::default(), options)
            .map_err(|e| e.to_string())?;
        match opened {
            Opened::Owner(store, recovery) => return Ok((*store, *recovery)),
            Opened::Leased(holder) if waits < SHARD_LEASE_WAITS => {
                waits += 1;
                let wait_ms = (holder.lease_left_s.max(0.0) * 1000.0) as u64 + 100;
                tracing::warn!(shard, holder = %holder.owner, wait_ms, "the shard's lease is held by another process: waiting it out");
                std::thread::sleep(Duration::from_millis(wait_ms.min(*store_pg::LEASE_MS_RANGE.end())));
            }
            Opened::Leased(holder) => {
                return Err(format!(
                    "shard {shard} of the store is held by {} (epoch {}, lease for {:.1} s more), which keeps \
                     renewing it: another node serves it. Give this node other shards (--own-shards), or start it \
                     with --take-over to take the shard anyway",
                    holder.owner, holder.epoch, holder.lease_left_s
                ))
            }
        }
    }
}

/// Each shard the node follows loaded from the store and checked: the key file exists
/// and opens every signing secret in it, else the node refuses to start (decision 235).
fn follow_checked(
    runtime: &tokio::runtime::Runtime,
    node: &Node,
    keys: &KeyFile,
) -> Result<Vec<(u32, standby::Standby)>, String> {
    if node.standby.is_empty() {
        return Ok(Vec::new());
    }
    let key = keys.required("a standby of --standby-shards")?;
    node.standby
        .iter()
        .map(|&shard| {
            let check = keys.serve_check(key.clone());
            let follower = runtime
                .block_on(standby::Standby::start(&node.url, shard, node.store.lease, check))
                .map_err(|e| format!("this node cannot be the standby of shard {shard}: {e}"))?;
            Ok((shard, follower))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_owns_every_shard_unless_told_which() {
        assert_eq!(shards_to_own(None, 4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(shards_to_own(Some(&[3, 1, 3]), 4).unwrap(), vec![1, 3], "sorted, no repeats");
        let error = shards_to_own(Some(&[1, 4]), 4).unwrap_err();
        assert_eq!(error, "--own-shards names shard 4, but the store has 4 shard(s) (0 to 3)");
        assert!(shards_to_own(Some(&[]), 4).unwrap_err().contains("names no shard"));
    }

    #[test]
    fn a_node_owns_a_shard_or_follows_it_never_both() {
        assert_eq!(node_shards(None, None, 2).unwrap(), (vec![0, 1], vec![]));
        // A standby node without --own-shards owns none at start (decision 199).
        assert_eq!(node_shards(None, Some(&[1]), 2).unwrap(), (vec![], vec![1]));
        assert_eq!(node_shards(Some(&[0]), Some(&[1]), 2).unwrap(), (vec![0], vec![1]));
        let error = node_shards(Some(&[0, 1]), Some(&[1]), 2).unwrap_err();
        assert!(error.starts_with("shard 1 is in both --own-shards and --standby-shards"), "{error}");
        assert!(node_shards(None, Some(&[2]), 2).unwrap_err().contains("names shard 2"));
    }

    #[test]
    fn the_advertised_url_is_plain_http_to_a_host_and_port() {
        let bound: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(advertise_url(None, bound).unwrap(), "http://127.0.0.1:8080");
        assert_eq!(advertise_url(Some("http://10.0.0.7:9000/"), bound).unwrap(), "http://10.0.0.7:9000");
        assert_eq!(advertise_url(Some("http://[fd00::7]:9000"), bound).unwrap(), "http://[fd00::7]:9000");
        assert_eq!(advertise_url(Some("http://node-2.internal:80"), bound).unwrap(), "http://node-2.internal:80");
        for bad in ["https://10.0.0.7:9000", "http://", "10.0.0.7:9000", "http://a/b", "http://user@host:1"] {
            let error = advertise_url(Some(bad), bound).unwrap_err();
            assert!(error.contains("must be http://host:port"), "{bad}: {error}");
        }
    }
}
