//! `esim replay` and `esim report conservation`: a data dir or a store read without
//! taking it over (no lock, no lease, no migration, no repair), and what it holds shown.

use crate::journal::{self, RecoverOptions, Recovery};
use crate::store_pg;
use esim_engine::{Engine, Millis};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What `esim replay` is told.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The data dir read (ignored with a store).
    pub data_dir: PathBuf,
    /// A PostgreSQL store read instead of the data dir.
    pub store: Option<String>,
    /// Stop before the first entry later than this time (RFC 3339).
    pub until: Option<String>,
}

/// What `esim report conservation` is told.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// The data dir read (ignored with a store).
    pub data_dir: PathBuf,
    /// A PostgreSQL store read instead of the data dir.
    pub store: Option<String>,
    /// Only this account.
    pub account: Option<String>,
    /// `md`, `html`, `json` or `csv`.
    pub format: String,
    /// The first day counted (a date or an RFC 3339 time).
    pub from: Option<String>,
    /// The first day not counted.
    pub until: Option<String>,
}

/// What `esim replay` and `esim report` read: a data dir, or a store (read-only).
pub enum Source {
    DataDir(PathBuf),
    Store { url: String, owner: std::cell::RefCell<Option<store_pg::ShardOwner>> },
}

impl Source {
    /// The store when one is named, else the data dir.
    pub fn new(data_dir: PathBuf, store: Option<String>) -> Source {
        match store {
            Some(url) => Source::Store { url, owner: Default::default() },
            None => Source::DataDir(data_dir),
        }
    }

    /// The shard count of a sharded data dir or store, if this is one.
    fn sharded(&self) -> Result<Option<u32>, String> {
        let shards = match self {
            Source::DataDir(dir) => crate::shards::recorded_shards(dir)?,
            Source::Store { url, .. } => Some(store_pg::read_shard_count(url).map_err(|e| e.to_string())?),
        };
        Ok(shards.filter(|&shards| shards > 1))
    }

