//! The journal and snapshots in PostgreSQL: `esim serve --store postgres://…` (issue 17,
//! first slice; decisions 138-145).
//!
//! The same entries as the file journal (each the JSON payload of a journal record) and
//! the same snapshot bytes (the magic and one record), in three tables, created by the
//! versioned migrations in [`MIGRATIONS`] (applied on start, in one transaction, under an
//! advisory lock; each version recorded once in `schema_migrations`):
//!
//! - `shard_owner`: one row per shard (`store_meta` holds their count, decision 177): the owner's `epoch`,
//!   the journal `head` (entries appended: the index the next entry gets), the owner's
//!   name, its lease expiry (renewed by the owner, read by a standby: [`crate::standby`])
//!   and the journal header (engine configuration with the seed, clock, start time).
//! - `journal`: `(shard, seq)` primary key, the epoch that wrote it, its service time
//!   (`at_ms`) and the entry payload.
//! - `snapshot`: `(shard, covered)` primary key, when it was written, its bytes.
//! - `inventory_pool` (a sharded store): the global eSIM pool the shards take blocks
//!   from, one row ([`PgPool`], decisions 190-192).
//!
//! # Appending: group commit and fencing in one transaction
//!
//! One transaction per batch: `UPDATE shard_owner SET head = new WHERE shard = s AND
//! epoch = mine AND head = old` ([`crate::fence::append`], evaluated by the database)
//! must touch exactly one row, and the batch's entries are
//! inserted with one statement; then `COMMIT`. No row touched: another process took the
//! shard (bumped the epoch); the transaction is rolled back and this process acknowledges
//! no more changes ([`JournalSink::fenced`]). The primary key makes a second append at
//! the same index impossible.
//!
//! # A commit whose outcome is unknown
//!
//! When `COMMIT` fails (the connection breaks, or the server ends the session while it
//! waits for a synchronous standby), the transaction may or may not have committed. Nothing is answered from a guess: a new connection ends the old session
//! (`pg_terminate_backend`) and waits until it is gone, so its outcome is final, then
//! reads the journal row at the batch's first index: written by this epoch means
//! committed (acknowledged), absent means not (503, back to the durable state). If that
//! cannot be read within [`RESOLVE_WINDOW`], the store stops taking writes for good in
//! this process (a restart reads what is durable).
//!
//! The client is `tokio-postgres` without TLS (decision 138). Its calls run on a small
//! runtime of the store's own, on the caller's thread (or a scoped thread when the caller
//! is inside tokio), because the server calls the [`JournalSink`] synchronously.

use crate::clock::{Clock, SystemClock};
use crate::journal::{self, JournalError, Recovery, SegmentHeader, SnapshotPolicy};
use crate::sink::{JournalAlarm, JournalSink, APPEND_DEADLINE_MS};
use esim_api::JournalEntry;
use esim_engine::{Engine, Millis};
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, IsolationLevel, NoTls};

/// The shard this slice serves (sharding is a later slice: every table has the column).
pub const SHARD: i32 = 0;
/// How long an owner's lease runs from its last renewal (an append, or the renewal tick
/// every third of it) by the database's clock. A standby takes the shard over only after
/// it has passed (decision 146); `esim serve --lease-ms` overrides it (tests).
pub const LEASE_MS: u64 = 3_000;
/// The shortest and longest lease `--lease-ms` accepts.
pub const LEASE_MS_RANGE: std::ops::RangeInclusive<u64> = 200..=60_000;
/// The channel an append's transaction notifies (its payload: the new head), which a
/// standby listens on.
pub const JOURNAL_CHANNEL: &str = "esim_journal_0";

/// The channel shard `shard`'s appends notify ([`JOURNAL_CHANNEL`] for shard 0).
pub fn journal_channel(shard: i32) -> String {
    format!("esim_journal_{shard}")
}
/// A connection attempt gives up after this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Every statement of the store's sessions ends after this long (the server cancels it).
const STATEMENT_TIMEOUT_MS: u64 = 30_000;
/// A session idle inside a transaction (a frozen owner) is ended by the server after
/// this long, releasing its row locks; a serving process uses its lease instead when
/// that is shorter (a transaction idle past the lease is a zombie's: decision 150).
const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 10_000;
/// Taking the shard waits at most this long for the owner row's lock.
const TAKEOVER_LOCK_TIMEOUT_MS: u64 = 5_000;
/// How long the outcome of a commit whose connection failed is looked for.
pub const RESOLVE_WINDOW: Duration = Duration::from_secs(30);
/// Entries read per query while loading.
const LOAD_PAGE_ENTRIES: i64 = 10_000;
/// The advisory lock key that serializes migrations of one database.
const MIGRATION_LOCK: i64 = 0x6573_696d_0017;

/// The schema, one version at a time: applied in order, each once, never edited after
/// it shipped (a change is a new version).
pub const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE shard_owner (
        shard integer PRIMARY KEY,
        epoch bigint NOT NULL,
        head bigint NOT NULL,
        owner text NOT NULL,
        lease_until timestamptz NOT NULL,
        header bytea NOT NULL
    );
    CREATE TABLE journal (
        shard integer NOT NULL,
        seq bigint NOT NULL,
        epoch bigint NOT NULL,
        at_ms bigint NOT NULL,
        entry bytea NOT NULL,
        PRIMARY KEY (shard, seq)
    );
    CREATE TABLE snapshot (
        shard integer NOT NULL,
        covered bigint NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        state bytea NOT NULL,
        PRIMARY KEY (shard, covered)
    );",
    ),
    (
        2,
        // Sharding in the store (decision 177): the shard count, fixed when the store is
        // made, and where each shard's owner takes forwarded requests.
        "CREATE TABLE store_meta (
        id integer PRIMARY KEY CHECK (id = 0),
        shards integer NOT NULL CHECK (shards BETWEEN 1 AND 64)
    );
    ALTER TABLE shard_owner ADD COLUMN address text;",
    ),
    (
        3,
        // The global eSIM pool of a sharded store (decisions 185, 190): one row, made
        // with the shard count of a new store (`prepare_shards`).
        "CREATE TABLE inventory_pool (
        id integer PRIMARY KEY CHECK (id = 0),
        available bigint NOT NULL CHECK (available >= 0),
        generation bigint NOT NULL CHECK (generation >= 0),
        last_take bigint NOT NULL DEFAULT 0
    );",
    ),
];

fn store_error(what: &str, error: impl std::fmt::Display) -> JournalError {
    JournalError(format!("the PostgreSQL store: {what}: {error}"))
}

/// What a SQLSTATE means, for the codes an operator meets at start or during a stall.
fn sqlstate_meaning(code: &str) -> Option<&'static str> {
    Some(match code {
        "28P01" => "wrong password (invalid_password)",
        "28000" => "the role may not connect: no such role, or no pg_hba.conf entry lets it (invalid_authorization_specification)",
        "3D000" => "the database does not exist (invalid_catalog_name)",
        "3F000" => "the schema does not exist (invalid_schema_name)",
        "42501" => "the role lacks a permission it needs (insufficient_privilege)",
        "42P01" => "a table is missing (undefined_table)",
        "53300" => "the server has no connection slot left (too_many_connections)",
        "53100" => "the server's disk is full (disk_full)",
        "57P01" => "the server ended the session (admin_shutdown)",
        "57P02" => "the server crashed (crash_shutdown)",
        "57P03" => "the server is starting up or shutting down (cannot_connect_now)",
        "57014" => "the statement was cancelled, e.g. by statement_timeout (query_canceled)",
        "55P03" => "a lock was not granted in time (lock_not_available)",
        "25P03" => "the session sat idle inside a transaction too long (idle_in_transaction_session_timeout)",
        "25006" => "the server only reads: a hot standby, not the primary (read_only_sql_transaction)",
        "40001" => "the transaction was not serializable (serialization_failure)",
        "40P01" => "a deadlock was detected (deadlock_detected)",
        "23505" => "a row with that key exists (unique_violation)",
        _ => return None,
    })
}

/// A client error in words an operator can act on: the SQLSTATE with its meaning and the
/// server's message for an error the server sent (tokio-postgres says only "db error"),
/// else the kind of failure with its cause (connection refused, timed out, closed).
pub(crate) fn explain(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        let code = db.code().code();
        let meaning = sqlstate_meaning(code).unwrap_or("see PostgreSQL's error codes");
        return format!("{meaning}: SQLSTATE {code}: {}", db.message());
    }
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        if let Some(io_error) = inner.downcast_ref::<io::Error>() {
            let hint = match io_error.kind() {
                io::ErrorKind::ConnectionRefused => "connection refused: is PostgreSQL running and listening there? ",
                io::ErrorKind::TimedOut => "timed out: ",
                io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof => "the connection broke: ",
                _ => "",
            };
            text = format!("{hint}{text}");
        }
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// A store error whose cause is a client error, explained.
fn pg_error(what: &str, error: tokio_postgres::Error) -> JournalError {
    store_error(what, Pg(&error))
}

