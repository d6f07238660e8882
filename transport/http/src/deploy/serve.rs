//! `esim serve`: the start in its order, and one engine served (a data dir of one
//! shard, or a one-shard store as its owner or its standby). Every check comes before
//! the first write of the start (decision 237): the settings, the key file's modes, the
//! listener, the lock, the recovered state against the key file and the wall clock;
//! then the key file (made when missing), the admin token file and the journal.

use super::engine_start::{
    admin_token, continue_or_start, existing_demo, new_header, print_demo, server_options, settle_demo, start_service,
    store_options,
};
use super::key_file::KeyFile;
use super::start::{run_to_end, Start};
use super::start_checks::{check_before_taking, check_recovered, check_settings};
use super::{sharded, standby_shard, store_shards, ServeOptions};
use crate::journal::{self, FileJournal, RecoverOptions, Recovery, SegmentHeader, SnapshotPolicy};
use crate::secrets;
use crate::server::{self, JournalSink};
use crate::store_pg::{self, Opened, PgStore};
use std::path::Path;
use tokio::net::TcpListener;

/// `esim serve`: serves until SIGINT or SIGTERM (`Ok`), or says why it cannot.
pub fn serve(options: ServeOptions) -> Result<(), String> {
    check_settings(&options)?;
    let keys = KeyFile::open(options.secret_key_file.as_deref(), &options.data_dir)?;
    let fresh = new_header(&options);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let shutdown = {
        let _entered = runtime.enter();
        super::shutdown_signal()?
    };
    let start = Start { options, keys, fresh, runtime, shutdown };
    // The listener first: a busy port (another `esim serve` still running) ends the
    // start before the data dir, its lock or a demo account exist (decision 268).
    let listener = start.bind()?;
    make_data_dir(&start.options.data_dir)?;
    match start.options.store.clone() {
        Some(url) => serve_store(start, &url, listener),
        None => serve_data_dir(start, listener),
    }
}

/// The data dir, made when missing; only the service's user may read it, whatever the umask.
fn make_data_dir(data_dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(data_dir).map_err(|e| format!("cannot create data dir {}: {e}", data_dir.display()))?;
    secrets::set_mode(data_dir, 0o700)
        .map_err(|e| format!("cannot make the data dir {} mode 0700: {e}", data_dir.display()))
}

/// A data dir: locked for this process's whole life (released however it ends), then
/// served as one engine or as shards.
fn serve_data_dir(start: Start, listener: TcpListener) -> Result<(), String> {
    let data_dir = start.options.data_dir.clone();
    let _lock = crate::lock::DataDirLock::acquire(&data_dir).map_err(|e| e.to_string())?;
    let (shards, new) = crate::shards::shards_to_serve(&data_dir, start.options.shards)?;
    if shards > 1 {
        return sharded::serve_sharded(start, (shards, new), listener);
    }
    // A large state takes seconds to read back: say so before, and how long after.
    tracing::info!(data_dir = %data_dir.display(), "recovering: the newest snapshot and the journal after it");
    let began = std::time::Instant::now();
    let recovery =
        journal::recover(&data_dir, &RecoverOptions { repair: true, until: None }).map_err(|e| e.to_string())?;
    tracing::info!(
        from_snapshot = recovery.from_snapshot,
        replayed = recovery.replayed,
        ms = began.elapsed().as_millis() as u64,
        "recovered"
    );
    serve_one(start, listener, recovery, None)
}

