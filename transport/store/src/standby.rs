//! The hot standby's follower of a PostgreSQL store (issue 17; decisions 146-153,
//! 199-201): it follows a shard's journal and takes the shard over when the owner's
//! lease runs out. What a standby answers on its listener meanwhile is the shell's
//! (`esim_http::standby_http`).
//!
//! - A standby first loads the shard's state and checks that it could serve it (the
//!   secret key file opens every sealed secret, [`ServeCheck`]); else the start fails.
//!   It checks again before it takes the shard over, and after catching up, and never
//!   takes (or at once gives back) a shard it could not serve.
//! - It follows the journal: it LISTENs on the shard's channel, which every append's
//!   transaction notifies, and polls every [`POLL_INTERVAL_MAX`] (or a quarter of the
//!   lease, when shorter) in case a notification is missed. New entries go through
//!   [`JournalEntry::replay`], the path recovery uses, so its state digest equals
//!   `esim replay --store` at the same head.
//! - When the owner's lease has run out by the database's clock, it bumps the epoch
//!   with a conditional update (`WHERE epoch = seen AND lease_until < now()`; no row
//!   touched means another process won, and it keeps following), starts renewing its
//!   own lease, catches up to the head (the old owner can append nothing more: its
//!   epoch compare fails), and hands the store and the state back to be served by the
//!   normal owner task, whose start hands in-flight webhook deliveries out again with
//!   their event ids (the engine's restart path).
//!
//! The unsharded standby ([`follow_until_taken`], called by the shell's `follow`)
//! reports its progress as its `/readyz` detail. A node of a sharded store follows the
//! shards of `--standby-shards` the same way ([`follow_shard`]), one follower each,
//! while it serves its own shards and forwards the followed ones to their owners; a
//! shard it takes over gets this node's address in its owner row and is handed to the
//! running server (`server::AdoptedShard`).
//!
//! Safety never rests on timing: the epoch compare in each append's transaction decides
//! who may append; the lease only decides when a standby may try.

use crate::journal::{JournalError, Recovery, SegmentHeader, SnapshotPolicy};
use crate::store_pg::{self, PgStore, ShardOwner, StoreOptions};
use esim_api::JournalEntry;
use esim_engine::Engine;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

/// The longest wait between two looks at the journal and the lease when no
/// notification comes (a quarter of the lease when that is shorter).
pub const POLL_INTERVAL_MAX: Duration = Duration::from_millis(500);
/// Entries read per query while following.
const PAGE_ENTRIES: i64 = 10_000;
/// Notifications waiting to be noticed (one is enough to wake the follower).
const NOTIFY_QUEUE: usize = 16;
/// Between two failed attempts to reach the store.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// Whether this process can serve a shard's state (its secret key opens every sealed
/// secret in it). A standby runs it on the followed engine at start (and refuses to
/// start when it fails) and again before and after a takeover: it never takes over a
/// shard it cannot serve.
pub type ServeCheck = Arc<dyn Fn(&Engine) -> Result<(), String> + Send + Sync>;

/// A standby at its start: the shard's state loaded from the store and checked.
pub struct Standby {
    follower: Follower,
    check: ServeCheck,
}

impl Standby {
    /// Loads shard `shard`'s state from the store at `url` and runs `check` on it: an
    /// error (the store cannot be read, or the check fails) means this process must not
    /// start as the shard's standby.
    pub async fn start(url: &str, shard: u32, lease: Duration, check: ServeCheck) -> Result<Standby, JournalError> {
        let config = store_pg::parse_url_with_lease(url, lease.as_millis() as u64)?;
        let shard = i32::try_from(shard).map_err(|_| JournalError(format!("no shard {shard}")))?;
        let (_, notified) = mpsc::channel(1);
        let mut follower = Follower {
            config,
            shard,
            client: None,
            notified,
            engine: None,
            header: None,
            next_index: 0,
            from_snapshot: 0,
            replayed: 0,
        };
        follower.connected().await.map_err(|why| JournalError(format!("shard {shard}: {why}")))?;
        follower.check_with(&check).map_err(|why| JournalError(format!("shard {shard}: {why}")))?;
        Ok(Standby { follower, check })
    }

    /// The index of the next entry to apply (the entries applied so far).
    pub fn next_index(&self) -> u64 {
        self.follower.next_index
    }
}