/// [`explain`], as a `Display` for [`store_error`].
struct Pg<'a>(&'a tokio_postgres::Error);

impl std::fmt::Display for Pg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&explain(self.0))
    }
}

/// The connection settings of a `--store` value (a `postgres://` URL or libpq's
/// `key=value` form), with the timeouts of the store's sessions.
pub fn parse_url(url: &str) -> Result<Config, JournalError> {
    parse_url_with_lease(url, IDLE_IN_TRANSACTION_TIMEOUT_MS)
}

/// [`parse_url`] for a process that serves with a lease of `lease_ms`: its sessions'
/// idle-in-transaction timeout is the lease when shorter.
pub fn parse_url_with_lease(url: &str, lease_ms: u64) -> Result<Config, JournalError> {
    let idle_ms = IDLE_IN_TRANSACTION_TIMEOUT_MS.min(lease_ms.max(*LEASE_MS_RANGE.start()));
    let mut config: Config = url.parse().map_err(|e| store_error("not a PostgreSQL connection string", e))?;
    config.connect_timeout(CONNECT_TIMEOUT).application_name("esim").options(format!(
        "-c statement_timeout={STATEMENT_TIMEOUT_MS} -c idle_in_transaction_session_timeout={idle_ms}"
    ));
    Ok(config)
}

/// A current-thread runtime that drives the client: calls block on it.
struct Io {
    /// `None` only while dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Io {
    /// The store is dropped by the owner task (inside tokio), where a runtime may not
    /// wait for its threads: it is shut down without waiting (it has no blocking tasks).
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Io {
    fn new() -> Result<Io, JournalError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| store_error("cannot start its runtime", e))?;
        Ok(Io { runtime: Some(runtime) })
    }

    /// Runs `future` to its end. With a tokio context (the blocking pool's appends, the
    /// owner task's reload) another runtime may not be entered on this thread, so it
    /// runs on a scoped thread of its own (tens of microseconds beside a commit's
    /// millisecond).
    fn run<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let runtime = self.runtime.as_ref().expect("not dropped");
        if tokio::runtime::Handle::try_current().is_err() {
            return runtime.block_on(future);
        }
        std::thread::scope(|scope| match scope.spawn(|| runtime.block_on(future)).join() {
            Ok(output) => output,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }
    /// [`Io::run`] bounded by `limit`: `Err` names what did not answer in time.
    fn run_within<F>(&self, limit: Duration, what: &str, future: F) -> io::Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.run(async { tokio::time::timeout(limit, future).await }).map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the PostgreSQL store: {what}: no answer within {} ms", limit.as_millis()),
            )
        })
    }
}

/// A connection and its server process id (to end it when a commit's outcome is unknown).
pub(crate) struct Connection {
    pub(crate) client: Client,
    backend_pid: i32,
}

/// A new connection, bounded as a whole by [`CONNECT_TIMEOUT`] (tokio-postgres bounds
/// only the socket's connect: the handshake with a frozen server would wait for good);
/// its error explained ([`explain`]).
pub(crate) async fn connect(config: &Config) -> Result<Connection, String> {
    let connecting = async {
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %explain(&error), "PostgreSQL connection ended");
            }
        });
        let backend_pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        Ok::<_, tokio_postgres::Error>(Connection { client, backend_pid })
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(connected) => connected.map_err(|e| explain(&e)),
        Err(_) => Err(format!("no answer from the server within {} s (connecting)", CONNECT_TIMEOUT.as_secs())),
    }
}

/// Applies the migrations not applied yet; returns how many were.
async fn migrate(client: &mut Client) -> Result<usize, JournalError> {
    let failed = |e: tokio_postgres::Error| pg_error("migrations failed", e);
    let transaction = client.transaction().await.map_err(failed)?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(failed)?;
    // Made only when missing: `CREATE TABLE IF NOT EXISTS` needs CREATE on the schema
    // even when the table exists, and a store whose migrations are done needs no more
    // than the rights its owner uses (decision 224).
    let exists: bool =
        transaction.query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[]).await.map_err(failed)?.get(0);
    if !exists {
        transaction
            .batch_execute(
                "CREATE TABLE schema_migrations (
                    version integer PRIMARY KEY,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )",
            )
            .await
            .map_err(failed)?;
    }
    let done: Vec<i32> = transaction
        .query("SELECT version FROM schema_migrations", &[])
        .await
        .map_err(failed)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let known = MIGRATIONS.last().map_or(0, |(version, _)| *version);
    if let Some(newer) = done.iter().copied().filter(|v| *v > known).max() {
        return Err(JournalError(format!(
            "the PostgreSQL store has schema version {newer}, newer than this build's {known}; run the build that wrote it"
        )));
    }
    let mut applied = 0;
    for (version, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        transaction.batch_execute(sql).await.map_err(failed)?;
        transaction.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[version]).await.map_err(failed)?;
        applied += 1;
    }
    transaction.commit().await.map_err(failed)?;
    Ok(applied)
}

/// The table rights an owner uses after the migrations (read and write its shard's row,
/// append entries, write and prune snapshots).
const OWNER_RIGHTS: &[(&str, &str)] = &[
    ("shard_owner", "SELECT"),
    ("shard_owner", "UPDATE"),
    ("journal", "SELECT"),
    ("journal", "INSERT"),
    ("snapshot", "SELECT"),
    ("snapshot", "INSERT"),
    ("snapshot", "DELETE"),
];

/// Refuses a start whose role lacks a right an owner uses, naming each and the GRANT
/// that gives it: without INSERT on `journal` every append would fail (SQLSTATE 42501)
/// while the probe, which only reads, said the store takes writes again.
async fn check_rights(client: &Client) -> Result<(), JournalError> {
    let (tables, rights): (Vec<&str>, Vec<&str>) = OWNER_RIGHTS.iter().copied().unzip();
    let rows = client
        .query(
            "SELECT current_user::text, r.t, r.p FROM unnest($1::text[], $2::text[]) AS r(t, p) \
             WHERE NOT has_table_privilege(r.t, r.p)",
            &[&tables, &rights],
        )
        .await
        .map_err(|e| pg_error("cannot check the role's rights", e))?;
    let Some(first) = rows.first() else { return Ok(()) };
    let role: String = first.get(0);
    let missing: Vec<String> =
        rows.iter().map(|row| format!("{} on {}", row.get::<_, String>(2), row.get::<_, String>(1))).collect();
    let grants: Vec<String> = rows
        .iter()
        .map(|row| format!("GRANT {} ON {} TO {role};", row.get::<_, String>(2), row.get::<_, String>(1)))
        .collect();
    Err(JournalError(format!(
        "the PostgreSQL store: the role {role:?} lacks {} (every append would fail with SQLSTATE 42501 \
         insufficient_privilege); grant them: {}",
        missing.join(", "),
        grants.join(" ")
    )))
}

/// Applies the migrations, then checks the shard count `asked` (`--shards`) against
/// the one the store was made with, recording it in a new store (`asked`, else 1). A
/// store made before sharding (owner rows and no count) was made with one shard. Under
/// the migrations' advisory lock, so two nodes starting a new store at once agree.
/// Returns the store's count.
///
/// A sharded store gets its global eSIM pool row here, in the same transaction: a new
/// store with the whole `initial_pool`, a store sharded before the pool existed with 0
/// (its shards keep the eSIMs they hold; decision 190).
pub fn prepare_shards(url: &str, asked: Option<u32>, initial_pool: u64) -> Result<u32, JournalError> {
    let config = parse_url(url)?;
    let io = Io::new()?;
    io.run(async {
        let mut connection = connect(&config).await.map_err(|e| store_error("cannot connect", e))?;
        let applied = migrate(&mut connection.client).await?;
        tracing::info!(applied, "migrated the PostgreSQL store");
        let failed = |e: tokio_postgres::Error| pg_error("cannot read the shard count", e);
        let transaction = connection.client.transaction().await.map_err(failed)?;
        transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(failed)?;
        let recorded = transaction
            .query_opt("SELECT shards FROM store_meta WHERE id = 0", &[])
            .await
            .map_err(failed)?
            .map(|row| row.get::<_, i32>(0) as u32);
        let (recorded, new) = match recorded {
            Some(recorded) => (recorded, false),
            None => {
                let owned: i64 =
                    transaction.query_one("SELECT count(*) FROM shard_owner", &[]).await.map_err(failed)?.get(0);
                let count = if owned > 0 { 1 } else { asked.unwrap_or(1) };
                transaction
                    .execute("INSERT INTO store_meta (id, shards) VALUES (0, $1)", &[&(count as i32)])
                    .await
                    .map_err(failed)?;
                (count, owned == 0)
            }
        };
        if recorded > 1 {
            let available = if new { initial_pool } else { 0 };
            let available = i64::try_from(available).map_err(|e| store_error("the initial pool", e))?;
            transaction
                .execute(
                    "INSERT INTO inventory_pool (id, available, generation) VALUES (0, $1, 0) \
                     ON CONFLICT (id) DO NOTHING",
                    &[&available],
                )
                .await
                .map_err(failed)?;
        }
        transaction.commit().await.map_err(failed)?;
        match asked {
            Some(asked) if asked != recorded => Err(JournalError(format!(
                "the PostgreSQL store was made with {recorded} shard(s) and cannot be served with --shards {asked}: \
                 every id it issued names its shard; start with --shards {recorded} (or without --shards)"
            ))),
            _ => Ok(recorded),
        }
    })
}