/// A store (no lock: the shard's epoch fences a second server, decision 140). The
/// listener is bound before: a standby answers on it (503) and keeps it when it takes
/// over (decision 148); a busy port ends the start before the store is touched.
fn serve_store(mut start: Start, url: &str, listener: TcpListener) -> Result<(), String> {
    let options = &start.options;
    let shards = store_pg::prepare_shards(url, options.shards, start.fresh.config.initial_inventory)
        .map_err(|e| e.to_string())?;
    let only_shard_0 = options.own_shards.as_ref().is_none_or(|own| own.iter().all(|&k| k == 0));
    if shards == 1 && options.standby_shards.is_some() {
        return Err("--standby-shards follows shards of a sharded store; a store of one shard gets its \
                    hot standby from a second `esim serve --store` with the same URL (no flag)"
            .into());
    }
    if shards > 1 || !only_shard_0 || options.standby_shards.is_some() {
        return store_shards::serve_store_shards(start, shards, listener);
    }
    check_before_taking(options, &start.keys, url, None)?;
    // The line comes once the shard is taken (as without a store), or at once for a
    // standby, which answers from then on.
    let policy = SnapshotPolicy::default();
    match PgStore::open_with(url, &start.fresh, policy, store_options(options)).map_err(|e| e.to_string())? {
        Opened::Owner(store, recovery) => serve_one(start, listener, *recovery, Some((*store, false))),
        Opened::Leased(holder) => match standby_shard::follow_store(&mut start, url, listener, holder)? {
            None => Ok(()),
            Some(taken) => serve_one(start, taken.listener, taken.recovery, Some((taken.store, true))),
        },
    }
}

/// One engine served: the state recovered from the data dir, or from a store's shard
/// (`store`: the store and whether a standby took it over, having said it listens).
fn serve_one(
    mut start: Start,
    listener: TcpListener,
    recovery: Recovery,
    store: Option<(PgStore, bool)>,
) -> Result<(), String> {
    let said = store.as_ref().is_some_and(|(_, taken_over)| *taken_over);
    let listening = format!("listening on http://{}", listener.local_addr().map_err(|e| e.to_string())?);
    for note in &recovery.repaired {
        tracing::warn!("recovery: {note}");
    }
    if let Some(engine) = &recovery.engine {
        let what = if store.is_some() { "the store" } else { "this data dir" };
        if said {
            // A shard taken over continues its owner's time, whatever this host's clock.
            start.keys.check(engine, what)?;
        } else {
            check_recovered(&start.options, &start.keys, engine, what)?;
        }
    }
    // Every check has passed: from here on the start writes.
    let options = &start.options;
    let key = start.keys.key()?;
    let admin_token = admin_token(options)?;
    let fresh = start.fresh.clone();
    let recovered = (recovery.engine, recovery.header);
    let (engine, header, new) =
        continue_or_start(recovered, recovery.next_index, options.clock, "this data dir", || fresh);
    let mut journal = open_sink(options, store.map(|(store, _)| store), header)?;
    let mut service = start_service(options, engine, (key, admin_token), (0, 1))?;
    let demo = settle_demo(existing_demo([&service]), options.demo, new, &mut service)?;
    journal.append(&service.drain_journal()).map_err(|e| format!("cannot write the journal: {e}"))?;
    let replayed = (recovery.from_snapshot, recovery.replayed);
    let Start { options, runtime, shutdown, .. } = start;
    run_to_end(runtime, async move {
        if !said {
            println!("{listening}");
        }
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        print_demo(demo, address, &options.data_dir);
        tracing::info!(
            data_dir = %options.data_dir.display(), store = options.store.is_some(), clock = ?options.clock,
            speed = options.speed.unwrap_or(1), from_snapshot = replayed.0, replayed = replayed.1, "service started"
        );
        let server = server_options(&options);
        server::serve(listener, service, journal, server, shutdown).await.map_err(|e| e.to_string())
    })
}

/// Where the one engine's changes go: the store's shard it took, else the data dir's
/// file journal.
fn open_sink(
    options: &ServeOptions,
    store: Option<PgStore>,
    header: SegmentHeader,
) -> Result<Box<dyn JournalSink>, String> {
    Ok(match store {
        Some(mut store) => {
            store.set_header(header).map_err(|e| e.to_string())?;
            Box::new(store)
        }
        None => Box::new(
            FileJournal::open(&options.data_dir, header, SnapshotPolicy::default())
                .map_err(|e| format!("cannot open the journal in {}: {e}", options.data_dir.display()))?,
        ),
    })
}
