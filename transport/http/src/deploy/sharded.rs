//! `esim serve` on a sharded data dir (the data dir locked, the listener bound): each
//! shard recovered from (or made in) DIR/shard-<k>/ and checked, then served by
//! [`server::serve_shards`].

use super::engine_start::{
    admin_token, continue_or_start_shard, existing_demo, print_demo, server_options, settle_demo, start_service,
};
use super::start::{run_to_end, Start};
use super::start_checks::check_recovered;
use crate::journal::{self, FileJournal, RecoverOptions, Recovery, SnapshotPolicy};
use crate::pool::{FilePool, PoolSettings};
use crate::secrets;
use crate::server::{self, JournalSink};
use crate::Service;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `shards` shards of the data dir (`new`: no shard count was recorded yet).
pub(crate) fn serve_sharded(mut start: Start, (shards, new): (u32, bool), listener: TcpListener) -> Result<(), String> {
    let options = &start.options;
    // The pool before the shard count: a start cut short between the two is new again
    // and finds its pool. A data dir sharded before the pool existed starts with an
    // empty pool, its shards keeping their own counts (decision 187).
    let initial_pool = if new { start.fresh.config.initial_inventory } else { 0 };
    let pool = FilePool::open(&options.data_dir, initial_pool)
        .map_err(|e| format!("cannot open the inventory pool in {}: {e}", options.data_dir.display()))?;
    if new {
        crate::shards::record_shards(&options.data_dir, shards)
            .map_err(|e| format!("cannot record the shard count in {}: {e}", options.data_dir.display()))?;
    }
    let recovered = recover_shards(&start, shards)?;
    let replayed = recovered.iter().fold((0, 0), |(s, r), (_, rec)| (s + rec.from_snapshot, r + rec.replayed));
    // Every check has passed: from here on the start writes.
    let (mut parts, new_state) = start_shards(&mut start, shards, recovered)?;
    crate::shards::align_virtual_clocks(parts.iter_mut().map(|(service, _)| service).collect())?;
    let options = &start.options;
    let existing = existing_demo(parts.iter().map(|(service, _)| service));
    let demo = settle_demo(existing, options.demo, new_state, &mut parts[0].0)?;
    for (shard, (service, journal)) in parts.iter_mut().enumerate() {
        journal.append(&service.drain_journal()).map_err(|e| format!("cannot write shard {shard}'s journal: {e}"))?;
    }
    let Start { options, runtime, shutdown, .. } = start;
    run_to_end(runtime, async move {
        println!("listening on http://{}", listener.local_addr().map_err(|e| e.to_string())?);
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        print_demo(demo, address, &options.data_dir);
        tracing::info!(
            data_dir = %options.data_dir.display(), shards, clock = ?options.clock, speed = options.speed.unwrap_or(1),
            from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let mut server = server_options(&options);
        server.pool = Some(PoolSettings { pool: Arc::new(pool), block_esims: options.pool_block });
        server::serve_shards(listener, parts, server, shutdown).await.map_err(|e| e.to_string())
    })
}

/// Each shard's directory made (mode 0700), its state recovered (a torn tail cut) and
/// checked against the key file and the wall clock, in shard order.
fn recover_shards(start: &Start, shards: u32) -> Result<Vec<(PathBuf, Recovery)>, String> {
    (0..shards)
        .map(|shard| {
            let dir = crate::shards::shard_dir(&start.options.data_dir, shard);
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            secrets::set_mode(&dir, 0o700).map_err(|e| format!("cannot make {} mode 0700: {e}", dir.display()))?;
            let recovery = journal::recover(&dir, &RecoverOptions { repair: true, until: None })
                .map_err(|e| format!("shard {shard}: {e}"))?;
            for note in &recovery.repaired {
                tracing::warn!(shard, "recovery: {note}");
            }
            if let Some(engine) = &recovery.engine {
                check_recovered(&start.options, &start.keys, engine, &format!("shard {shard}"))?;
            }
            Ok((dir, recovery))
        })
        .collect()
}

/// One shard served in this process: its service and the journal it appends to.
type LocalShard = (Service, Box<dyn JournalSink>);

/// Each shard's service and journal, continued from what was recovered or new; and
/// whether every shard is new.
fn start_shards(
    start: &mut Start,
    shards: u32,
    recovered: Vec<(PathBuf, Recovery)>,
) -> Result<(Vec<LocalShard>, bool), String> {
    let key = start.keys.key()?;
    let admin_token = admin_token(&start.options)?;
    let mut parts: Vec<LocalShard> = Vec::with_capacity(shards as usize);
    let mut all_new = true;
    for (shard, (dir, recovery)) in (0..shards).zip(recovered) {
        let (engine, header, new) =
            continue_or_start_shard(recovery, start.options.clock, &start.fresh, (shard, shards));
        all_new &= new;
        let journal = FileJournal::open(&dir, header, SnapshotPolicy::default())
            .map_err(|e| format!("cannot open the journal in {}: {e}", dir.display()))?;
        let service = start_service(&start.options, engine, (key.clone(), admin_token.clone()), (shard, shards))?;
        parts.push((service, Box::new(journal)));
    }
    Ok((parts, all_new))
}