/// The shard count of a store, read without writing (`esim replay --store`): 1 for a
/// store made before sharding, or an empty database.
pub fn read_shard_count(url: &str) -> Result<u32, JournalError> {
    let config = parse_url(url)?;
    let io = Io::new()?;
    io.run(async {
        let connection = connect(&config).await.map_err(|e| store_error("cannot connect", e))?;
        let failed = |e: tokio_postgres::Error| pg_error("cannot read the shard count", e);
        let exists: bool = connection
            .client
            .query_one("SELECT to_regclass('store_meta') IS NOT NULL", &[])
            .await
            .map_err(failed)?
            .get(0);
        if !exists {
            return Ok(1);
        }
        let row =
            connection.client.query_opt("SELECT shards FROM store_meta WHERE id = 0", &[]).await.map_err(failed)?;
        Ok(row.map_or(1, |row| row.get::<_, i32>(0) as u32))
    })
}

/// Finds where each shard's owner takes forwarded requests: the `address` its owner
/// wrote when it took the shard. One short connection per lookup (a node caches the
/// answer and asks again only when a forward fails).
#[derive(Clone)]
pub struct Locator {
    config: Config,
}

impl Locator {
    pub fn new(url: &str) -> Result<Locator, JournalError> {
        Ok(Locator { config: parse_url(url)? })
    }

    /// The address of shard `shard`'s owner, if the store names one.
    pub async fn address(&self, shard: usize) -> Result<Option<String>, String> {
        let connection = connect(&self.config).await.map_err(|e| e.to_string())?;
        let row = connection
            .client
            .query_opt("SELECT address FROM shard_owner WHERE shard = $1", &[&(shard as i32)])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.and_then(|row| row.get::<_, Option<String>>(0)))
    }
}

/// Who holds a shard, as the store says.
#[derive(Clone, Debug)]
pub struct ShardOwner {
    pub epoch: i64,
    pub head: i64,
    pub owner: String,
    /// Seconds until the lease ends (negative: ended that long ago).
    pub lease_left_s: f64,
}

/// Who holds shard `shard`, as the store says.
pub(crate) async fn read_shard_owner(client: &Client, shard: i32) -> Result<Option<ShardOwner>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT epoch, head, owner, extract(epoch FROM lease_until - now())::float8 FROM shard_owner WHERE shard = $1",
            &[&shard],
        )
        .await?;
    Ok(row.map(|row| ShardOwner { epoch: row.get(0), head: row.get(1), owner: row.get(2), lease_left_s: row.get(3) }))
}

/// Rebuilds the state of shard `shard` in one consistent read: the newest snapshot
/// (none when `until` is given: every entry is kept, decision 141), then the entries
/// after it, up to the head or `max_entries`.
pub(crate) async fn load_shard(
    client: &mut Client,
    shard: i32,
    until: Option<Millis>,
    max_entries: Option<u64>,
) -> Result<Recovery, JournalError> {
    let failed = |e: tokio_postgres::Error| pg_error("cannot read the journal", e);
    let transaction = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(failed)?;
    let mut recovery =
        Recovery { engine: None, header: None, next_index: 0, replayed: 0, from_snapshot: 0, repaired: Vec::new() };
    let Some(row) = transaction
        .query_opt("SELECT head, header FROM shard_owner WHERE shard = $1", &[&shard])
        .await
        .map_err(failed)?
    else {
        return Ok(recovery);
    };
    let stored_head: i64 = row.get(0);
    let head = max_entries.map_or(stored_head as u64, |max| max.min(stored_head as u64));
    let header: SegmentHeader = serde_json::from_slice(row.get::<_, &[u8]>(1))
        .map_err(|e| store_error(&format!("the journal header of shard {shard} cannot be read"), e))?;
    journal::check_version(&header, "the PostgreSQL store's journal header")?;
    let mut engine = None;
    if until.is_none() {
        let snapshot = transaction
            .query_opt(
                "SELECT covered, state FROM snapshot WHERE shard = $1 AND covered <= $2 ORDER BY covered DESC LIMIT 1",
                &[&shard, &(head as i64)],
            )
            .await
            .map_err(failed)?;
        if let Some(row) = snapshot {
            let covered: i64 = row.get(0);
            let name = format!("covering {covered} entries in the PostgreSQL store");
            let decoded = journal::decode_snapshot(row.get::<_, &[u8]>(1), &name)?;
            if decoded.covered_entries != covered as u64 {
                return Err(JournalError(format!("snapshot {name} says it covers {}", decoded.covered_entries)));
            }
            engine = Some(decoded.engine);
            recovery.next_index = covered as u64;
            recovery.from_snapshot = covered as u64;
        }
    }
    let mut engine = engine.unwrap_or_else(|| Engine::new(header.config.clone(), header.start));
    'pages: while recovery.next_index < head {
        let rows = transaction
            .query(
                "SELECT seq, entry FROM journal WHERE shard = $1 AND seq >= $2 AND seq < $3 ORDER BY seq LIMIT $4",
                &[&shard, &(recovery.next_index as i64), &(head as i64), &LOAD_PAGE_ENTRIES],
            )
            .await
            .map_err(failed)?;
        if rows.is_empty() {
            return Err(JournalError(format!(
                "the PostgreSQL store's journal of shard {shard} ends at entry {} but its head is {head}",
                recovery.next_index
            )));
        }
        for row in rows {
            let seq: i64 = row.get(0);
            if seq as u64 != recovery.next_index {
                return Err(JournalError(format!(
                    "the PostgreSQL store's journal of shard {shard} lacks entry {} (the next is {seq})",
                    recovery.next_index
                )));
            }
            let entry: JournalEntry = serde_json::from_slice(row.get::<_, &[u8]>(1))
                .map_err(|e| store_error(&format!("journal entry {seq} of shard {shard} cannot be read"), e))?;
            if until.is_some_and(|until| journal::entry_time(&entry) > until) {
                break 'pages;
            }
            entry.replay(&mut engine);
            recovery.next_index += 1;
            recovery.replayed += 1;
        }
    }
    transaction.commit().await.map_err(failed)?;
    recovery.engine = Some(engine);
    recovery.header = Some(header);
    Ok(recovery)
}

/// Reads a store without taking its shard (`esim replay --store`, `esim report
/// --store`): no migration, nothing written. Also says who owns the shard.
pub fn read_only(url: &str, until: Option<Millis>) -> Result<(Recovery, Option<ShardOwner>), JournalError> {
    read_only_shard(url, SHARD, until)
}

/// [`read_only`] of shard `shard`.
pub fn read_only_shard(
    url: &str,
    shard: i32,
    until: Option<Millis>,
) -> Result<(Recovery, Option<ShardOwner>), JournalError> {
    let config = parse_url(url)?;
    let io = Io::new()?;
    io.run(async {
        let mut connection = connect(&config).await.map_err(|e| store_error("cannot connect", e))?;
        let client = &mut connection.client;
        let exists: bool = client
            .query_one("SELECT to_regclass('shard_owner') IS NOT NULL", &[])
            .await
            .map_err(|e| pg_error("cannot read", e))?
            .get(0);
        if !exists {
            return Ok((
                Recovery {
                    engine: None,
                    header: None,
                    next_index: 0,
                    replayed: 0,
                    from_snapshot: 0,
                    repaired: Vec::new(),
                },
                None,
            ));
        }
        let recovery = load_shard(client, shard, until, None).await?;
        let owner = read_shard_owner(client, shard).await.map_err(|e| pg_error("cannot read the shard owner", e))?;
        Ok((recovery, owner))
    })
}