/// The follower's view of one shard's journal.
struct Follower {
    config: Config,
    shard: i32,
    client: Option<Client>,
    notified: mpsc::Receiver<()>,
    engine: Option<Engine>,
    header: Option<SegmentHeader>,
    next_index: u64,
    from_snapshot: u64,
    /// Entries applied from the journal (after the snapshot it started from).
    replayed: u64,
}

/// A connection that LISTENs on shard `shard`'s channel ([`store_pg::journal_channel`]);
/// each notification puts a wake-up in the returned queue (dropped when the queue is
/// full: one wake-up reads them all).
async fn connect_listening(config: &Config, shard: i32) -> Result<(Client, mpsc::Receiver<()>), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (wake, notified) = mpsc::channel(NOTIFY_QUEUE);
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    let _ = wake.try_send(());
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "the standby's PostgreSQL connection ended");
                    break;
                }
            }
        }
    });
    client.batch_execute(&format!("LISTEN {}", store_pg::journal_channel(shard))).await?;
    Ok((client, notified))
}

fn store_error(what: &str, error: impl std::fmt::Display) -> String {
    format!("the PostgreSQL store: {what}: {error}")
}

impl Follower {
    /// `check` on the state followed so far (nothing to check before the first entry).
    fn check_with(&self, check: &ServeCheck) -> Result<(), String> {
        match &self.engine {
            Some(engine) => check(engine),
            None => Ok(()),
        }
    }

    /// Connects (again) when needed; the first connection also loads the state.
    async fn connected(&mut self) -> Result<&mut Client, String> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.client = None;
            let (mut client, notified) =
                connect_listening(&self.config, self.shard).await.map_err(|e| store_error("cannot connect", e))?;
            if self.engine.is_none() {
                let recovery = store_pg::load_shard(&mut client, self.shard, None, None).await.map_err(|e| e.0)?;
                self.engine = recovery.engine;
                self.header = recovery.header;
                self.next_index = recovery.next_index;
                self.from_snapshot = recovery.from_snapshot;
                self.replayed = recovery.replayed;
            }
            self.notified = notified;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Applies the entries after the ones applied, up to the head (or `until`), through
    /// the replay path of recovery. Returns how many.
    async fn catch_up(&mut self, until: Option<u64>) -> Result<u64, String> {
        self.connected().await?;
        let client = self.client.as_ref().expect("connected");
        let engine = self.engine.as_mut().ok_or("the store holds no journal header")?;
        let limit = until.map_or(i64::MAX, |u| u as i64);
        let mut applied = 0;
        loop {
            let rows = client
                .query(
                    "SELECT seq, entry FROM journal WHERE shard = $1 AND seq >= $2 AND seq < $3 ORDER BY seq LIMIT $4",
                    &[&self.shard, &(self.next_index as i64), &limit, &PAGE_ENTRIES],
                )
                .await
                .map_err(|e| store_error("cannot read the journal", e))?;
            let full = rows.len() as i64 == PAGE_ENTRIES;
            for row in rows {
                let seq: i64 = row.get(0);
                if seq as u64 != self.next_index {
                    // Committed batches become visible whole and in order: a gap is damage.
                    return Err(format!(
                        "the PostgreSQL store's journal of shard {} lacks entry {} (the next is {seq})",
                        self.shard, self.next_index
                    ));
                }
                let entry: JournalEntry = serde_json::from_slice(row.get::<_, &[u8]>(1)).map_err(|e| {
                    store_error(&format!("journal entry {seq} of shard {} cannot be read", self.shard), e)
                })?;
                entry.replay(engine);
                self.next_index += 1;
                self.replayed += 1;
                applied += 1;
            }
            if !full {
                return Ok(applied);
            }
        }
    }

    /// Who holds the shard now.
    async fn owner(&mut self) -> Result<ShardOwner, String> {
        let shard = self.shard;
        let client = self.connected().await?;
        store_pg::read_shard_owner(client, shard)
            .await
            .map_err(|e| store_error("cannot read the shard owner", e))?
            .ok_or_else(|| format!("the PostgreSQL store has no owner row for shard {shard}"))
    }