    /// Shard `shard` of a sharded data dir or store, read-only.
    fn recover_shard(&self, shard: u32, until: Option<Millis>) -> Result<Recovery, String> {
        match self {
            Source::DataDir(dir) => {
                journal::recover(&crate::shards::shard_dir(dir, shard), &RecoverOptions { repair: false, until })
                    .map_err(|e| e.to_string())
            }
            Source::Store { url, .. } => {
                let (recovery, _) = store_pg::read_only_shard(url, shard as i32, until).map_err(|e| e.to_string())?;
                Ok(recovery)
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Source::DataDir(dir) => dir.display().to_string(),
            Source::Store { .. } => "the store".into(),
        }
    }

    fn recover(&self, until: Option<Millis>) -> Result<Recovery, String> {
        match self {
            Source::DataDir(dir) => {
                journal::recover(dir, &RecoverOptions { repair: false, until }).map_err(|e| e.to_string())
            }
            Source::Store { url, owner } => {
                let (recovery, found) = store_pg::read_only(url, until).map_err(|e| e.to_string())?;
                *owner.borrow_mut() = found;
                Ok(recovery)
            }
        }
    }

    /// Says on stderr that a live server may be appending while this reads.
    fn note_live(&self) {
        match self {
            Source::DataDir(dir) => note_live(dir),
            Source::Store { owner, .. } => {
                if let Some(owner) = owner.borrow().as_ref().filter(|o| o.lease_left_s > 0.0) {
                    eprintln!(
                        "esim: note: shard 0 of the store is held by {} (epoch {}, lease for {:.1} s more); shown as of \
                         its head when read",
                        owner.owner, owner.epoch, owner.lease_left_s
                    );
                }
            }
        }
    }
}

/// `esim replay` and `esim report` read a data dir without taking it over: on a live one
/// (a server holds its lock) they say so; what they show is as of the last complete
/// record.
fn note_live(data_dir: &Path) {
    if let Some(pid) = crate::lock::DataDirLock::holder(data_dir) {
        eprintln!(
            "esim: note: {} is in use by a running service (pid {pid}); shown as of its last complete journal record",
            data_dir.display()
        );
    }
}

/// `esim replay`: the state's digest and a summary on stdout (per shard, and over all,
/// for a sharded data dir or store).
pub fn replay(options: ReplayOptions) -> Result<(), String> {
    let until = match &options.until {
        Some(text) => {
            Some(Millis::parse_rfc3339(text).ok_or_else(|| format!("--until {text:?} is not an RFC 3339 time"))?)
        }
        None => None,
    };
    let started = std::time::Instant::now();
    let source = Source::new(options.data_dir, options.store);
    if let Some(shards) = source.sharded()? {
        return replay_sharded(&source, shards, until);
    }
    let recovery = source.recover(until)?;
    let elapsed = started.elapsed();
    let Some(engine) = &recovery.engine else { return Err(format!("{} holds no journal", source.name())) };
    let out = replay_summary(engine, &recovery, elapsed);
    source.note_live();
    super::print_out(&out);
    Ok(())
}

/// What `esim replay` prints of one engine recovered in `elapsed`.
fn replay_summary(engine: &Engine, recovery: &Recovery, elapsed: std::time::Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "state_digest {}", engine.state_digest());
    let _ = writeln!(out, "service time {}", engine.now());
    let _ = writeln!(
        out,
        "entries      {} ({} from the snapshot, {} replayed from the journal)",
        recovery.next_index, recovery.from_snapshot, recovery.replayed
    );
    let _ = writeln!(out, "accounts     {}", engine.accounts().len());
    let _ = writeln!(out, "esims        {}", engine.esims().len());
    let _ = writeln!(out, "groups       {}", engine.groups().len());
    let report = engine.conservation_report(None).expect("all accounts");
    let _ =
        writeln!(out, "conserved    {}", if report.conserved { "yes (every difference is exactly 0)" } else { "NO" });
    let seconds = elapsed.as_secs_f64().max(1e-9);
    // A rate only of what was replayed: a snapshot alone is read, not replayed.
    if recovery.replayed == 0 {
        let what =
            if recovery.from_snapshot > 0 { "the snapshot read, no entry after it" } else { "nothing to replay" };
        let _ = writeln!(out, "replay time  {seconds:.3} s ({what})");
    } else {
        let _ = writeln!(out, "replay time  {:.3} s ({:.0} entries/s)", seconds, recovery.replayed as f64 / seconds);
    }
    for note in &recovery.repaired {
        let _ = writeln!(out, "damage       {note} (not repaired here: `esim serve` cuts it on start)");
    }
    out
}

/// Each shard of a sharded data dir or store recovered (read-only), in shard order.
fn recover_shards(source: &Source, shards: u32, until: Option<Millis>) -> Result<Vec<Recovery>, String> {
    (0..shards)
        .map(|shard| {
            let recovery = source.recover_shard(shard, until).map_err(|e| format!("shard {shard}: {e}"))?;
            if recovery.engine.is_none() {
                return Err(format!("shard {shard} of {} holds no journal", source.name()));
            }
            Ok(recovery)
        })
        .collect()
}