/// How one append transaction ended.
enum Appended {
    Committed,
    /// The conditional update touched no row: the shard has another owner (or head).
    Fenced(Option<ShardOwner>),
    /// Failed before `COMMIT` was sent: nothing of the batch is durable.
    NotCommitted(tokio_postgres::Error),
    /// `COMMIT` failed (the connection broke, or the server ended the session): it may
    /// have committed.
    Unknown(tokio_postgres::Error),
    /// The transaction did not end within the append deadline: it may have committed.
    Late,
}

/// How this process lost the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// Another process took it (a newer epoch, or another head): what a standby's
    /// takeover or `--take-over` does.
    Fenced,
    /// Where this process stands is unknown (a commit's outcome could not be learnt):
    /// only a restart, which reads what is durable, continues safely.
    Unknown,
}

/// What this process knows of its lease, shared by the store (the owner task's appends)
/// and the renewal thread.
struct LeaseState {
    /// Why this process appends no more, and how it lost the shard.
    lost: Mutex<Option<(Loss, String)>>,
    /// The renewal thread ends when set (the store is dropped).
    stop: AtomicBool,
    /// Raised while the lease renewals fail: `/readyz` says so (the owner task is not asked).
    alarm: Arc<JournalAlarm>,
}

impl LeaseState {
    fn new() -> LeaseState {
        LeaseState { lost: Mutex::new(None), stop: AtomicBool::new(false), alarm: Arc::new(JournalAlarm::default()) }
    }

    fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, why)| why.clone())
    }

    fn fenced(&self) -> Option<String> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((Loss::Fenced, why)) => Some(why.clone()),
            _ => None,
        }
    }

    fn lose(&self, loss: Loss, why: &str) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if lost.is_none() {
            tracing::error!(%why, ?loss, "no more changes are acknowledged by this process");
            *lost = Some((loss, why.to_string()));
        }
    }
}

/// Renews the lease of `epoch` every third of it on a connection of its own, until the
/// store is dropped or the shard is lost: a renewal that touches no owner row means
/// another process took the shard (the store is then lost: no further append is tried).
/// A renewal that fails (the store cannot be reached) raises the store's alarm (`/readyz`
/// 503) and is tried again at the next tick; meanwhile the lease runs out and a standby
/// may take over, which the epoch compare of the next append (or renewal) finds. The
/// first renewal that succeeds again re-takes the lease (the epoch is still this
/// process's, so no other process took the shard) and clears the alarm.
fn spawn_renewal(
    config: Config,
    shard: i32,
    epoch: i64,
    lease: Duration,
    state: Arc<LeaseState>,
) -> Option<std::thread::JoinHandle<()>> {
    let thread_state = state.clone();
    let spawned = std::thread::Builder::new().name("esim-lease".into()).spawn(move || {
        let state = thread_state;
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            state.lose(Loss::Unknown, "the lease renewal cannot start its runtime");
            return;
        };
        runtime.block_on(renew_until_stopped(config, shard, epoch, lease, &state));
    });
    match spawned {
        Ok(handle) => Some(handle),
        Err(error) => {
            state.lose(Loss::Unknown, &format!("the lease renewal thread cannot start: {error}"));
            None
        }
    }
}

/// The renewal thread's loop ([`spawn_renewal`]).
async fn renew_until_stopped(config: Config, shard: i32, epoch: i64, lease: Duration, state: &LeaseState) {
    let every = lease / 3;
    let mut connection: Option<Connection> = None;
    let sql = format!(
        "UPDATE shard_owner SET lease_until = now() + interval '{} milliseconds' WHERE shard = $1 AND epoch = $2",
        lease.as_millis()
    );
    loop {
        let wake = Instant::now() + every;
        while Instant::now() < wake {
            if state.stop.load(Ordering::Relaxed) {
                return;
            }
            tokio::time::sleep(RENEWAL_STOP_POLL.min(wake.saturating_duration_since(Instant::now()))).await;
        }
        if state.stop.load(Ordering::Relaxed) || state.lost().is_some() {
            return;
        }
        let began = Instant::now();
        let attempt = tokio::time::timeout(every, async {
            if connection.as_ref().is_none_or(|c| c.client.is_closed()) {
                connection = Some(connect(&config).await?);
            }
            let client = &connection.as_ref().expect("connected above").client;
            client.execute(sql.as_str(), &[&shard, &epoch]).await.map_err(|e| explain(&e))
        })
        .await;
        let failed = match attempt {
            Ok(Ok(1)) => {
                if began.elapsed() > lease {
                    tracing::warn!("a lease renewal took longer than the lease");
                }
                if let Some(was) = state.alarm.clear() {
                    tracing::info!(%was, epoch, "the lease of shard {shard} is renewed again");
                }
                continue;
            }
            Ok(Ok(_)) => {
                let owner = match connection.as_ref() {
                    Some(c) => read_shard_owner(&c.client, shard).await.ok().flatten(),
                    None => None,
                };
                let now = owner.map_or_else(
                    || "the owner row could not be read".to_string(),
                    |o| format!("the store now says epoch {}, head {}, owner {:?}", o.epoch, o.head, o.owner),
                );
                state.lose(
                    Loss::Fenced,
                    &format!(
                        "shard {shard} of the PostgreSQL store was taken by another process: the lease renewal with \
                         epoch {epoch} touched no owner row ({now})"
                    ),
                );
                return;
            }
            Ok(Err(error)) => error,
            Err(_) => format!("no answer within {} ms", every.as_millis()),
        };
        // Said once per episode (a renewal is tried three times a lease).
        if state.alarm.reason().is_none() {
            tracing::warn!(error = %failed, "the lease renewal failed; trying again every {} ms", every.as_millis());
        } else {
            tracing::debug!(error = %failed, "the lease renewal failed again");
        }
        state.alarm.raise(format!(
            "the lease of shard {shard} cannot be renewed ({failed}): the PostgreSQL store does not answer"
        ));
        connection = None;
    }
}

/// How often a sleeping renewal thread looks whether it should end.
const RENEWAL_STOP_POLL: Duration = Duration::from_millis(50);
/// A graceful stop gives the lease back (so a standby takes over at once) within this.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// How a start found shard 0 ([`PgStore::open_with`]).
pub enum Opened {
    /// This process took the shard: the store, and what was recovered.
    Owner(Box<PgStore>, Box<Recovery>),
    /// Another process holds a live lease: this process is to follow as a standby.
    Leased(ShardOwner),
}

/// How a serving process uses the store.
#[derive(Clone, Copy, Debug)]
pub struct StoreOptions {
    /// The lease ([`LEASE_MS`] unless overridden).
    pub lease: Duration,
    /// How long one append's transaction may take before its outcome is looked up
    /// instead of waited for (`--append-deadline-ms`, [`APPEND_DEADLINE_MS`]).
    pub append_deadline: Duration,
    /// Take the shard even while another process's lease is live (`--take-over`: a
    /// planned switch; the other process is fenced at its next append or renewal).
    pub take_over: bool,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            lease: Duration::from_millis(LEASE_MS),
            append_deadline: Duration::from_millis(APPEND_DEADLINE_MS),
            take_over: false,
        }
    }
}

/// The journal and snapshots of one shard in PostgreSQL, appended to by the owner task.
pub struct PgStore {
    io: Io,
    config: Config,
    /// The shard this store appends to (0 unless the store is sharded).
    shard: i32,
    connection: Option<Connection>,
    /// The epoch this process took the shard at.
    epoch: i64,
    header: SegmentHeader,
    next_index: u64,
    policy: SnapshotPolicy,
    entries_since_snapshot: u64,
    bytes_since_snapshot: u64,
    /// When the newest snapshot was written (Unix ms; 0: none known), set by the
    /// snapshot thread.
    newest_snapshot_unix_ms: Arc<AtomicI64>,
    /// Stamps `newest_snapshot_unix_ms` when a snapshot was written.
    clock: Arc<dyn Clock>,
    /// The snapshot being made off the owner task (one at a time, decision 202).
    /// The snapshot being made, with the entries and bytes it took off the counters (given
    /// back if it fails, so that the next append tries again).
    snapshotting: Option<(std::thread::JoinHandle<bool>, (u64, u64))>,
    lease: Duration,
    /// How long an append's transaction, and each other call of the owner's, may take.
    deadline: Duration,
    state: Arc<LeaseState>,
    renewal: Option<std::thread::JoinHandle<()>>,
}

/// A snapshot of a shard's first `covered` entries, made on a thread of its own.
struct SnapshotJob {
    config: Config,
    shard: i32,
    epoch: i64,
    covered: u64,
    header: SegmentHeader,
    written_ms: Arc<AtomicI64>,
    clock: Arc<dyn Clock>,
}

