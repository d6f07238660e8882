//! The hot standbys a start can become: the standby of a one-shard store (another
//! process holds its live lease), and a sharded store's node following shards of
//! `--standby-shards` while it serves its own.

use super::engine_start::{admin_token, continue_or_start_shard, start_service, store_options};
use super::start::Start;
use super::ServeOptions;
use crate::journal::{Recovery, SegmentHeader, SnapshotPolicy};
use crate::secrets::SealingKey;
use crate::server::{self, JournalSink};
use crate::standby;
use crate::store_pg::{self, PgStore, StoreOptions};
use std::sync::Arc;
use tokio::net::TcpListener;

/// The standby of a one-shard store: checks that the key file opens every secret of the
/// state it follows (else the start fails), says it listens, and follows until it takes
/// the shard over (`None`: stopped as a standby).
pub(crate) fn follow_store(
    start: &mut Start,
    url: &str,
    listener: TcpListener,
    holder: store_pg::ShardOwner,
) -> Result<Option<standby::Takeover>, String> {
    let listening = format!("listening on http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    let key = start.keys.required("a standby")?;
    let check = start.keys.serve_check(key);
    let store = store_options(&start.options);
    let standby = start
        .runtime
        .block_on(standby::Standby::start(url, 0, store.lease, check))
        .map_err(|e| format!("this process cannot be the store's standby: {e}"))?;
    let admin_token = admin_token(&start.options)?;
    println!("{listening}");
    let policy = SnapshotPolicy::default();
    let followed = start.runtime.block_on(standby::follow(
        listener,
        standby,
        policy,
        store,
        (holder, admin_token),
        &mut start.shutdown,
    ));
    let taken = followed.map_err(|e| e.to_string())?;
    if taken.is_none() {
        tracing::info!("stopped as a standby");
    }
    Ok(taken)
}

/// One shard a node of a sharded store follows as its hot standby (`--standby-shards`).
pub(crate) struct StandbyShard {
    pub options: Arc<ServeOptions>,
    pub shard: u32,
    pub shards: u32,
    /// What other nodes forward the shard's requests to once this node owns it.
    pub address: String,
    pub store: StoreOptions,
    pub fresh: SegmentHeader,
    /// The sealing key (checked against the shard before it is taken) and admin token.
    pub secrets: (Arc<SealingKey>, String),
}

impl StandbyShard {
    /// Follows the shard until its owner's lease runs out, takes it over (only while the
    /// follower's check passes), and hands its engine and store to the serving node
    /// (`adopt`). A standby that fails says why and ends: the node goes on serving its
    /// other shards and forwarding this one.
    pub async fn run(self, follower: standby::Standby, adopt: tokio::sync::mpsc::Sender<server::AdoptedShard>) {
        let shard = self.shard;
        tracing::info!(shard, "following shard {shard} as its hot standby");
        let mut never = std::pin::pin!(std::future::pending::<()>());
        let followed =
            standby::follow_shard(follower, &self.address, SnapshotPolicy::default(), self.store, &mut never).await;
        let (store, recovery) = match followed {
            Ok(Some(taken)) => taken,
            Ok(None) => return,
            Err(why) => {
                tracing::error!(shard, %why, "the hot standby of shard {shard} failed: it is no longer followed");
                return;
            }
        };
        // Setting the header writes the store (blocking): off the runtime's threads.
        let made = tokio::task::spawn_blocking(move || self.serve_taken(store, recovery)).await;
        match made {
            Ok(Ok(adopted)) => {
                if adopt.send(adopted).await.is_err() {
                    tracing::warn!(shard, "the node stopped before serving the shard it took over");
                }
            }
            Ok(Err(why)) => tracing::error!(shard, %why, "took shard {shard} over but cannot serve it"),
            Err(error) => tracing::error!(shard, %error, "took shard {shard} over but cannot serve it"),
        }
    }

    /// The service of a shard taken over, as a start of its node would make it.
    fn serve_taken(self, mut store: PgStore, recovery: Recovery) -> Result<server::AdoptedShard, String> {
        let StandbyShard { options, shard, shards, fresh, secrets, .. } = self;
        let (engine, header, _) = continue_or_start_shard(recovery, options.clock, &fresh, (shard, shards));
        store.set_header(header).map_err(|e| e.to_string())?;
        let mut service = start_service(&options, engine, secrets, (shard, shards))?;
        let mut journal: Box<dyn JournalSink> = Box::new(store);
        journal.append(&service.drain_journal()).map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
        Ok(server::AdoptedShard { shard: shard as usize, service, journal })
    }
}