/// `esim replay` of a sharded data dir or store: each shard's digest and summary, then
/// one digest over all (what `GET /admin/v1/state` shows) and the totals.
fn replay_sharded(source: &Source, shards: u32, until: Option<Millis>) -> Result<(), String> {
    let started = std::time::Instant::now();
    let recoveries = recover_shards(source, shards, until)?;
    let elapsed = started.elapsed();
    let mut out = String::new();
    let mut digests = Vec::new();
    let (mut accounts, mut esims, mut groups, mut entries, mut conserved) = (0, 0, 0, 0, true);
    for (shard, recovery) in recoveries.iter().enumerate() {
        let engine = recovery.engine.as_ref().expect("checked by recover_shards");
        let report = engine.conservation_report(None).expect("all accounts");
        conserved &= report.conserved;
        digests.push(engine.state_digest());
        let _ = writeln!(
            out,
            "shard {shard}      {} time {} entries {} accounts {} esims {} groups {} conserved {}",
            engine.state_digest(),
            engine.now(),
            recovery.next_index,
            engine.accounts().len(),
            engine.esims().len(),
            engine.groups().len(),
            if report.conserved { "yes" } else { "NO" }
        );
        accounts += engine.accounts().len();
        esims += engine.esims().len();
        groups += engine.groups().len();
        entries += recovery.next_index;
        for note in &recovery.repaired {
            let _ =
                writeln!(out, "damage       shard {shard}: {note} (not repaired here: `esim serve` cuts it on start)");
        }
    }
    let header = format!(
        "shards       {shards}\nstate_digest {} (over the shards' digests)\n",
        crate::shards::combined_digest(&digests)
    );
    out.insert_str(0, &header);
    let _ = writeln!(out, "entries      {entries}");
    let _ = writeln!(out, "accounts     {accounts}");
    let _ = writeln!(out, "esims        {esims}");
    let _ = writeln!(out, "groups       {groups}");
    let everywhere = "yes (every difference is exactly 0, on every shard)";
    let _ = writeln!(out, "conserved    {}", if conserved { everywhere } else { "NO" });
    let _ = writeln!(out, "replay time  {:.3} s", elapsed.as_secs_f64());
    source.note_live();
    super::print_out(&out);
    Ok(())
}

/// `esim report conservation`: the finance report of the data dir or store (one
/// account's, or every account's with a total row); `Err` when money is not conserved.
pub fn report_conservation(options: ReportOptions) -> Result<(), String> {
    let period = esim_engine::finance::Period::parse(options.from.as_deref(), options.until.as_deref())?;
    let account = options.account.as_deref();
    let source = Source::new(options.data_dir, options.store);
    let report = match source.sharded()? {
        Some(shards) => {
            let recoveries = recover_shards(&source, shards, None)?;
            let engines: Vec<&Engine> = recoveries.iter().filter_map(|r| r.engine.as_ref()).collect();
            sharded_report(&engines, account, period)?
        }
        None => {
            let recovery = source.recover(None)?;
            let Some(engine) = recovery.engine else { return Err(format!("{} holds no journal", source.name())) };
            engine.finance_report(account, period).ok_or_else(|| format!("no account {}", account.unwrap_or("")))?
        }
    };
    source.note_live();
    let rendered = report.render(&options.format).ok_or_else(|| format!("no report format {:?}", options.format))?;
    super::print_out(&rendered);
    if report.conserved {
        Ok(())
    } else {
        Err("money is not conserved: see the difference lines".into())
    }
}

/// The finance report over the shards' engines: one account's from its own shard (as an
/// unsharded service shows it), or every shard's rows combined.
fn sharded_report(
    engines: &[&Engine],
    account: Option<&str>,
    period: esim_engine::finance::Period,
) -> Result<esim_engine::finance::FinanceReport, String> {
    assert!(engines.len() >= 2, "a sharded source has at least two shards");
    Ok(match account {
        Some(id) => engines[crate::shards::shard_of_account_id(id, engines.len())]
            .finance_report(Some(id), period)
            .ok_or_else(|| format!("no account {id}"))?,
        None => {
            let generated_at = engines.iter().map(|e| e.now()).max().expect("at least two shards").to_rfc3339();
            let parts = engines
                .iter()
                .enumerate()
                .map(|(shard, engine)| {
                    (format!("shard-{shard}"), None, engine.finance_report(None, period).expect("all accounts"))
                })
                .collect();
            crate::shards::combine_reports(generated_at, parts)
        }
    })
}