impl SnapshotJob {
    /// Rebuilds, encodes and writes the snapshot; a failure is logged (nothing is
    /// removed, and the next one is due after another policy's worth).
    /// Writes the snapshot; `false` when it was not written (the owner then tries again
    /// at its next append, decision 228).
    fn run(self) -> bool {
        let (shard, covered) = (self.shard, self.covered);
        let began = std::time::Instant::now();
        match self.write() {
            Ok(bytes) => {
                self.written_ms.store(self.clock.unix_ms(), Ordering::Relaxed);
                tracing::info!(shard, covered, bytes, ms = began.elapsed().as_millis() as u64, "snapshot written");
                true
            }
            Err(why) => {
                tracing::warn!(shard, covered, %why, "the snapshot was not written; trying again at the next append");
                false
            }
        }
    }

    fn write(&self) -> Result<usize, String> {
        let (shard, covered, epoch) = (self.shard, self.covered as i64, self.epoch);
        let io = Io::new().map_err(|e| e.0)?;
        io.run(async {
            let mut connection = connect(&self.config).await.map_err(|e| format!("cannot connect: {e}"))?;
            let client = &mut connection.client;
            // The statement timeout of the store's sessions is for appends: a snapshot
            // of a large state may take longer to read and write.
            client.batch_execute("SET statement_timeout = 0").await.map_err(|e| e.to_string())?;
            let recovery = load_shard(client, shard, None, Some(self.covered)).await.map_err(|e| e.0)?;
            let engine = match recovery.engine {
                Some(engine) if recovery.next_index == self.covered => engine,
                _ => return Err(format!("the store holds {} of the {covered} entries", recovery.next_index)),
            };
            let snapshot = journal::encode_snapshot(&self.header, &engine, self.covered).map_err(|e| e.to_string())?;
            drop(engine);
            let transaction = client.transaction().await.map_err(|e| e.to_string())?;
            let inserted = transaction
                .execute(
                    "INSERT INTO snapshot (shard, covered, state) SELECT $1, $2, $3 \
                     WHERE EXISTS (SELECT 1 FROM shard_owner WHERE shard = $1 AND epoch = $4) ON CONFLICT DO NOTHING",
                    &[&shard, &covered, &snapshot.bytes(), &epoch],
                )
                .await
                .map_err(|e| e.to_string())?;
            // Older snapshots are dropped; the entries they cover are kept (decision 141).
            transaction
                .execute("DELETE FROM snapshot WHERE shard = $1 AND covered < $2", &[&shard, &covered])
                .await
                .map_err(|e| e.to_string())?;
            transaction.commit().await.map_err(|e| e.to_string())?;
            match inserted {
                1 => Ok(snapshot.bytes().len()),
                _ => Err("the shard has another owner (or the snapshot exists)".into()),
            }
        })
    }
}

impl Drop for PgStore {
    /// Ends the renewal thread and, unless the shard was lost, gives the lease back
    /// (`lease_until = now()`), so a standby takes over at once after a graceful stop.
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        if let Some(renewal) = self.renewal.take() {
            let _ = renewal.join();
        }
        if self.state.lost().is_some() {
            return;
        }
        let (config, epoch, shard) = (self.config.clone(), self.epoch, self.shard);
        let released = self.io.run(async move {
            tokio::time::timeout(RELEASE_TIMEOUT, async {
                let connection = connect(&config).await?;
                connection
                    .client
                    .execute(
                        "UPDATE shard_owner SET lease_until = now() WHERE shard = $1 AND epoch = $2",
                        &[&shard, &epoch],
                    )
                    .await
                    .map_err(|e| explain(&e))
            })
            .await
        });
        match released {
            Ok(Ok(1)) => tracing::info!(epoch, "gave the lease of shard {shard} back"),
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not give the lease back; it runs out by itself"),
            Err(_) => tracing::warn!("could not give the lease back in time; it runs out by itself"),
        }
    }
}

impl PgStore {
    /// Connects, applies the migrations, takes shard 0 whatever its lease (a new epoch:
    /// from now on a previous owner's appends fail) and reads its state. `fresh` is the
    /// header a new store is created with. Returns the store and what was recovered.
    pub fn open(url: &str, fresh: &SegmentHeader, policy: SnapshotPolicy) -> Result<(PgStore, Recovery), JournalError> {
        let options = StoreOptions { take_over: true, ..StoreOptions::default() };
        match PgStore::open_with(url, fresh, policy, options)? {
            Opened::Owner(store, recovery) => Ok((*store, *recovery)),
            Opened::Leased(_) => unreachable!("take_over ignores the lease"),
        }
    }

    /// Like [`PgStore::open`], but while another process holds a live lease (by the
    /// database's clock) the shard is left alone and [`Opened::Leased`] says who holds
    /// it, unless `options.take_over`.
    pub fn open_with(
        url: &str,
        fresh: &SegmentHeader,
        policy: SnapshotPolicy,
        options: StoreOptions,
    ) -> Result<Opened, JournalError> {
        PgStore::open_shard(url, SHARD, None, fresh, policy, options)
    }

    /// [`PgStore::open_with`] of shard `shard` of a sharded store (the caller checked the
    /// count, [`shard_count`]); `address` (the URL other nodes forward its requests to)
    /// is written to its owner row when taken.
    pub fn open_shard(
        url: &str,
        shard: i32,
        address: Option<&str>,
        fresh: &SegmentHeader,
        policy: SnapshotPolicy,
        options: StoreOptions,
    ) -> Result<Opened, JournalError> {
        let lease_ms = options.lease.as_millis() as u64;
        let config = parse_url_with_lease(url, lease_ms)?;
        let io = Io::new()?;
        let owner = owner_name();
        let header_json = serde_json::to_vec(fresh).map_err(|e| store_error("cannot encode the header", e))?;
        let opened = io.run(async {
            let mut connection = connect(&config).await.map_err(|e| store_error("cannot connect", e))?;
            let applied = migrate(&mut connection.client).await?;
            check_rights(&connection.client).await?;
            let taken = take_shard(
                &mut connection.client,
                TakeShard { shard, owner: &owner, address, header_json: &header_json, lease_ms },
                !options.take_over,
            )
            .await
            .map_err(|e| pg_error(&format!("cannot take shard {shard}"), e))?;
            let epoch = match taken {
                Taken::Epoch(epoch) => epoch,
                Taken::Leased(holder) => return Ok(Err(holder)),
            };
            let recovery = load_shard(&mut connection.client, shard, None, None).await?;
            let newest = newest_snapshot_ms_of(&connection.client, shard).await?;
            Ok::<_, JournalError>(Ok((connection, applied, epoch, recovery, newest)))
        })?;
        let (connection, applied, epoch, mut recovery, newest) = match opened {
            Ok(opened) => opened,
            Err(holder) => return Ok(Opened::Leased(holder)),
        };
        tracing::info!(
            applied,
            epoch,
            owner,
            shard,
            entries = recovery.next_index,
            "took shard {shard} of the PostgreSQL store"
        );
        if recovery.next_index == 0 {
            // A new store (or one whose first append never committed): it starts like a
            // new data dir, from `fresh` (written to the owner row by `set_header`).
            recovery.engine = None;
            recovery.header = None;
        }
        let header = recovery.header.clone().unwrap_or_else(|| fresh.clone());
        let mut store = PgStore::resume_shard(config, shard, epoch, header, recovery.next_index, policy, options.lease);
        store.io = io;
        store.connection = Some(connection);
        store.entries_since_snapshot = recovery.replayed;
        store.newest_snapshot_unix_ms.store(newest.unwrap_or(0), Ordering::Relaxed);
        store.set_append_deadline(options.append_deadline);
        Ok(Opened::Owner(Box::new(store), Box::new(recovery)))
    }

    /// The store of a process that holds shard `shard` at `epoch` with `next_index`
    /// entries applied (a standby that took it over): the lease renewal starts now.
    pub(crate) fn resume_shard(
        config: Config,
        shard: i32,
        epoch: i64,
        mut header: SegmentHeader,
        next_index: u64,
        policy: SnapshotPolicy,
        lease: Duration,
    ) -> PgStore {
        header.first_index = next_index;
        let state = Arc::new(LeaseState::new());
        let renewal = spawn_renewal(config.clone(), shard, epoch, lease, state.clone());
        PgStore {
            io: Io::new().expect("a current-thread runtime starts"),
            config,
            shard,
            connection: None,
            epoch,
            header,
            next_index,
            policy,
            entries_since_snapshot: 0,
            bytes_since_snapshot: 0,
            newest_snapshot_unix_ms: Arc::new(AtomicI64::new(0)),
            clock: Arc::new(SystemClock),
            snapshotting: None,
            lease,
            deadline: Duration::from_millis(APPEND_DEADLINE_MS),
            state,
            renewal,
        }
    }