    /// The conditional takeover: the epoch after `seen` with this process's lease, only
    /// if the row still has epoch `seen` and its lease has run out by the database's
    /// clock ([`crate::fence::may_take_over`], evaluated by the database); `address` (a
    /// node's, where other nodes forward the shard's requests) replaces the row's when
    /// given. `Some((epoch, head))` when this process took the shard.
    async fn take_over(
        &mut self,
        seen: i64,
        me: &str,
        address: Option<&str>,
        lease: Duration,
    ) -> Result<Option<(i64, i64)>, String> {
        let shard = self.shard;
        let client = self.connected().await?;
        let sql = format!(
            "UPDATE shard_owner SET epoch = epoch + 1, owner = $3, lease_until = now() + interval '{} milliseconds', \
             address = COALESCE($4, address) WHERE shard = $1 AND epoch = $2 AND lease_until < now() \
             RETURNING epoch, head",
            lease.as_millis()
        );
        let attempt = async {
            let transaction = client.transaction().await?;
            transaction.batch_execute(&format!("SET LOCAL lock_timeout = {}", lease.as_millis().max(1))).await?;
            let row = transaction.query_opt(sql.as_str(), &[&shard, &seen, &me, &address]).await?;
            transaction.commit().await?;
            Ok::<_, tokio_postgres::Error>(row.map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1))))
        };
        match attempt.await {
            Ok(taken) => Ok(taken),
            Err(error) => {
                // The outcome of a failed COMMIT is read back: the row names this process
                // with the next epoch exactly when the takeover committed.
                self.client = None;
                let owner = self.owner().await?;
                if owner.epoch == seen + 1 && owner.owner == me {
                    return Ok(Some((owner.epoch, owner.head)));
                }
                Err(store_error("the takeover failed", error))
            }
        }
    }
}