    /// The clock that stamps the snapshots this store writes ([`SystemClock`] unless set).
    pub fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
    }

    /// How long one append's transaction may take (`--append-deadline-ms`): past it, the
    /// append's outcome is read back from the store instead of waited for.
    pub fn set_append_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    /// Starts a snapshot when the policy says one is due and none is being made: a
    /// thread of its own rebuilds the state of the first `next_index` entries (all
    /// durable) from the store on its own connection, encodes it and writes it, fenced
    /// by this epoch; the owner task never encodes the state (decision 202).
    fn snapshot_if_due(&mut self) {
        if self.snapshotting.as_ref().is_some_and(|(thread, _)| !thread.is_finished()) {
            return;
        }
        if let Some((done, (entries, bytes))) = self.snapshotting.take() {
            // A snapshot that failed (or panicked) leaves its entries due: retried now.
            if !done.join().unwrap_or(false) {
                self.entries_since_snapshot += entries;
                self.bytes_since_snapshot += bytes;
            }
        }
        if !self.policy.due(self.entries_since_snapshot, self.bytes_since_snapshot) {
            return;
        }
        let job = SnapshotJob {
            config: self.config.clone(),
            shard: self.shard,
            epoch: self.epoch,
            covered: self.next_index,
            header: self.header.clone(),
            written_ms: self.newest_snapshot_unix_ms.clone(),
            clock: self.clock.clone(),
        };
        let spawned =
            std::thread::Builder::new().name(format!("esim-snapshot-{}", self.shard)).spawn(move || job.run());
        match spawned {
            Ok(thread) => {
                let taken = (self.entries_since_snapshot, self.bytes_since_snapshot);
                self.entries_since_snapshot = 0;
                self.bytes_since_snapshot = 0;
                self.snapshotting = Some((thread, taken));
            }
            Err(error) => tracing::warn!(%error, "cannot start the snapshot thread; trying at the next append"),
        }
    }

    /// Waits for the snapshot being made, if any (tests: a stop does not wait, decision 202).
    pub fn wait_snapshot(&mut self) {
        if let Some((thread, _)) = self.snapshotting.take() {
            let _ = thread.join();
        }
    }

    pub(crate) fn set_snapshot_progress(&mut self, entries_since_snapshot: u64, newest_snapshot_unix_ms: Option<i64>) {
        self.entries_since_snapshot = entries_since_snapshot;
        self.newest_snapshot_unix_ms.store(newest_snapshot_unix_ms.unwrap_or(0), Ordering::Relaxed);
    }

    /// The lease this process serves with.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Records the header this process continues with (a new store's, or another clock
    /// mode) in the owner row, if this process still owns the shard.
    pub fn set_header(&mut self, header: SegmentHeader) -> Result<(), JournalError> {
        let json = serde_json::to_vec(&header).map_err(|e| store_error("cannot encode the header", e))?;
        let (epoch, shard) = (self.epoch, self.shard);
        self.connect_again().map_err(|e| JournalError(e.to_string()))?;
        let connection = self.connection.as_mut().expect("connected");
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&shard, &epoch, &json];
        let writing =
            connection.client.execute("UPDATE shard_owner SET header = $3 WHERE shard = $1 AND epoch = $2", &params);
        let updated = self
            .io
            .run_within(self.deadline, "writing the header", writing)
            .map_err(|e| JournalError(e.to_string()))?
            .map_err(|e| pg_error("cannot write the header", e))?;
        if updated != 1 {
            return Err(JournalError(format!("shard {shard} of the PostgreSQL store was taken by another process")));
        }
        self.header = header;
        Ok(())
    }

    /// The epoch this process took the shard at.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Makes sure there is a live connection (made again after a failure; bounded by
    /// [`CONNECT_TIMEOUT`]).
    fn connect_again(&mut self) -> io::Result<()> {
        if self.connection.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.connection = None;
        }
        if self.connection.is_none() {
            let connected =
                self.io.run(connect(&self.config)).map_err(|e| io::Error::other(store_error("cannot connect", e)))?;
            self.connection = Some(connected);
        }
        Ok(())
    }

    fn lose(&mut self, loss: Loss, why: String) -> io::Error {
        self.state.lose(loss, &why);
        io::Error::other(why)
    }

    /// Learns whether the batch at `old_head` committed after its `COMMIT` failed (or its
    /// transaction passed the deadline): ends the old session (so its outcome is final),
    /// then reads the row at `old_head`. Tried for [`RESOLVE_WINDOW`], each attempt bounded
    /// by what is left of it (a frozen server answers no attempt).
    fn resolve(&mut self, old_head: i64, old_pid: i32) -> Result<bool, String> {
        let (config, epoch, shard) = (self.config.clone(), self.epoch, self.shard);
        let resolved = self.io.run(async move {
            let began = Instant::now();
            let mut last_error = String::from("no attempt");
            while began.elapsed() < RESOLVE_WINDOW {
                let attempt = async {
                    let connection = connect(&config).await?;
                    let client = &connection.client;
                    let _ = client.execute("SELECT pg_terminate_backend($1)", &[&old_pid]).await;
                    loop {
                        let alive = client
                            .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&old_pid])
                            .await
                            .map_err(|e| explain(&e))?;
                        if alive.is_none() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let row = client
                        .query_opt("SELECT epoch FROM journal WHERE shard = $1 AND seq = $2", &[&shard, &old_head])
                        .await
                        .map_err(|e| explain(&e))?;
                    let written_by = row.map(|row| row.get::<_, i64>(0));
                    Ok::<_, String>((connection, crate::fence::committed(written_by, epoch)))
                };
                let left = RESOLVE_WINDOW.saturating_sub(began.elapsed());
                match tokio::time::timeout(left, attempt).await {
                    Ok(Ok(found)) => return Ok(found),
                    Ok(Err(error)) => last_error = error,
                    Err(_) => last_error = format!("the session {old_pid} of the failed commit did not end in time"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(last_error)
        })?;
        let (connection, committed) = resolved;
        self.connection = Some(connection);
        Ok(committed)
    }

    /// After a batch that committed but took longer than the lease: re-takes the lease
    /// when nothing moved (decision 222). `UPDATE ... WHERE epoch = mine AND head = the
    /// batch's end` renews it only if no other process took the shard meanwhile (a
    /// takeover bumps the epoch) and nothing else was appended; the database evaluates
    /// both under the row lock, so a standby taking over at the same moment either sees
    /// the renewed lease or fences this update. No row: the shard is lost (fenced); no
    /// answer: an error (the batch is durable, the server answers its requests again from
    /// the durable state and probes).
    fn retake_lease(&mut self) -> io::Result<()> {
        let (shard, epoch, head, lease_ms) = (self.shard, self.epoch, self.next_index as i64, self.lease.as_millis());
        self.connect_again()?;
        let client = &self.connection.as_ref().expect("connected").client;
        let sql = format!(
            "UPDATE shard_owner SET lease_until = now() + interval '{lease_ms} milliseconds' \
             WHERE shard = $1 AND epoch = $2 AND head = $3"
        );
        let renewed = self.io.run_within(
            self.deadline,
            "re-taking the lease",
            client.execute(sql.as_str(), &[&shard, &epoch, &head]),
        );
        match renewed {
            Ok(Ok(1)) => {
                tracing::warn!(
                    shard,
                    epoch,
                    head,
                    "an append outlasted the lease; nothing moved meanwhile: re-took the lease"
                );
                Ok(())
            }
            Ok(Ok(_)) => {
                let owner = self.io.run_within(self.deadline, "reading the owner row", read_shard_owner(client, shard));
                let now = match owner {
                    Ok(Ok(Some(o))) => {
                        format!("the store now says epoch {}, head {}, owner {:?}", o.epoch, o.head, o.owner)
                    }
                    _ => "the owner row could not be read".into(),
                };
                Err(self.lose(
                    Loss::Fenced,
                    format!(
                        "shard {shard} of the PostgreSQL store moved on while an append outlasted the lease \
                         (this process: epoch {epoch} head {head}; {now})"
                    ),
                ))
            }
            Ok(Err(error)) => {
                self.connection = None;
                Err(io::Error::other(store_error("cannot re-take the lease after a slow append", Pg(&error))))
            }
            Err(error) => {
                self.connection = None;
                Err(error)
            }
        }
    }
}

/// This process, as the owner row names it.
pub(crate) fn owner_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()).unwrap_or_default();
    format!("pid {} on {}", std::process::id(), if host.is_empty() { "unknown host" } else { &host })
}

/// When the newest snapshot of shard `shard` was written (Unix ms), if there is one.
pub(crate) async fn newest_snapshot_ms_of(client: &Client, shard: i32) -> Result<Option<i64>, JournalError> {
    Ok(client
        .query_opt(
            "SELECT (extract(epoch FROM written_at) * 1000)::bigint FROM snapshot WHERE shard = $1 \
             ORDER BY covered DESC LIMIT 1",
            &[&shard],
        )
        .await
        .map_err(|e| pg_error("cannot read the snapshots", e))?
        .map(|row| row.get(0)))
}

/// What [`take_shard`] writes to the owner row.
struct TakeShard<'a> {
    shard: i32,
    owner: &'a str,
    /// Where other nodes forward this shard's requests (`None`: no node forwards here).
    address: Option<&'a str>,
    header_json: &'a [u8],
    lease_ms: u64,
}

/// What [`take_shard`] did.
enum Taken {
    /// This process holds the shard at this epoch.
    Epoch(i64),
    /// Another process holds a live lease; nothing was changed.
    Leased(ShardOwner),
}

/// Takes shard 0: creates its row (epoch 1) in a new store, else bumps its epoch; when
/// `respect_lease`, leaves a row whose lease is live (by the database's clock) alone.
/// The row lock (`FOR UPDATE`) makes two processes starting at once take turns: the
/// second sees the first's new lease.
async fn take_shard(
    client: &mut Client,
    take: TakeShard<'_>,
    respect_lease: bool,
) -> Result<Taken, tokio_postgres::Error> {
    let TakeShard { shard, owner, address, header_json, lease_ms } = take;
    let transaction = client.transaction().await?;
    transaction.batch_execute(&format!("SET LOCAL lock_timeout = {TAKEOVER_LOCK_TIMEOUT_MS}")).await?;
    let lease = format!("now() + interval '{lease_ms} milliseconds'");
    let row = transaction
        .query_opt(
            "SELECT epoch, head, owner, extract(epoch FROM lease_until - now())::float8 FROM shard_owner \
             WHERE shard = $1 FOR UPDATE",
            &[&shard],
        )
        .await?;
    let epoch = match row {
        None => {
            transaction
                .execute(
                    &format!(
                        "INSERT INTO shard_owner (shard, epoch, head, owner, lease_until, header, address) \
                         VALUES ($1, 1, 0, $2, {lease}, $3, $4)"
                    ),
                    &[&shard, &owner, &header_json, &address],
                )
                .await?;
            1
        }
        Some(row) => {
            let holder =
                ShardOwner { epoch: row.get(0), head: row.get(1), owner: row.get(2), lease_left_s: row.get(3) };
            if respect_lease && holder.lease_left_s > 0.0 {
                transaction.rollback().await?;
                return Ok(Taken::Leased(holder));
            }
            let epoch = holder.epoch + 1;
            transaction
                .execute(
                    &format!(
                        "UPDATE shard_owner SET epoch = $2, owner = $3, lease_until = {lease}, address = $4 \
                         WHERE shard = $1"
                    ),
                    &[&shard, &epoch, &owner, &address],
                )
                .await?;
            epoch
        }
    };
    transaction.commit().await?;
    Ok(Taken::Epoch(epoch))
}

/// One batch in one transaction: the fenced head update, the entries, `COMMIT`.
#[allow(clippy::too_many_arguments)]
async fn append_batch(
    client: &mut Client,
    shard: i32,
    lease_ms: u64,
    epoch: i64,
    old_head: i64,
    seqs: &[i64],
    ats: &[i64],
    payloads: &[Vec<u8>],
) -> Appended {
    let new_head = old_head + seqs.len() as i64;
    let transaction = match client.transaction().await {
        Ok(transaction) => transaction,
        Err(error) => return Appended::NotCommitted(error),
    };
    let updated = transaction
        .execute(
            &format!(
                "UPDATE shard_owner SET head = $4, lease_until = now() + interval '{lease_ms} milliseconds' \
                 WHERE shard = $1 AND epoch = $2 AND head = $3"
            ),
            &[&shard, &epoch, &old_head, &new_head],
        )
        .await;
    match updated {
        Err(error) => return Appended::NotCommitted(error),
        Ok(1) => {}
        Ok(_) => {
            let _ = transaction.rollback().await;
            return Appended::Fenced(read_shard_owner(client, shard).await.ok().flatten());
        }
    }
    let inserted = transaction
        .execute(
            "INSERT INTO journal (shard, seq, epoch, at_ms, entry) \
             SELECT $1, t.seq, $2, t.at_ms, t.entry FROM unnest($3::bigint[], $4::bigint[], $5::bytea[]) AS t(seq, at_ms, entry)",
            &[&shard, &epoch, &seqs, &ats, &payloads],
        )
        .await;
    if let Err(error) = inserted {
        return Appended::NotCommitted(error);
    }
    // A standby listening on the channel hears of the new head when this commits.
    let notified =
        transaction.execute("SELECT pg_notify($1, $2)", &[&journal_channel(shard), &new_head.to_string()]).await;
    if let Err(error) = notified {
        return Appended::NotCommitted(error);
    }
    match transaction.commit().await {
        Ok(()) => Appended::Committed,
        // Even an error the server sent may follow a local commit (a session ended while
        // it waited for a synchronous standby): every failed COMMIT is read back.
        Err(error) => Appended::Unknown(error),
    }
}

impl JournalSink for PgStore {
    /// One batch in one transaction, bounded by the append deadline: past it (a stalled
    /// or frozen server) the transaction is given up and its outcome read back, as for a
    /// failed `COMMIT` ([`PgStore::resolve`]).
    fn append(&mut self, entries: &[JournalEntry]) -> io::Result<()> {
        if let Some(why) = self.state.lost() {
            return Err(io::Error::other(why));
        }
        if entries.is_empty() {
            return Ok(());
        }
        let old_head = self.next_index as i64;
        let seqs: Vec<i64> = (0..entries.len() as i64).map(|i| old_head + i).collect();
        let ats: Vec<i64> = entries.iter().map(|entry| journal::entry_time(entry).0).collect();
        let payloads: Vec<Vec<u8>> =
            entries.iter().map(|entry| serde_json::to_vec(entry).expect("an entry serializes")).collect();
        let bytes: u64 = payloads.iter().map(|p| p.len() as u64).sum();
        let (epoch, lease, shard) = (self.epoch, self.lease, self.shard);
        let began = Instant::now();
        self.connect_again()?;
        let connection = self.connection.as_mut().expect("connected");
        let old_pid = connection.backend_pid;
        let client = &mut connection.client;
        let lease_ms = lease.as_millis() as u64;
        let batch = append_batch(client, shard, lease_ms, epoch, old_head, &seqs, &ats, &payloads);
        let appended = self.io.run_within(self.deadline, "the append", batch).unwrap_or(Appended::Late);
        match appended {
            Appended::Committed => {}
            Appended::Fenced(owner) => {
                let now = match owner {
                    Some(owner) => format!(
                        "the store now says epoch {}, head {}, owner {:?}",
                        owner.epoch, owner.head, owner.owner
                    ),
                    None => "the owner row could not be read".into(),
                };
                return Err(self.lose(
                    Loss::Fenced,
                    format!(
                        "shard {shard} of the PostgreSQL store was taken by another process: the append at head \
                         {old_head} with epoch {epoch} touched no owner row ({now})"
                    ),
                ));
            }
            Appended::NotCommitted(error) => {
                let error = explain(&error);
                tracing::warn!(%error, "a journal append to PostgreSQL failed; nothing of it is durable");
                return Err(io::Error::other(format!("the PostgreSQL store: {error}")));
            }
            Appended::Unknown(_) | Appended::Late => self.resolve_failed_commit(old_head, old_pid, &appended)?,
        }
        self.next_index += entries.len() as u64;
        self.entries_since_snapshot += entries.len() as u64;
        self.bytes_since_snapshot += bytes;
        // The batch renewed the lease from (after) `began`. One that took longer than the
        // lease may have let it run out: it is acknowledged only once the lease is taken
        // again with nothing moved (decision 222; before, such a process refused every
        // change until restarted).
        let took = began.elapsed();
        if took > lease {
            tracing::warn!(took_ms = took.as_millis() as u64, lease_ms, "an append took longer than the lease");
            self.retake_lease()?;
        }
        self.snapshot_if_due();
        Ok(())
    }

    fn reload(&mut self) -> Result<Engine, String> {
        let (next_index, shard) = (self.next_index, self.shard);
        self.connect_again().map_err(|e| e.to_string())?;
        let client = &mut self.connection.as_mut().expect("connected").client;
        let loaded = self.io.run_within(
            RELOAD_TIMEOUT,
            "reloading the durable state",
            load_shard(client, shard, None, Some(next_index)),
        );
        let recovery = match loaded {
            Ok(loaded) => loaded.map_err(|e| e.0)?,
            Err(error) => {
                self.connection = None;
                return Err(error.to_string());
            }
        };
        if recovery.next_index != next_index {
            return Err(format!("the store holds {} entries but {next_index} were acknowledged", recovery.next_index));
        }
        recovery.engine.ok_or_else(|| "the store lost its journal".into())
    }