/// Follows a shard of a sharded store for a node that serves other shards (and
/// forwards this one to its owner meanwhile) until it takes the shard over, writing
/// `address` as the shard's owner address; or until `shutdown` (then `None`).
pub async fn follow_shard(
    standby: Standby,
    address: &str,
    policy: SnapshotPolicy,
    options: StoreOptions,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Result<Option<(PgStore, Recovery)>, JournalError> {
    follow_until_taken(standby, Some(address), policy, options, shutdown, None).await
}

/// A standby's status line (its `/readyz` message).
pub fn describe(shard: i32, owner: &ShardOwner, applied: u64) -> String {
    format!(
        "standby: following shard {shard} of the PostgreSQL store, held by {} (epoch {}, lease for {:.1} s more); \
         {applied} of {} entries applied; takes over when the lease runs out",
        owner.owner,
        owner.epoch,
        owner.lease_left_s.max(0.0),
        owner.head
    )
}

/// The follower of a shard: keeps its engine current and, once the owner's lease has
/// run out and the state passes the standby's check, takes the shard (with `address`
/// as its owner address, when given) and catches up to the head. `None` on `shutdown`.
/// `status`, when given, gets the follower's progress (the unsharded standby's
/// `/readyz` detail).
pub async fn follow_until_taken(
    standby: Standby,
    address: Option<&str>,
    policy: SnapshotPolicy,
    options: StoreOptions,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
    status: Option<&Mutex<String>>,
) -> Result<Option<(PgStore, Recovery)>, JournalError> {
    let Standby { mut follower, check } = standby;
    let (shard, lease) = (follower.shard, options.lease);
    let me = store_pg::owner_name();
    let poll = (lease / 4).min(POLL_INTERVAL_MAX);
    let mut first = true;
    // When this process first saw the lease run out (the takeover's time counts from it).
    let mut expired_seen: Option<Instant> = None;
    // Why the last takeover was declined (said once, not at every look).
    let mut declined: Option<String> = None;
    loop {
        if !first {
            tokio::select! {
                _ = &mut *shutdown => return Ok(None),
                Some(()) = follower.notified.recv() => while follower.notified.try_recv().is_ok() {},
                _ = tokio::time::sleep(poll) => {}
            }
        }
        first = false;
        let looked = async {
            follower.catch_up(None).await?;
            follower.owner().await
        };
        let owner = match looked.await {
            Ok(owner) => owner,
            Err(why) => {
                tracing::warn!(shard, %why, "the standby cannot read the store; trying again");
                follower.client = None;
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        if let Some(status) = status {
            *status.lock().unwrap_or_else(|p| p.into_inner()) = describe(shard, &owner, follower.next_index);
        }
        if owner.lease_left_s > 0.0 {
            expired_seen = None;
            continue;
        }
        // Belt and braces: the state may hold secrets sealed since the start's check.
        if let Err(why) = follower.check_with(&check) {
            decline(shard, &why, &mut declined, status);
            continue;
        }
        let began = *expired_seen.get_or_insert_with(Instant::now);
        let (epoch, head) = match follower.take_over(owner.epoch, &me, address, lease).await {
            Ok(Some(taken)) => taken,
            Ok(None) => continue,
            Err(why) => {
                tracing::warn!(shard, %why, "the takeover attempt failed; following on");
                continue;
            }
        };
        let mut store = match complete_takeover(&mut follower, &check, (epoch, head), (began, lease), policy).await? {
            Ok(store) => store,
            Err(why) => {
                decline(shard, &why, &mut declined, status);
                continue;
            }
        };
        store.set_append_deadline(options.append_deadline);
        let took_ms = began.elapsed().as_millis() as u64;
        tracing::info!(
            shard, epoch, head, took_ms, previous_owner = %owner.owner, previous_epoch = owner.epoch,
            "took shard {shard} over: the owner's lease had run out"
        );
        return Ok(Some((store, follower.into_recovery())));
    }
}

/// Says (once per reason) that this standby will not take shard `shard` over, and why.
fn decline(shard: i32, why: &str, declined: &mut Option<String>, status: Option<&Mutex<String>>) {
    if declined.as_deref() != Some(why) {
        tracing::error!(
            shard, %why,
            "the owner's lease of shard {shard} has run out, but this standby cannot serve the shard: it does not \
             take it over (give it the secret key file the shard was made with and restart it)"
        );
        *declined = Some(why.to_string());
    }
    if let Some(status) = status {
        *status.lock().unwrap_or_else(|p| p.into_inner()) =
            format!("standby: cannot serve shard {shard}, so it does not take it over: {why}");
    }
}

/// After the conditional update took the shard at `epoch`: the lease renewal starts at
/// once, the follower catches up to `head`, and the state is checked again. `Ok(Err)`
/// when the check fails (the old owner's last entries hold a secret this process cannot
/// open): the lease is given back at once (dropping the store), for another node.
async fn complete_takeover(
    follower: &mut Follower,
    check: &ServeCheck,
    (epoch, head): (i64, i64),
    (began, lease): (Instant, Duration),
    policy: SnapshotPolicy,
) -> Result<Result<PgStore, String>, JournalError> {
    let shard = follower.shard;
    let header = follower.header.clone().ok_or_else(|| JournalError("the store holds no journal header".into()))?;
    let mut store = PgStore::resume_shard(follower.config.clone(), shard, epoch, header, head as u64, policy, lease);
    catch_up_taken(follower, (epoch, head), began, lease).await?;
    if let Err(why) = follower.check_with(check) {
        let _ = tokio::task::spawn_blocking(move || drop(store)).await;
        return Ok(Err(why));
    }
    let newest = match follower.connected().await {
        Ok(client) => store_pg::newest_snapshot_ms_of(client, shard).await.unwrap_or(None),
        Err(_) => None,
    };
    store.set_snapshot_progress(follower.replayed, newest);
    Ok(Ok(store))
}

/// After a takeover at `epoch`: the follower applies every entry up to `head`, trying
/// again on store errors until four leases after the lease was seen run out (`began`).
async fn catch_up_taken(
    follower: &mut Follower,
    (epoch, head): (i64, i64),
    began: Instant,
    lease: Duration,
) -> Result<(), JournalError> {
    let shard = follower.shard;
    let caught_up = loop {
        match follower.catch_up(Some(head as u64)).await {
            Ok(_) if follower.next_index == head as u64 => break Ok(()),
            Ok(_) => break Err(format!("the journal ends at {} below its head {head}", follower.next_index)),
            Err(why) if began.elapsed() < lease * 4 => {
                tracing::warn!(shard, %why, "catching up after the takeover; trying again");
                follower.client = None;
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
            Err(why) => break Err(why),
        }
    };
    caught_up.map_err(|why| JournalError(format!("took shard {shard} at epoch {epoch} but cannot catch up: {why}")))
}

impl Follower {
    /// The state followed, as a recovery hands it to a start.
    fn into_recovery(mut self) -> Recovery {
        let mut recovery = Recovery {
            engine: self.engine.take(),
            header: self.header.take(),
            next_index: self.next_index,
            replayed: self.replayed,
            from_snapshot: self.from_snapshot,
            repaired: Vec::new(),
        };
        if recovery.next_index == 0 {
            // As `PgStore::open`: a store without entries starts like a new one.
            recovery.engine = None;
            recovery.header = None;
        }
        recovery
    }
}