    fn wedged(&self) -> Option<String> {
        self.state.lost()
    }

    fn fenced(&self) -> Option<String> {
        self.state.fenced()
    }

    /// Whether appends would succeed again: the store answers, and this process still
    /// owns the shard at the head it acknowledged. Bounded by [`PROBE_TIMEOUT`] in all.
    fn probe(&mut self) -> io::Result<()> {
        if let Some(why) = self.state.lost() {
            return Err(io::Error::other(why));
        }
        let (config, shard) = (self.config.clone(), self.shard);
        let mut connection = self.connection.take().filter(|c| !c.client.is_closed());
        let read = self.io.run_within(PROBE_TIMEOUT, "the probe", async {
            if connection.is_none() {
                connection = Some(connect(&config).await?);
            }
            let client = &connection.as_ref().expect("connected above").client;
            read_shard_owner(client, shard).await.map_err(|e| explain(&e))
        });
        let owner = match read {
            Ok(Ok(owner)) => owner,
            Ok(Err(error)) => return Err(io::Error::other(format!("the PostgreSQL store: {error}"))),
            Err(error) => return Err(error),
        };
        self.connection = connection;
        match owner {
            Some(owner)
                if crate::fence::still_owns(
                    Some(crate::fence::OwnerRow { epoch: owner.epoch, head: owner.head as u64 }),
                    self.epoch,
                    self.next_index,
                ) =>
            {
                Ok(())
            }
            Some(owner) => Err(self.lose(
                Loss::Fenced,
                format!(
                    "shard {shard} of the PostgreSQL store moved on: epoch {} head {} (this process: epoch {} head {})",
                    owner.epoch, owner.head, self.epoch, self.next_index
                ),
            )),
            None => Err(self.lose(Loss::Fenced, format!("shard {shard} of the PostgreSQL store has no owner row"))),
        }
    }

    fn newest_snapshot_unix_ms(&self) -> Option<i64> {
        Some(self.newest_snapshot_unix_ms.load(Ordering::Relaxed)).filter(|&ms| ms > 0)
    }

    fn alarm(&self) -> Option<Arc<JournalAlarm>> {
        Some(self.state.alarm.clone())
    }
}

impl PgStore {
    /// An append whose `COMMIT` failed or whose transaction passed the deadline: its
    /// outcome read back ([`PgStore::resolve`]). `Ok` when it committed; an error when it
    /// did not (nothing of it is durable: the server goes back to the durable state);
    /// the shard lost when the outcome cannot be learnt within [`RESOLVE_WINDOW`].
    fn resolve_failed_commit(&mut self, old_head: i64, old_pid: i32, appended: &Appended) -> io::Result<()> {
        let error = match appended {
            Appended::Unknown(error) => explain(error),
            _ => format!("the transaction did not end within the append deadline of {} ms", self.deadline.as_millis()),
        };
        tracing::warn!(%error, "the append's outcome is unknown: reading whether it committed");
        self.connection = None;
        match self.resolve(old_head, old_pid) {
            Ok(true) => {
                tracing::warn!(committed = true, "the outcome of the append");
                Ok(())
            }
            Ok(false) => {
                tracing::warn!(committed = false, "the outcome of the append");
                Err(io::Error::other(format!(
                    "the PostgreSQL store: the append failed ({error}) and the batch is not in the store"
                )))
            }
            Err(why) => Err(self.lose(
                Loss::Unknown,
                format!(
                    "the append failed ({error}) and whether it committed could not be read within {} s ({why}); \
                     this process exits so that a restart continues from what is durable",
                    RESOLVE_WINDOW.as_secs()
                ),
            )),
        }
    }
}

/// How long the probe of a refusing owner (connecting included) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long reading the durable state back after a failed append may take.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The global eSIM pool of a sharded store (issue 17; decisions 185, 190, 191): the one
/// row of `inventory_pool`, shared by every node of the store. A take is one statement,
/// `UPDATE inventory_pool SET available = available - least(available, $k) ...
/// RETURNING`, so takes from any number of connections (nodes) never grant more than
/// the row held: PostgreSQL serializes the row's updates.
///
/// The trait's calls are synchronous (the shards call them on tokio's blocking pool):
/// they run on a small runtime of the pool's own, one at a time in this process, on one
/// connection made again after an error. [`InventoryPool::available`] and
/// [`InventoryPool::generation`] are what this process last read: other nodes' takes
/// make `available` high (a take then finds less, and corrects it), and their `set` is
/// seen at the next take or [`InventoryPool::refresh`] (the forwarded pool sync does one).
pub struct PgPool {
    config: Config,
    io: Io,
    /// The connection (`None` after an error: made again by the next call).
    connection: Mutex<Option<Connection>>,
    available: std::sync::atomic::AtomicU64,
    generation: std::sync::atomic::AtomicU64,
}

/// How long one call on the pool may take at most, connecting included: a stuck
/// database costs a shard one refill attempt, retried after `TAKE_RETRY_INTERVAL`.
pub const POOL_CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl PgPool {
    /// The pool of the store at `url`, whose row `prepare_shards` made (an error names
    /// what is missing when it did not).
    pub fn open(url: &str) -> Result<PgPool, JournalError> {
        let pool = PgPool {
            config: parse_url(url)?,
            io: Io::new()?,
            connection: Mutex::new(None),
            available: std::sync::atomic::AtomicU64::new(0),
            generation: std::sync::atomic::AtomicU64::new(0),
        };
        crate::pool::InventoryPool::refresh(&pool).map_err(|e| JournalError(e.to_string()))?;
        Ok(pool)
    }

    /// Runs one statement returning `available, generation, ...` on the pool's
    /// connection, bounded by [`POOL_CALL_TIMEOUT`], and keeps the two figures.
    fn call(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> io::Result<Option<tokio_postgres::Row>> {
        let mut slot = self.connection.lock().unwrap_or_else(|p| p.into_inner());
        let config = &self.config;
        // The connection leaves the slot for the call (the guard stays on this thread)
        // and goes back only when the call succeeded.
        let mut connection = slot.take();
        let outcome = self.io.run(async {
            let work = async {
                if connection.is_none() {
                    connection =
                        Some(connect(config).await.map_err(|e| io::Error::other(store_error("cannot connect", e)))?);
                }
                let client = &connection.as_ref().expect("just made").client;
                client.query_opt(sql, params).await.map_err(|e| io::Error::other(pg_error("the inventory pool", e)))
            };
            match tokio::time::timeout(POOL_CALL_TIMEOUT, work).await {
                Ok(outcome) => outcome,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the PostgreSQL store: the inventory pool did not answer within {POOL_CALL_TIMEOUT:?}"),
                )),
            }
        });
        // A broken or stuck connection is not used again.
        let row = outcome?;
        *slot = connection;
        let Some(row) = row else { return Ok(None) };
        let (available, generation): (i64, i64) = (row.get(0), row.get(1));
        self.available.store(available.max(0) as u64, Ordering::Release);
        self.generation.fetch_max(generation.max(0) as u64, Ordering::AcqRel);
        Ok(Some(row))
    }

    fn missing() -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            "the PostgreSQL store has no inventory_pool row: it is made when a sharded store is prepared \
             (esim serve --store URL --shards N)",
        )
    }
}

impl crate::pool::InventoryPool for PgPool {
    fn take(&self, count: u64) -> io::Result<crate::pool::Grant> {
        let count = i64::try_from(count).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SET's right-hand sides read the row as it was: `last_take` is what this
        // update took, returned with the row as it is now.
        let row = self.call(
            "UPDATE inventory_pool SET available = available - least(available, $1), \
             last_take = least(available, $1) WHERE id = 0 RETURNING available, generation, last_take",
            &[&count],
        )?;
        let row = row.ok_or_else(PgPool::missing)?;
        let granted: i64 = row.get(2);
        Ok(crate::pool::Grant { count: granted.max(0) as u64, generation: row.get::<_, i64>(1).max(0) as u64 })
    }

    fn set(&self, available: u64) -> io::Result<u64> {
        let available = i64::try_from(available).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let figures = self.call(
            "UPDATE inventory_pool SET available = $1, generation = generation + 1 WHERE id = 0 \
             RETURNING available, generation",
            &[&available],
        )?;
        figures.map(|row| row.get::<_, i64>(1).max(0) as u64).ok_or_else(PgPool::missing)
    }

    fn available(&self) -> u64 {
        self.available.load(Ordering::Acquire)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn refresh(&self) -> io::Result<()> {
        self.call("SELECT available, generation FROM inventory_pool WHERE id = 0", &[])?
            .map(|_| ())
            .ok_or_else(PgPool::missing)
    }
}
