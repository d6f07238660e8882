//! The production shell: hyper 1.x serving the [`Service`] from one owner task.
//!
//! - Connections: `hyper_util::server::conn::auto::Builder` with `TokioIo` and
//!   `service_fn`, each in a `JoinSet` and watched by a `GracefulShutdown`.
//! - Handlers only turn HTTP into a message for the owner task and its answer back
//!   into HTTP. The owner task applies everything in one total order, makes the journal
//!   entries durable (group commit: one flush for a whole batch of requests) before it
//!   answers, fires timers, and hands webhook deliveries to the [`Sender`].

use crate::admission::{Admission, Admitted, KeyMemo};
use crate::api::{error_response, MAX_BODY_BYTES};
use crate::edge::{self, BodyReader, BodyShare, Credential, EdgeLimits, IdleGuard, InFlightBody};
use crate::pool::{InventoryPool, PoolSettings, ShardStock, StockStep};
use crate::sender::{Dispatcher, Sender};
use crate::service::{ClockMode, JournalEntry, Outcome, Service};
use crate::shards::{FanOut, Route};
use bytes::Bytes;
use esim_engine::{AdminOp, ApiError, Command, Delivery, DeliveryResult, Effect, Engine, ErrorCode, KeyDigest, Millis};
use esim_store::clock::{Clock, SystemClock};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::Instrument;

/// A slow client must send its headers within this time.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests get to finish on shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Requests waiting for the owner task (back-pressure beyond it).
const QUEUE_DEPTH: usize = 4_096;
/// Messages taken from the inbox at once.
const MAX_BATCH: usize = 512;
/// Requests applied and waiting for the disk at most; the inbox waits beyond.
const PENDING_MAX: usize = 4_096;
/// While changes are refused after a failed append, how often the journal is probed for
/// room again.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// An append outstanding longer than this is a stall: `/readyz` answers 503 and new
/// changes are refused at once (503 with `Retry-After`) until it returns (decision 221).
pub const APPEND_STALL_MS: u64 = 1_000;
/// The `Retry-After` (seconds) of the 503s of a stalled or refusing journal (kept with
/// the service, which answers the refusals).
pub use esim_api::service::JOURNAL_RETRY_AFTER_S;
/// The contract the owner task appends through is the store's (re-exported here under
/// its old paths).
pub use esim_store::sink::{JournalAlarm, JournalSink, NoJournal, APPEND_DEADLINE_MS, APPEND_DEADLINE_MS_RANGE};
/// A process that must end (its journal is wedged, or its shard was taken and there is
/// no node to forward to) first answers this long as not ready, so that a balancer
/// polling `/readyz` drains it, then stops gracefully and exits non-zero (decision 222).
pub const LOST_DRAIN: Duration = Duration::from_secs(5);
/// How long the owner task waits for a probe of a refusing journal before it goes on
/// without it (the probe keeps running; its answer is taken when it comes).
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// How long a stop waits for the owner tasks (an append stuck in a frozen disk) after
/// the connections finished.
const OWNER_STOP_WAIT: Duration = Duration::from_secs(10);
/// How often an idle owner task looks whether its journal was taken by another process
/// (a store's lease renewal found a newer epoch): it then refuses changes at once, as
/// after a fenced append, and `/readyz` says so.
const FENCE_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Milliseconds on a monotonic clock from a process-wide origin, never 0 (0 means "none"
/// in the readiness atomics).
fn monotonic_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64 + 1
}

/// Why this process must end, once an owner task says so: `serve_nodes` drains
/// ([`LOST_DRAIN`]), stops gracefully and returns the reason as its error, so that
/// `esim serve` exits non-zero (a SIGTERM meanwhile too).
#[derive(Default)]
struct Wedge {
    why: Mutex<Option<String>>,
    notify: tokio::sync::Notify,
}

impl Wedge {
    fn set(&self, why: String) {
        let mut slot = self.why.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(why);
            self.notify.notify_one();
        }
    }

    fn get(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn wait(&self) -> String {
        loop {
            if let Some(why) = self.get() {
                return why;
            }
            self.notify.notified().await;
        }
    }
}

/// Service time from the wall clock: `origin` plus elapsed real time times `speed`.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    real_origin_ms: i64,
    service_origin: Millis,
    speed: u32,
}

/// The wall clock (Unix ms): the store's [`SystemClock`], the one reading of it.
pub fn real_now_ms() -> i64 {
    SystemClock.unix_ms()
}

impl WallClock {
    pub fn new(service_origin: Millis, speed: u32) -> WallClock {
        WallClock { real_origin_ms: real_now_ms(), service_origin, speed: speed.max(1) }
    }
    pub fn now(&self) -> Millis {
        self.service_origin.plus_ms((real_now_ms() - self.real_origin_ms) * i64::from(self.speed))
    }
    /// Real time until a service-time deadline.
    pub fn until(&self, deadline: Millis) -> Duration {
        let service_ms = (deadline.0 - self.now().0).max(0);
        Duration::from_millis((service_ms / i64::from(self.speed)) as u64 + 1)
    }
}

enum Message {
    Request(Box<http::Request<Bytes>>, oneshot::Sender<http::Response<Bytes>>),
    /// A delivery's outcome and how long its POST took (ms).
    Delivered(u64, DeliveryResult, u64),
    /// Every connection is closed: flush and end.
    Stop,
    /// The global pool was set: the shard zeroes its old block (journaled) and answers
    /// its counter once that is durable (`PUT /admin/v1/inventory`, decision 188).
    SyncPool(oneshot::Sender<http::Response<Bytes>>),
}

pub struct ServerOptions {
    pub speed: u32,
    pub allow_insecure_webhooks: bool,
    /// A client must send its request headers within this time (slowloris guard).
    pub header_read_timeout: Duration,
    /// Connection cap, timeouts and the body budget ([`crate::edge`]).
    pub edge: EdgeLimits,
    /// The global eSIM pool the shards take blocks from (a sharded service; `None`:
    /// each engine's counter is its whole stock, decision 185).
    pub pool: Option<PoolSettings>,
    /// How long a request waits for its batch to be durable before 503 with
    /// `Retry-After` (`--append-deadline-ms`, [`APPEND_DEADLINE_MS`]).
    pub append_deadline: Duration,
}

impl ServerOptions {
    pub fn new(speed: u32, allow_insecure_webhooks: bool) -> ServerOptions {
        ServerOptions {
            speed,
            allow_insecure_webhooks,
            header_read_timeout: HEADER_READ_TIMEOUT,
            edge: EdgeLimits::default(),
            pool: None,
            append_deadline: Duration::from_millis(APPEND_DEADLINE_MS),
        }
    }
}

/// What every connection task shares: the way to each shard's owner task, and where
/// new accounts go.
struct Shared {
    admin_token: String,
    /// Signs and checks the node-only headers (`crate::nodes`, decision 218).
    link_key: crate::nodes::LinkKey,
    mode: ClockMode,
    /// One per shard (one unless the service is sharded, `crate::shards`): this
    /// process's owner task, or another node's (`crate::nodes`).
    shards: Vec<ShardHandle>,
    /// Sends requests for remote shards to their owners (`None`: every shard is local).
    forwarder: Option<Arc<crate::nodes::Forwarder>>,
    /// New accounts are placed round-robin from this count (decision 169).
    next_account: AtomicU64,
    /// When this server started (Unix ms): the snapshot age counts from it when the
    /// data dir has no snapshot.
    started_unix_ms: i64,
    /// The global eSIM pool, when the shards take blocks from one.
    pool: Option<Arc<dyn InventoryPool>>,
}

/// One shard as the connection tasks see it: the admission checks they make before
/// reading a body, and the way to its owner task.
struct ShardLink {
    admission: Arc<Admission>,
    clock: WallClock,
    /// The latest service time the owner task showed (milliseconds): a virtual clock's
    /// position, and a floor for a wall clock.
    shown_ms: Arc<AtomicI64>,
    to_owner: mpsc::Sender<Message>,
    readiness: Arc<Readiness>,
    /// The shard's eSIM counter as its owner task last applied (for the admin figures).
    stock_esims: Arc<AtomicU64>,
}

/// A shard as the connection tasks see it: served here once its link is set (at start,
/// or when this node takes the shard over as its hot standby), else by another node.
/// A link is set once and never taken back: a shard this node loses to another (its
/// journal fenced) stays set, marked lost in its readiness, and is forwarded from then on.
#[derive(Default)]
struct ShardHandle {
    link: std::sync::OnceLock<ShardLink>,
}

/// A shard as `serve_nodes` is given it: an engine with its journal, or a shard another
/// node owns (its requests are forwarded). A handful, made once at start: the size of
/// the local variant does not matter.
#[allow(clippy::large_enum_variant)]
pub enum ShardPart {
    Local(Service, Box<dyn JournalSink>),
    Remote,
}

/// What `GET /readyz` reads without asking the owner task (it must stay cheap and
/// answer even when the owner task is busy).
#[derive(Default)]
struct Readiness {
    /// The owner task took over the recovered state and takes requests.
    started: AtomicBool,
    /// Shutting down: in-flight requests finish; a balancer should send no more.
    stopping: AtomicBool,
    /// Why changes are refused (the journal does not take writes), while they are.
    refusing: Mutex<Option<String>>,
    /// Another process took the shard's journal over (its epoch fenced this one): a
    /// node with a forwarder sends the shard's requests to the new owner.
    lost: AtomicBool,
    /// When the append in flight began ([`monotonic_ms`]; 0: none in flight).
    append_since_ms: AtomicU64,
    /// What the journal's own threads raise (a store's lease renewals failing).
    alarm: Option<Arc<JournalAlarm>>,
}

impl Shared {
    /// Shard `shard`'s link when this node serves it: set, and not lost to another node
    /// (a lost shard of a node with a forwarder is served by its new owner; without a
    /// forwarder it stays here, refusing changes and serving reads).
    fn local(&self, shard: usize) -> Option<&ShardLink> {
        let link = self.shards[shard].link.get()?;
        if self.forwarder.is_some() && link.readiness.lost.load(Ordering::Relaxed) {
            return None;
        }
        Some(link)
    }

    /// The shards this node serves now, with their index.
    fn locals(&self) -> impl Iterator<Item = (usize, &ShardLink)> {
        (0..self.shards.len()).filter_map(|shard| Some((shard, self.local(shard)?)))
    }

    /// Why the service is not ready, or `None` when it is: every shard it serves is (a
    /// sharded service names the shard that is not).
    fn not_ready(&self) -> Option<String> {
        let sharded = self.shards.len() > 1;
        self.locals().find_map(|(shard, link)| {
            let why = link.not_ready()?;
            Some(if sharded { format!("shard {shard}: {why}") } else { why })
        })
    }

    /// Shard k's answer to a request (through its owner task, or forwarded to the node
    /// that owns it).
    async fn ask(&self, shard: usize, request: http::Request<Bytes>) -> http::Response<Bytes> {
        let Some(link) = self.local(shard) else {
            return match &self.forwarder {
                Some(forwarder) => forwarder.forward(shard, &request, &self.link_key).await,
                None => unavailable(),
            };
        };
        let (reply, answer) = oneshot::channel();
        if link.to_owner.send(Message::Request(Box::new(request), reply)).await.is_err() {
            return unavailable();
        }
        answer.await.unwrap_or_else(|_| unavailable())
    }
}

impl ShardLink {
    /// Why the shard is not ready, or `None` when it is: recovered (the owner task
    /// runs), the journal takes writes, the request queue has room (caught up), and
    /// not stopping.
    fn not_ready(&self) -> Option<String> {
        if self.readiness.stopping.load(Ordering::Relaxed) {
            return Some("the service is stopping".into());
        }
        if !self.readiness.started.load(Ordering::Relaxed) {
            return Some("recovery is not finished: the engine's owner task has not taken over yet".into());
        }
        if let Some(reason) = self.readiness.refusing.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Some(reason);
        }
        let since = self.readiness.append_since_ms.load(Ordering::Relaxed);
        let outstanding_ms = if since == 0 { 0 } else { monotonic_ms().saturating_sub(since) };
        if outstanding_ms > APPEND_STALL_MS {
            return Some(format!(
                "the journal has not confirmed an append for {outstanding_ms} ms (the store or the disk stalls)"
            ));
        }
        if let Some(reason) = self.readiness.alarm.as_ref().and_then(|alarm| alarm.reason()) {
            return Some(reason);
        }
        if self.to_owner.capacity() == 0 {
            return Some(format!("behind: the queue of {QUEUE_DEPTH} requests for the engine is full"));
        }
        None
    }

    /// Service time at a connection task (rate windows are counted in it).
    fn now(&self, mode: ClockMode) -> Millis {
        let shown = Millis(self.shown_ms.load(Ordering::Relaxed));
        match mode {
            ClockMode::Wall => self.clock.now().max(shown),
            ClockMode::Virtual => shown,
        }
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests and returns. An
/// error if the owner task of the engine died (a bug: the process must end).
pub async fn serve(
    listener: TcpListener,
    service: Service,
    journal: Box<dyn JournalSink>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_shards(listener, vec![(service, journal)], options, shutdown).await
}

/// [`serve`] for a sharded service: shard k is the k-th engine with its journal, each
/// applied by its own owner task; the connection tasks route each request to its shard
/// or fan it out ([`crate::shards`]). With one shard this is exactly [`serve`].
pub async fn serve_shards(
    listener: TcpListener,
    shards: Vec<(Service, Box<dyn JournalSink>)>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let parts = shards.into_iter().map(|(service, journal)| ShardPart::Local(service, journal)).collect();
    serve_nodes(listener, parts, None, options, shutdown).await
}

/// Starts the owner task of one shard: the link the connection tasks use, and the task
/// (spawned by the caller), whose start hands in-flight webhook deliveries out again.
fn start_owner(
    mut service: Service,
    mut journal: Box<dyn JournalSink>,
    options: &ServerOptions,
    ends: &OwnerEnds,
) -> (ShardLink, impl Future<Output = ()> + Send + 'static) {
    // QR codes are drawn by the connection tasks (`answer`), off the owner task.
    service.set_defer_qr(true);
    let (to_owner, inbox) = mpsc::channel(QUEUE_DEPTH);
    let clock = WallClock::new(service.now(Millis(real_now_ms())).max(service.engine().now()), options.speed);
    let sender = Sender::new(options.allow_insecure_webhooks, service.secrets().sealing_key());
    let outcomes = to_owner.clone();
    let dispatcher = Dispatcher::start(
        sender,
        Box::new(move |delivery_id, result, duration_ms| {
            let outcomes = outcomes.clone();
            Box::pin(async move {
                let _ = outcomes.send(Message::Delivered(delivery_id, result, duration_ms)).await;
            })
        }),
    );
    let shown_ms = Arc::new(AtomicI64::new(service.shown_now().0));
    let readiness = Arc::new(Readiness { alarm: journal.alarm(), ..Readiness::default() });
    let stock_esims = Arc::new(AtomicU64::new(service.engine().inventory()));
    if let Some(written_ms) = journal.newest_snapshot_unix_ms() {
        crate::metrics::snapshot_written(written_ms, false);
    }
    journal.on_snapshot_written(Arc::new(|| crate::metrics::snapshot_written(real_now_ms(), true)));
    let link = ShardLink {
        admission: service.admission(),
        clock,
        shown_ms: shown_ms.clone(),
        to_owner,
        readiness: readiness.clone(),
        stock_esims: stock_esims.clone(),
    };
    let state = Owner {
        service,
        journal: Some(journal),
        appending: None,
        pending: Group::default(),
        clock,
        dispatcher,
        shown_ms,
        waiting_tests: BTreeMap::new(),
        readiness,
        stale: false,
        stock: options.pool.clone().map(ShardStock::new),
        stock_esims,
        deadline: options.append_deadline,
        stalled: false,
        probing: None,
        wedge: ends.wedge.clone(),
        exits_when_fenced: ends.exits_when_fenced,
    };
    (link, owner_task(state, inbox))
}

/// How an owner task ends the process ([`Wedge`]).
struct OwnerEnds {
    wedge: Arc<Wedge>,
    /// No node to forward a lost shard to (a service without a forwarder): a fenced
    /// journal ends the process too, not only a wedged one.
    exits_when_fenced: bool,
}

/// What a node of a sharded store adds to [`serve_shards`] (`crate::nodes`).
pub struct NodeOptions {
    /// Sends requests for shards this node does not serve to their owners.
    pub forwarder: Arc<crate::nodes::Forwarder>,
    /// Shards this node took over as their hot standby while serving (`crate::standby`):
    /// each is served here from then on.
    pub adopted: mpsc::Receiver<AdoptedShard>,
    /// The admin token and clock mode (a node may start serving no shard itself).
    pub admin_token: String,
    pub mode: ClockMode,
}

/// A shard this node took over: its index, engine and journal.
pub struct AdoptedShard {
    pub shard: usize,
    pub service: Service,
    pub journal: Box<dyn JournalSink>,
}

/// [`serve_shards`] for a node that owns some of the shards: a request for a
/// [`ShardPart::Remote`] shard goes to its owner through the node's forwarder
/// (`crate::nodes`), until the node adopts the shard.
pub async fn serve_nodes(
    listener: TcpListener,
    shards: Vec<ShardPart>,
    node: Option<NodeOptions>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let first = shards.iter().find_map(|part| match part {
        ShardPart::Local(service, _) => Some(service),
        ShardPart::Remote => None,
    });
    let (admin_token, mode) = match (first, &node) {
        (Some(first), _) => (first.admin_token().to_string(), first.clock()),
        (None, Some(node)) => (node.admin_token.clone(), node.mode),
        (None, None) => return Err(std::io::Error::other("a service serves at least one shard itself")),
    };
    let (forwarder, mut adopted) = match node {
        Some(NodeOptions { forwarder, adopted, .. }) => (Some(forwarder), Some(adopted)),
        None => (None, None),
    };
    crate::metrics::handle();
    let upkeep = tokio::spawn(crate::metrics::upkeep());
    let ends = OwnerEnds { wedge: Arc::new(Wedge::default()), exits_when_fenced: forwarder.is_none() };
    let (shared, mut owners) = start_shards(shards, (admin_token, mode), forwarder, &options, &ends);

    // Every connection task closes gracefully once this turns true (shutdown).
    let (stop_connections, stopping) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let builder = connection_builder(&options);
    let limits = options.edge.clone();
    let bodies = BodyReader::new(&limits);
    let mut acceptor = edge::Acceptor::new(listener, &limits);
    tokio::pin!(shutdown);
    // Set when an owner task says the process must end: the drain's end.
    let mut drain_ends: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            (stream, peer, slot) = acceptor.accept() => {
                let connection = Connection {
                    shared: shared.clone(),
                    bodies: bodies.clone(),
                    builder: builder.clone(),
                    limits: limits.clone(),
                    stopping: stopping.clone(),
                };
                connections.spawn(connection.serve(stream, peer, slot));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            Some(adopted) = next_adopted(&mut adopted) => {
                let AdoptedShard { shard, service, journal } = adopted;
                let (link, owner) = start_owner(service, journal, &options, &ends);
                match shared.shards.get(shard).map(|handle| handle.link.set(link)) {
                    Some(Ok(())) => {
                        owners.spawn(owner);
                        tracing::info!(shard, "serving a shard taken over from its owner");
                    }
                    // Never: a standby follows only shards this node does not serve.
                    _ => tracing::error!(shard, "a shard was taken over that this node serves already: ignored"),
                }
            }
            Some(ended) = owners.join_next() => {
                let why = match ended {
                    Err(error) if error.is_panic() => "the engine's owner task panicked (a bug)".to_string(),
                    Err(error) => format!("the engine's owner task failed: {error}"),
                    Ok(()) => "the engine's owner task ended".to_string(),
                };
                tracing::error!(%why, "stopping: no request can be applied any more");
                upkeep.abort();
                return Err(std::io::Error::other(why));
            }
            why = ends.wedge.wait(), if drain_ends.is_none() => {
                tracing::error!(%why, drain_s = LOST_DRAIN.as_secs(), "this process must be restarted: answering as not ready, then stopping with a failure so that its supervisor restarts it");
                drain_ends = Some(tokio::time::Instant::now() + LOST_DRAIN);
            }
            _ = tokio::time::sleep_until(drain_ends.unwrap_or_else(tokio::time::Instant::now)), if drain_ends.is_some() => break,
            _ = &mut shutdown => break,
        }
    }
    drop(acceptor);
    let stopping = Stopping { connections, stop_connections, owners, upkeep };
    stopping.finish(&shared, &ends.wedge).await
}

/// Starts an owner task for each shard served here ([`ShardPart::Local`]); a remote
/// shard's handle stays empty until this node adopts it.
fn start_shards(
    shards: Vec<ShardPart>,
    (admin_token, mode): (String, ClockMode),
    forwarder: Option<Arc<crate::nodes::Forwarder>>,
    options: &ServerOptions,
    ends: &OwnerEnds,
) -> (Arc<Shared>, JoinSet<()>) {
    let accounts: usize = shards
        .iter()
        .map(|part| match part {
            ShardPart::Local(service, _) => service.engine().accounts().len(),
            ShardPart::Remote => 0,
        })
        .sum();
    let mut links = Vec::with_capacity(shards.len());
    let mut owners = JoinSet::new();
    for part in shards {
        let handle = ShardHandle::default();
        if let ShardPart::Local(service, journal) = part {
            let (link, owner) = start_owner(service, journal, options, ends);
            owners.spawn(owner);
            let _ = handle.link.set(link);
        }
        links.push(handle);
    }
    let shared = Arc::new(Shared {
        link_key: crate::nodes::LinkKey::new(&admin_token),
        admin_token,
        mode,
        shards: links,
        forwarder,
        next_account: AtomicU64::new(accounts as u64),
        started_unix_ms: real_now_ms(),
        pool: options.pool.as_ref().map(|settings| settings.pool.clone()),
    });
    (shared, owners)
}

/// The HTTP/1 and HTTP/2 settings every connection is served with (the edge's bounds).
fn connection_builder(options: &ServerOptions) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(edge::HTTP1_BUFFER_MAX_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(edge::HTTP2_STREAMS_MAX)
        .initial_stream_window_size(edge::HTTP2_WINDOW_BYTES)
        .initial_connection_window_size(edge::HTTP2_WINDOW_BYTES)
        .max_header_list_size(edge::HTTP2_HEADER_LIST_MAX_BYTES);
    builder
}

/// What a stop winds down, in order: the connections, then the owner tasks.
struct Stopping {
    connections: JoinSet<()>,
    stop_connections: tokio::sync::watch::Sender<bool>,
    owners: JoinSet<()>,
    upkeep: tokio::task::JoinHandle<()>,
}

impl Stopping {
    /// Answers not ready, lets in-flight requests finish (at most [`SHUTDOWN_GRACE`]),
    /// then stops each owner task after its last append (at most [`OWNER_STOP_WAIT`]). A
    /// wedged owner ends the process non-zero, whether it drained or a signal came first.
    async fn finish(self, shared: &Shared, wedge: &Wedge) -> std::io::Result<()> {
        let Stopping { mut connections, stop_connections, mut owners, upkeep } = self;
        for link in shared.shards.iter().filter_map(|handle| handle.link.get()) {
            link.readiness.stopping.store(true, Ordering::Relaxed);
        }
        tracing::info!("shutting down: finishing in-flight requests");
        let _ = stop_connections.send(true);
        let finished = async { while connections.join_next().await.is_some() {} };
        if tokio::time::timeout(SHUTDOWN_GRACE, finished).await.is_err() {
            tracing::warn!("some connections did not finish in time");
        }
        connections.abort_all();
        for link in shared.shards.iter().filter_map(|handle| handle.link.get()) {
            let _ = link.to_owner.send(Message::Stop).await;
        }
        upkeep.abort();
        let stopped = tokio::time::timeout(OWNER_STOP_WAIT, async {
            while let Some(ended) = owners.join_next().await {
                ended.map_err(std::io::Error::other)?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
        if let Some(why) = wedge.get() {
            return Err(std::io::Error::other(format!(
                "stopped because the journal must be taken anew by a restart: {why}"
            )));
        }
        match stopped {
            Ok(stopped) => stopped,
            Err(_) => Err(std::io::Error::other(format!(
                "the journal did not finish its last append within {} s of the stop (a stalled store or disk); what it \
                 did not confirm was not acknowledged",
                OWNER_STOP_WAIT.as_secs()
            ))),
        }
    }
}

/// The next shard a node took over (never, for a service that adopts none).
async fn next_adopted(adopted: &mut Option<mpsc::Receiver<AdoptedShard>>) -> Option<AdoptedShard> {
    match adopted {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// What one connection's task needs.
struct Connection {
    shared: Arc<Shared>,
    bodies: BodyReader,
    builder: Builder<TokioExecutor>,
    limits: EdgeLimits,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Connection {
    /// Serves one connection: closed when it sends nothing first, when no request was in
    /// flight for the idle limit ([`IdleGuard`]), and gracefully (HTTP/2 GOAWAY) at its
    /// maximum age or at shutdown, its requests in flight given
    /// [`edge::CONNECTION_CLOSE_GRACE`] to finish.
    async fn serve(mut self, stream: tokio::net::TcpStream, peer: SocketAddr, slot: edge::ConnectionSlot) {
        if !edge::first_byte(&stream, self.limits.first_byte_timeout).await {
            return;
        }
        let share = slot.body_share(&self.limits);
        let (stream, activity) = IdleGuard::new(stream, &self.limits);
        let memo = Arc::new(KeyMemo::default());
        let (shared, bodies) = (self.shared.clone(), self.bodies.clone());
        let service = hyper::service::service_fn(move |request| {
            let in_flight = activity.begin();
            let handled = handle(request, shared.clone(), peer, bodies.clone(), share.clone(), memo.clone());
            async move {
                let response = handled.await?;
                Ok::<_, Infallible>(response.map(|body| InFlightBody::new(body, in_flight)))
            }
        });
        let connection = self.builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        tokio::select! {
            _ = connection.as_mut() => return,
            _ = tokio::time::sleep(self.limits.connection_age_max) => {}
            _ = self.stopping.wait_for(|stop| *stop) => {}
        }
        connection.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(edge::CONNECTION_CLOSE_GRACE, connection).await;
    }
}

/// One request: its id and span, the answer, its metrics and its log line.
async fn handle(
    request: http::Request<Incoming>,
    shared: Arc<Shared>,
    _peer: SocketAddr,
    bodies: BodyReader,
    share: BodyShare,
    memo: Arc<KeyMemo>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let started = std::time::Instant::now();
    let request_id = request_id(request.headers());
    // Every line logged for this request (here, in the owner task, in the sender) carries
    // its id; the account id is filled in once known. Never a key.
    let span = tracing::info_span!("request", request_id = %request_id, account_id = tracing::field::Empty);
    let (endpoint, mut response) =
        answer(request, &shared, Bodies { reader: bodies, share }, &memo, &span).instrument(span.clone()).await;
    // Every 503 says when to retry, whoever made it (decision 219).
    edge::ensure_retry_after(&mut response);
    crate::metrics::request(endpoint, response.status().as_u16(), started.elapsed());
    if let Ok(value) = http::HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    Ok(response.map(Full::new))
}

pub use crate::edge::{REQUEST_ID, REQUEST_ID_MAX_CHARS};

/// The client's `X-Request-Id` when it is 1 to [`REQUEST_ID_MAX_CHARS`] characters of
/// `[A-Za-z0-9._-]` (safe in a log line and a header), else a new one: `req_` and 16 hex
/// digits, unique in this process (a counter from a per-process random start).
fn request_id(headers: &http::HeaderMap) -> String {
    if let Some(given) = headers.get(REQUEST_ID).and_then(|v| v.to_str().ok()) {
        if is_plain_token(given, REQUEST_ID_MAX_CHARS) {
            return given.to_string();
        }
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new().build_hasher().finish()
    });
    let number = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
    // `format!("req_{number:016x}")`, digit by digit: one of a request's fixed costs.
    let mut id = String::with_capacity(20);
    id.push_str("req_");
    id.extend((0..16).rev().map(|place| char::from(b"0123456789abcdef"[(number >> (4 * place)) as usize & 0xf])));
    id
}

/// 1 to `max_chars` characters of `[A-Za-z0-9._-]`.
fn is_plain_token(text: &str, max_chars: usize) -> bool {
    !text.is_empty()
        && text.len() <= max_chars
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A request's span, handed to the owner task with the request (its lines there carry
/// the request id, and it records the account id of a reseller key).
#[derive(Clone)]
struct RequestSpan(tracing::Span);

/// The operator endpoints, outside the reseller, admin and sandbox APIs (decision 104):
/// no key, no rate limit, never through the engine.
fn operator_endpoint(method: &http::Method, path: &str) -> Option<&'static str> {
    if method != http::Method::GET {
        return None;
    }
    match path {
        "/healthz" => Some("healthz"),
        "/readyz" => Some("readyz"),
        "/metrics" => Some("metrics"),
        _ => None,
    }
}

/// `GET /healthz`, `/readyz` and `/metrics`, answered in the connection task.
fn operator_answer(name: &'static str, headers: &http::HeaderMap, shared: &Shared) -> http::Response<Bytes> {
    let json = |status: http::StatusCode, body: &'static str| {
        http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Bytes::from_static(body.as_bytes()))
            .expect("a valid response")
    };
    match name {
        // The process is alive and its connection tasks answer.
        "healthz" => json(http::StatusCode::OK, r#"{"status":"ok"}"#),
        "readyz" => match shared.not_ready() {
            None => json(http::StatusCode::OK, r#"{"status":"ready"}"#),
            Some(reason) => error_response(ApiError::new(ErrorCode::ServiceUnavailable, reason)),
        },
        _ => {
            // Decision 103: the metrics are the operator's, behind the admin token.
            let credential = crate::api::bearer_str(headers);
            if !esim_engine::engine::constant_time_eq(credential.as_bytes(), shared.admin_token.as_bytes()) {
                return error_response(ApiError::new(ErrorCode::InvalidAdminToken, "missing or wrong admin token"));
            }
            crate::metrics::ready(shared.not_ready().is_none());
            let text = crate::metrics::render(shared.started_unix_ms, real_now_ms());
            http::Response::builder()
                .header(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
                .body(Bytes::from(text))
                .expect("a valid response")
        }
    }
}

/// A connection's body reader and its shares of the body budget.
struct Bodies {
    reader: BodyReader,
    share: BodyShare,
}

impl Bodies {
    /// 413 above [`MAX_BODY_BYTES`], 408 past the body read timeout, 503 when a share
    /// of the budget stays spent; the share is held until the answer is back.
    async fn read(&self, body: Incoming, credential: Credential) -> Result<edge::HeldBody, http::Response<Bytes>> {
        self.reader.read(body, MAX_BODY_BYTES, &self.share, credential).await
    }
}

/// `response` to a request whose body is never read: an HTTP/1 connection whose unread
/// body is large or undeclared is closed after it (decision 215).
fn unread(version: http::Version, body: &Incoming, mut response: http::Response<Bytes>) -> http::Response<Bytes> {
    if edge::unread_body_closes(version, body) {
        response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
    response
}

/// The answer to one request, and the endpoint name its metrics are labelled with.
async fn answer(
    request: http::Request<Incoming>,
    shared: &Shared,
    bodies: Bodies,
    memo: &KeyMemo,
    span: &tracing::Span,
) -> (&'static str, http::Response<Bytes>) {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    if crate::dashboard::is_dashboard(&method, request.uri().path()) {
        // Static files, no credential, no engine (issue 18); not logged at info.
        let response = crate::dashboard::answer(request.uri().path());
        tracing::debug!(%method, route = "dashboard", status = response.status().as_u16(), "request");
        return ("dashboard", response);
    }
    if crate::docs_page::is_front_door(&method, request.uri().path()) {
        // The landing page and the API reference: static too (issue 37).
        let response = crate::docs_page::answer(request.uri().path(), request.headers());
        tracing::debug!(%method, route = "front door", status = response.status().as_u16(), "request");
        return ("front_door", response);
    }
    if let Some(name) = operator_endpoint(&method, request.uri().path()) {
        // Not logged at info: a prober calls these every few seconds.
        let response = operator_answer(name, request.headers(), shared);
        tracing::debug!(%method, route = name, status = response.status().as_u16(), "request");
        return (name, response);
    }
    // What the log says of the path: its route's pattern, never the text (it may hold
    // a key: `DELETE /admin/v1/keys/{api_key}`).
    let matched = crate::routes::find(method.as_str(), request.uri().path());
    let route = crate::routes::label_of(&matched);
    let endpoint = endpoint_name(&matched, span);
    let (mut parts, body) = request.into_parts();
    // Node-only headers count on a request another node signed, never on a client's
    // (decision 218).
    let signed_target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    crate::nodes::screen_link(&mut parts.headers, &parts.method, signed_target, &shared.link_key);
    let (target, link) = match shard_of(shared, &matched, &parts) {
        Ok(found) => found,
        Err(response) => return (endpoint, unread(parts.version, &body, response)),
    };
    let Some(link) = link else {
        // Another node's shard: checked as far as this node can, then forwarded.
        // Only a shard can be remote (`serve_nodes` serves at least one shard itself).
        let Route::Shard(shard) = target else { return (endpoint, unavailable()) };
        let response = forward_remote(shared, &bodies, &matched, parts, body, shard).await;
        tracing::info!(%method, route = %route, status = response.status().as_u16(), ms = started.elapsed().as_secs_f64() * 1000.0, forwarded = true, "request");
        return (endpoint, response);
    };
    // Credentials and the rate limit from the headers alone: a refused request's body
    // is never read (nor is a path's outside every API, decision 215).
    let admitted = link.admission.screen_matched(
        &matched,
        parts.uri.path(),
        &parts.headers,
        &shared.admin_token,
        memo,
        link.now(shared.mode),
    );
    let response = match admitted {
        Err(refused) => unread(parts.version, &body, error_response(refused)),
        Ok(admitted) => answer_local(shared, target, matched, admitted, (parts, body), &bodies, span).await,
    };
    // One line per request; never a credential (method, route pattern, status, time).
    tracing::info!(%method, route = %route, status = response.status().as_u16(), ms = started.elapsed().as_secs_f64() * 1000.0, "request");
    (endpoint, response)
}

/// An admitted request for this node: its body read (none for a public endpoint), then
/// its answer.
async fn answer_local(
    shared: &Shared,
    target: Route,
    matched: crate::routes::Match<'_>,
    admitted: Admitted,
    (mut parts, body): (http::request::Parts, Incoming),
    bodies: &Bodies,
    span: &tracing::Span,
) -> http::Response<Bytes> {
    if let (Route::Shard(_), crate::routes::Match::Found(endpoint, params)) = (target, matched) {
        // Handed on unchanged to one owner task: matched once, here.
        parts.extensions.insert(crate::routes::Matched(endpoint, params));
    }
    if let Admitted::Reseller(digest) = admitted {
        // The key was hashed once; only its digest goes on.
        parts.extensions.insert(digest);
        parts.headers.remove(http::header::AUTHORIZATION);
    }
    parts.extensions.insert(RequestSpan(span.clone()));
    if admitted == Admitted::Public {
        // No public endpoint takes a body: it is never read.
        let version = parts.version;
        let response = answer_admitted(shared, target, http::Request::from_parts(parts, Bytes::new())).await;
        return unread(version, &body, response);
    }
    match bodies.read(body, Credential::Verified).await {
        Err(response) => response,
        Ok(held) => answer_admitted(shared, target, http::Request::from_parts(parts, held.bytes.clone())).await,
    }
}

/// The metrics label of a matched request; an admin request's account id (named in its
/// path) goes into its span.
fn endpoint_name(matched: &crate::routes::Match<'_>, span: &tracing::Span) -> &'static str {
    match matched {
        crate::routes::Match::Found(endpoint, params) => {
            for (name, value) in endpoint.parameters().zip(params) {
                if name == "account_id" && is_plain_token(value, REQUEST_ID_MAX_CHARS) {
                    span.record("account_id", value.as_str());
                }
            }
            endpoint.name()
        }
        crate::routes::Match::WrongMethod(_) | crate::routes::Match::NotFound => "none",
    }
}

/// Which shard (or every one) answers, and the local shard that takes it (`None`:
/// another node's): read from the ids the request names, or the shard a node's
/// forwarded request names (answered here or refused: never forwarded again). `Err` is
/// the answer, sent without reading the body.
// The `Err` is the answer itself, sent at once: boxing it buys nothing here.
#[allow(clippy::result_large_err)]
fn shard_of<'s>(
    shared: &'s Shared,
    matched: &crate::routes::Match<'_>,
    parts: &http::request::Parts,
) -> Result<(Route, Option<&'s ShardLink>), http::Response<Bytes>> {
    let shards = shared.shards.len();
    let target = match crate::nodes::forwarded_shard(&parts.headers, shards) {
        Err(refused) => return Err(error_response(refused)),
        Ok(Some(shard)) if shared.local(shard).is_none() => return Err(crate::nodes::not_owner(shard)),
        Ok(Some(shard)) => Route::Shard(shard),
        Ok(None) => crate::shards::route(matched, parts.uri.query(), &parts.headers, shards),
    };
    let target = match target {
        Route::NewAccount if shared.forwarder.is_some() => {
            // Placed here so that a remote placement is forwarded like any remote shard.
            Route::Shard((shared.next_account.fetch_add(1, Ordering::Relaxed) % shards as u64) as usize)
        }
        other => other,
    };
    let link = match target {
        Route::Shard(shard) => shared.local(shard),
        // Admin requests: only the admin token is checked, the same on every shard.
        Route::NewAccount | Route::FanOut(_) => shared.locals().next().map(|(_, link)| link),
    };
    Ok((target, link))
}

/// A request for another node's shard: its credential checked as far as this node can
/// before its body is read ([`crate::nodes::screen_forward`]), then sent to the
/// shard's owner, which checks it whole (decision 215).
async fn forward_remote(
    shared: &Shared,
    bodies: &Bodies,
    matched: &crate::routes::Match<'_>,
    parts: http::request::Parts,
    body: Incoming,
    shard: usize,
) -> http::Response<Bytes> {
    let (path, shards) = (parts.uri.path(), shared.shards.len());
    match crate::nodes::screen_forward(matched, path, &parts.headers, &shared.admin_token, shard, shards) {
        Err(refused) => unread(parts.version, &body, error_response(refused)),
        Ok(None) => {
            let version = parts.version;
            let response = shared.ask(shard, http::Request::from_parts(parts, Bytes::new())).await;
            unread(version, &body, response)
        }
        Ok(Some(credential)) => match bodies.read(body, credential).await {
            Err(response) => response,
            Ok(held) => shared.ask(shard, http::Request::from_parts(parts, held.bytes.clone())).await,
        },
    }
}

/// An admitted request's answer, its body read: from its shard, every shard, or the pool.
async fn answer_admitted(shared: &Shared, target: Route, request: http::Request<Bytes>) -> http::Response<Bytes> {
    let shards = shared.shards.len();
    let figures_asked = request.headers().contains_key(crate::nodes::WANT_FIGURES);
    let forwarded_headers = figures_asked.then(|| request.headers().clone());
    // Only the admin's inventory route carries a pool sync (decision 192), and only from
    // a node (a client's node-only headers were dropped).
    let pool_sync = request.headers().contains_key(crate::nodes::POOL_SYNC)
        && request.headers().contains_key(crate::nodes::FORWARDED_SHARD)
        && request.method() == http::Method::PUT
        && request.uri().path() == "/admin/v1/inventory";
    let mut response = match (target, &shared.pool) {
        // Another node's pool fan-out asks this node's shard (decision 192).
        (Route::Shard(shard), Some(pool)) if pool_sync => sync_shard_pool(shared, shard, pool).await,
        (Route::Shard(shard), _) => shared.ask(shard, request).await,
        (Route::NewAccount, _) => {
            let shard = (shared.next_account.fetch_add(1, Ordering::Relaxed) % shards as u64) as usize;
            shared.ask(shard, request).await
        }
        // The pool: a data dir's (every shard local) or a store's row (remote shards
        // through their owners).
        (Route::FanOut(kind), Some(pool)) if matches!(kind, FanOut::SetInventory | FanOut::State) => {
            pool_fan_out(kind, &request, shared, pool).await
        }
        (Route::FanOut(kind), _) => {
            crate::shards::fan_out(kind, &request, shards, |shard, mut part| {
                if kind == FanOut::Report && shared.local(shard).is_none() {
                    // Another node's part: its figures travel as JSON.
                    part.headers_mut().insert(crate::nodes::WANT_FIGURES, http::HeaderValue::from_static("1"));
                }
                shared.ask(shard, part)
            })
            .await
        }
    };
    if let Some(headers) = forwarded_headers {
        crate::nodes::figures_for_forward(&headers, &mut response);
    }
    crate::service::draw_deferred_qr(&mut response);
    response
}

/// The admin requests about the global pool (decisions 188, 192): `PUT
/// /admin/v1/inventory` sets the pool (durably, off the owner tasks) and then has every
/// shard zero its old block (a remote shard through its owner node); `GET
/// /admin/v1/state` shows the pool and each shard's block beside the digests.
async fn pool_fan_out(
    kind: FanOut,
    request: &http::Request<Bytes>,
    shared: &Shared,
    pool: &Arc<dyn InventoryPool>,
) -> http::Response<Bytes> {
    let shards = shared.shards.len();
    let ask = |shard: usize, part: http::Request<Bytes>| shared.ask(shard, part);
    if kind == FanOut::State {
        let mut answer = crate::shards::fan_out(kind, request, shards, ask).await;
        if let (true, Ok(mut body)) =
            (answer.status().is_success(), serde_json::from_slice::<serde_json::Value>(answer.body()))
        {
            let mut blocks = Vec::with_capacity(shards);
            for shard in 0..shards {
                match shared.local(shard) {
                    Some(link) => blocks.push(link.stock_esims.load(Ordering::Relaxed)),
                    None => match remote_block(shared, shard, request).await {
                        Ok(block) => blocks.push(block),
                        Err(refused) => return *refused,
                    },
                }
            }
            // Other nodes take from a store's pool too: read it as it is now.
            if let Err(refused) = refresh_pool(pool).await {
                return *refused;
            }
            let in_pool = pool.available();
            body["inventory"] = serde_json::json!({
                "available": in_pool.saturating_add(blocks.iter().sum::<u64>()),
                "pool": in_pool,
                "shards": blocks,
            });
            answer = crate::api::json_response(200, serde_json::to_vec(&body).expect("json"));
        }
        return answer;
    }
    let body = serde_json::from_slice::<serde_json::Value>(request.body()).ok();
    let Some(available) = body.as_ref().and_then(|b| b.get("available")?.as_u64()) else {
        // Shard 0 says what is wrong with the body.
        return shared.ask(0, request.clone()).await;
    };
    let setter = pool.clone();
    match tokio::task::spawn_blocking(move || setter.set(available)).await {
        Ok(Ok(_generation)) => {}
        Ok(Err(error)) => {
            tracing::error!(%error, "the inventory pool cannot be written");
            return error_response(ApiError::new(
                ErrorCode::ServiceUnavailable,
                format!("the inventory pool cannot be written ({error}); nothing changed"),
            ));
        }
        Err(error) => return error_response(ApiError::new(ErrorCode::ServiceUnavailable, error.to_string())),
    }
    let mut blocks = Vec::with_capacity(shards);
    for shard in 0..shards {
        let block = match shared.local(shard) {
            Some(link) => local_block(link).await,
            None => remote_block(shared, shard, request).await,
        };
        match block {
            Ok(block) => blocks.push(block),
            Err(refused) => return *refused,
        }
    }
    let body = serde_json::json!({ "available": available, "pool": pool.available(), "shards": blocks });
    crate::api::json_response(200, serde_json::to_vec(&body).expect("json"))
}

/// An answer a pool helper stops with (boxed: it is large beside the figure).
type Refused = Box<http::Response<Bytes>>;

/// Reads the pool again (a store's row, which other nodes change), off the runtime.
async fn refresh_pool(pool: &Arc<dyn InventoryPool>) -> Result<(), Refused> {
    let reader = pool.clone();
    match tokio::task::spawn_blocking(move || reader.refresh()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => {
            Err(Box::new(crate::nodes::unavailable(format!("the inventory pool cannot be read ({error})"))))
        }
        Err(error) => Err(Box::new(crate::nodes::unavailable(error.to_string()))),
    }
}

/// A local shard's block once it has zeroed one of an older pool generation.
async fn local_block(link: &ShardLink) -> Result<u64, Refused> {
    let (reply, answer) = oneshot::channel();
    if link.to_owner.send(Message::SyncPool(reply)).await.is_err() {
        return Err(Box::new(unavailable()));
    }
    let answer = answer.await.unwrap_or_else(|_| unavailable());
    block_of(answer)
}

/// A remote shard's block, asked of its owner node (a forwarded `PUT
/// /admin/v1/inventory` marked [`crate::nodes::POOL_SYNC`], with the admin's credential).
async fn remote_block(shared: &Shared, shard: usize, request: &http::Request<Bytes>) -> Result<u64, Refused> {
    let mut part = http::Request::builder()
        .method(http::Method::PUT)
        .uri("/admin/v1/inventory")
        .header(crate::nodes::POOL_SYNC, "1")
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(credential) = request.headers().get(http::header::AUTHORIZATION) {
        part = part.header(http::header::AUTHORIZATION, credential.clone());
    }
    let part = part.body(Bytes::from_static(b"{}")).expect("a valid request");
    block_of(shared.ask(shard, part).await)
}

/// The `shard_esims` of a shard's pool-sync answer (any other answer is passed on).
fn block_of(answer: http::Response<Bytes>) -> Result<u64, Refused> {
    let block = serde_json::from_slice::<serde_json::Value>(answer.body())
        .ok()
        .and_then(|body| body.get("shard_esims")?.as_u64());
    match block {
        Some(block) if answer.status().is_success() => Ok(block),
        _ => Err(Box::new(answer)),
    }
}

/// This node's answer to another node's pool sync for its shard `shard`: the store's
/// pool read again (so the shard sees a new generation), then the shard's local sync.
async fn sync_shard_pool(shared: &Shared, shard: usize, pool: &Arc<dyn InventoryPool>) -> http::Response<Bytes> {
    let Some(link) = shared.local(shard) else { return crate::nodes::not_owner(shard) };
    if let Err(refused) = refresh_pool(pool).await {
        return *refused;
    }
    match local_block(link).await {
        Ok(block) => crate::api::json_response(200, serde_json::json!({ "shard_esims": block }).to_string()),
        Err(refused) => *refused,
    }
}

fn unavailable() -> http::Response<Bytes> {
    let mut error = ApiError::new(ErrorCode::ServiceUnavailable, "the service is stopping or cannot take changes now");
    error.retry_after_secs = Some(edge::RETRY_AFTER_DEFAULT_SECS);
    error_response(error)
}

type Reply = oneshot::Sender<http::Response<Bytes>>;

/// An answer applied but not yet sent: it waits for the entries applied before it to be
/// durable. The request is kept to answer it again from the durable state if the append
/// fails.
struct Answer {
    reply: Reply,
    response: http::Response<Bytes>,
    request: Option<Box<http::Request<Bytes>>>,
    /// When its batch was applied: the append deadline counts from here.
    applied: std::time::Instant,
}

/// Requests applied since the last hand-over to the journal: their entries, and what is
/// released once those are durable (answers, deliveries).
#[derive(Default)]
struct Group {
    entries: Vec<JournalEntry>,
    answers: Vec<Answer>,
    deliveries: Vec<Delivery>,
    /// Webhook tests applied in this group (answered when their delivery returns).
    tests: Vec<u64>,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.answers.is_empty() && self.deliveries.is_empty() && self.tests.is_empty()
    }
    /// Requests waiting in this group (for back-pressure).
    fn requests(&self) -> usize {
        self.answers.len() + self.tests.len()
    }
}

/// What an append on the blocking pool gives back: the journal, whether the batch is
/// durable, and after a failure the durable state read back (there, not on the owner
/// task: a store that stalls would hold every request; `None` when the journal is
/// wedged, the process then ends).
type AppendDone = (Box<dyn JournalSink>, std::io::Result<()>, Option<Result<Engine, String>>);

/// The append in flight on the blocking pool, and the group it makes durable.
struct Appending {
    task: tokio::task::JoinHandle<AppendDone>,
    group: Group,
    /// When it was handed over: past [`APPEND_STALL_MS`] it is a stall.
    began: std::time::Instant,
}

/// A probe of a refusing journal (the same parts: the journal, whether it takes writes,
/// the durable state read back with it when the engine is stale).
type ProbeDone = AppendDone;

/// The one owner of the engine: applies requests in order, journals, answers.
///
/// Pipelined group commit: while one group's entries are written and synced on the
/// blocking pool, the next requests are applied into the next group, which is handed
/// over as a whole when the append returns. Nothing is released before it is durable:
/// a group's answers (reads too, as they may show its changes) and deliveries wait for
/// its append, and groups are released in order.
struct Owner {
    service: Service,
    /// `None` while an append has it.
    journal: Option<Box<dyn JournalSink>>,
    appending: Option<Appending>,
    pending: Group,
    clock: WallClock,
    /// Sends the deliveries, bounded (decision 115).
    dispatcher: Dispatcher,
    shown_ms: Arc<AtomicI64>,
    waiting_tests: BTreeMap<u64, (Reply, Box<http::Request<Bytes>>)>,
    readiness: Arc<Readiness>,
    /// A failed append could not reload the durable state (a store that cannot be
    /// reached): the engine may hold changes that are not durable, so changes are
    /// accepted again only after a reload succeeds.
    stale: bool,
    /// This shard's side of the global eSIM pool (sharded services only).
    stock: Option<ShardStock<Parked>>,
    /// The engine's counter after the last batch, for the admin figures.
    stock_esims: Arc<AtomicU64>,
    /// How long an answer waits for its batch's append before it is 503
    /// (`ServerOptions::append_deadline`).
    deadline: Duration,
    /// The append in flight passed [`APPEND_STALL_MS`]: changes are refused until it returns.
    stalled: bool,
    /// A probe that outlasted [`PROBE_WAIT`], still running (it holds the journal).
    probing: Option<tokio::task::JoinHandle<ProbeDone>>,
    /// Where this owner says that the process must end.
    wedge: Arc<Wedge>,
    exits_when_fenced: bool,
}

/// A provisioning waiting for the shard's next block of the pool.
type Parked = (Box<http::Request<Bytes>>, Reply);

/// The block on its way to this shard, when one is (pending forever when none is).
async fn stock_refilled(stock: &mut Option<ShardStock<Parked>>) -> std::io::Result<crate::pool::Grant> {
    match stock {
        Some(stock) => stock.refilled().await,
        None => std::future::pending().await,
    }
}

/// [`APPEND_STALL_MS`] as a duration.
const STALL: Duration = Duration::from_millis(APPEND_STALL_MS);

async fn owner_task(mut owner: Owner, mut inbox: mpsc::Receiver<Message>) {
    // Deliveries handed out before a restart are handed out again (receivers de-duplicate).
    owner.service.restart();
    owner.readiness.started.store(true, Ordering::Relaxed);
    let clock = owner.clock;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stopping = false;
    let mut fence_check = tokio::time::interval(FENCE_CHECK_INTERVAL);
    fence_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A shard of a pooled service takes its first block at once.
    owner.refill_stock(false);
    loop {
        let stock_wait_ends = owner.stock.as_ref().and_then(|stock| stock.next_deadline());
        let refilling = owner.stock.as_ref().is_some_and(|stock| stock.refilling());
        let deadline = match owner.service.clock() {
            // While changes are refused, timers wait (firing them would change the state)
            // and the journal is probed for room again.
            _ if owner.service.refusing_changes().is_some() => Some(PROBE_INTERVAL),
            ClockMode::Wall => owner.service.poll_timeout().map(|d| clock.until(d)),
            ClockMode::Virtual => None,
        };
        // Back-pressure: the inbox waits while a full group waits for the disk.
        let accepting = !stopping && owner.pending.requests() < PENDING_MAX;
        let expiry = owner.next_expiry();
        let stall_at = owner.appending.as_ref().filter(|_| !owner.stalled).map(|a| a.began + STALL);
        tokio::select! {
            joined = async { (&mut owner.appending.as_mut().expect("guarded").task).await }, if owner.appending.is_some() => {
                let (journal, appended, reloaded) = joined.expect("a journal append does not panic");
                let group = owner.appending.take().expect("guarded").group;
                owner.readiness.append_since_ms.store(0, Ordering::Relaxed);
                owner.journal = Some(journal);
                owner.appended(group, appended, reloaded);
            }
            probed = async { (&mut owner.probing.as_mut().expect("guarded")).await }, if owner.probing.is_some() => {
                owner.probing = None;
                owner.probed(probed.expect("a journal probe does not panic"));
            }
            _ = tokio::time::sleep_until(expiry.unwrap_or_else(tokio::time::Instant::now)), if expiry.is_some() => {
                owner.expire_waiting();
            }
            _ = tokio::time::sleep_until(stall_at.unwrap_or_else(std::time::Instant::now).into()), if stall_at.is_some() => {
                owner.stall();
            }
            message = inbox.recv(), if accepting => {
                batch.clear();
                match message {
                    Some(Message::Stop) | None => stopping = true,
                    Some(message) => batch.push(message),
                }
                while !stopping && batch.len() < MAX_BATCH {
                    match inbox.try_recv() {
                        Ok(Message::Stop) => stopping = true,
                        Ok(message) => batch.push(message),
                        Err(_) => break,
                    }
                }
                owner.probe_if_refusing().await;
                owner.apply(&mut batch);
                owner.refill_stock(stopping);
            }
            _ = tokio::time::sleep(deadline.unwrap_or(Duration::from_secs(3600))), if deadline.is_some() => {
                owner.probe_if_refusing().await;
                owner.apply(&mut batch);
            }
            // Not while refusing: the probe looks then (and this tick would keep
            // restarting the probe's sleep).
            _ = fence_check.tick(), if owner.service.refusing_changes().is_none() => owner.refuse_if_fenced(),
            taken = stock_refilled(&mut owner.stock), if refilling => {
                owner.stocked(taken, &mut batch);
                owner.refill_stock(stopping);
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(stock_wait_ends.unwrap_or_else(std::time::Instant::now))),
                if stock_wait_ends.is_some() => owner.stock_wait_over(),
        }
        if owner.appending.is_none() && owner.probing.is_none() {
            owner.hand_over();
        }
        let stock_idle = owner.stock.as_ref().is_none_or(|stock| !stock.refilling() && !stock.has_waiting());
        if stopping && owner.appending.is_none() && owner.probing.is_none() && owner.pending.is_empty() && stock_idle {
            break;
        }
    }
}

impl Owner {
    /// Applies a batch of messages (and due timers) into the pending group.
    fn apply(&mut self, batch: &mut Vec<Message>) {
        let now = self.clock.now();
        let applied = std::time::Instant::now();
        self.service.tick(now);
        self.sync_stock();
        for message in batch.drain(..) {
            match message {
                Message::Request(request, reply) if self.waits_for_stock(&request) => {
                    self.stock.as_mut().expect("waits only with a pool").park((request, reply));
                }
                Message::SyncPool(reply) => {
                    let counter = self.service.engine().inventory();
                    let body = serde_json::json!({ "shard_esims": counter }).to_string();
                    self.pending.answers.push(Answer {
                        reply,
                        response: crate::api::json_response(200, body),
                        request: None,
                        applied,
                    });
                }
                Message::Request(request, reply) => {
                    let digest = request.extensions().get::<KeyDigest>().copied();
                    // The owner's lines for this request carry its id, and its account.
                    let span = request.extensions().get::<RequestSpan>().map(|s| s.0.clone());
                    let _entered = span.as_ref().map(|s| s.enter());
                    if let (Some(span), Some(digest)) = (&span, &digest) {
                        if !span.is_disabled() {
                            let engine = self.service.engine();
                            if let Some(account) =
                                engine.key_account(digest).and_then(|i| engine.accounts().get(i.index()))
                            {
                                span.record("account_id", account.id.as_str());
                            }
                        }
                    }
                    let began = std::time::Instant::now();
                    let outcome = self.service.handle_admitted(self.clock.now(), &request, digest);
                    crate::metrics::engine_command(began.elapsed());
                    match outcome {
                        // A change refused while the journal fails or stalls shows no state:
                        // answered at once, not behind the append it would wait for.
                        Outcome::Respond(response)
                            if response.status() == http::StatusCode::SERVICE_UNAVAILABLE
                                && self.service.refusing_changes().is_some() =>
                        {
                            let _ = reply.send(response);
                        }
                        Outcome::Respond(response) => {
                            self.pending.answers.push(Answer { reply, response, request: Some(request), applied })
                        }
                        Outcome::AwaitDelivery(id) => {
                            self.waiting_tests.insert(id, (reply, request));
                            self.pending.tests.push(id);
                        }
                    }
                }
                Message::Delivered(id, result, duration_ms) => {
                    let response = self.service.delivery_outcome(self.clock.now(), id, result, Some(duration_ms));
                    if let Some((reply, _)) = self.waiting_tests.remove(&id) {
                        self.pending.answers.push(Answer { reply, response, request: None, applied });
                    }
                }
                Message::Stop => unreachable!("the inbox loop ends the batch at a stop"),
            }
        }
        self.pending.entries.extend(self.service.drain_journal());
        while self.service.poll_event().is_some() {}
        while let Some(Effect::Deliver(delivery)) = self.service.poll_effect() {
            self.pending.deliveries.push(delivery);
        }
        crate::metrics::retry_queue_depth(self.service.engine().pending_deliveries().len());
        self.stock_esims.store(self.service.engine().inventory(), Ordering::Relaxed);
    }

    /// A provisioning that finds this shard's counter at 0 while the pool (or a block on
    /// its way) still holds eSIMs waits for the block instead of answering
    /// `NO_ESIMS_AVAILABLE` (decision 186).
    fn waits_for_stock(&self, request: &http::Request<Bytes>) -> bool {
        let Some(stock) = &self.stock else { return false };
        let provisioning = matches!(
            crate::routes::find(request.method().as_str(), request.uri().path()),
            crate::routes::Match::Found(crate::routes::Endpoint::ProvisionEsim, _)
        );
        provisioning
            && self.service.refusing_changes().is_none()
            && stock.should_wait(self.service.engine().inventory())
    }

    /// Before a batch: a pool set anew zeroes this shard's old block, and a block taken
    /// while changes were refused is granted now (both journaled in this batch).
    fn sync_stock(&mut self) {
        let Some(stock) = self.stock.as_mut() else { return };
        if stock.sync() == StockStep::Zero {
            self.journal_stock(AdminOp::SetInventory { available: 0 });
        }
        let held = self.stock.as_mut().map_or(0, |stock| stock.take_held());
        if held > 0 && !self.journal_stock(AdminOp::GrantInventory { count: held }) {
            self.stock.as_mut().expect("checked").hold(held);
        }
    }

    /// Applies a command of the pool as a request would (journaled with this batch).
    fn journal_stock(&mut self, op: AdminOp) -> bool {
        let now = self.service.now(self.clock.now());
        match self.service.apply_command(now, Command::Admin(op)) {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(error = %error.message, "a change of the eSIM stock is not journaled now");
                false
            }
        }
    }

    /// Starts taking the next block when the counter is low (on the blocking pool).
    fn refill_stock(&mut self, stopping: bool) {
        let counter = self.service.engine().inventory();
        if let Some(stock) = self.stock.as_mut() {
            stock.refill_if_low(counter, stopping);
        }
    }

    /// A block came from the pool: journal its grant (after zeroing a superseded
    /// block), then apply the provisionings that waited for it, in their order.
    fn stocked(&mut self, taken: std::io::Result<crate::pool::Grant>, batch: &mut Vec<Message>) {
        let Some(stock) = self.stock.as_mut() else { return };
        match taken {
            Err(error) => {
                tracing::error!(%error, "cannot take a block of the eSIM pool; provisioning answers from the shard's counter")
            }
            Ok(grant) => {
                let (step, count) = stock.accept(grant);
                if step == StockStep::Zero {
                    self.journal_stock(AdminOp::SetInventory { available: 0 });
                }
                if count > 0 && !self.journal_stock(AdminOp::GrantInventory { count }) {
                    self.stock.as_mut().expect("checked").hold(count);
                }
            }
        }
        let waited = self.stock.as_mut().expect("checked").unpark_all();
        batch.clear();
        batch.extend(waited.into_iter().map(|(request, reply)| Message::Request(request, reply)));
        self.apply(batch);
    }

    /// Provisionings that waited [`crate::pool::STOCK_WAIT_MAX`] for a block: 503, retry
    /// (the pool still holds eSIMs, so `NO_ESIMS_AVAILABLE` would be false).
    fn stock_wait_over(&mut self) {
        let Some(stock) = self.stock.as_mut() else { return };
        for (_, reply) in stock.expired() {
            let _ = reply.send(error_response(ApiError::new(
                ErrorCode::ServiceUnavailable,
                "no block of the eSIM pool reached this shard in time; retry",
            )));
        }
    }

    /// Refuses changes once the journal says another process took it over while no
    /// append was in flight (the next append would fail the same way).
    fn refuse_if_fenced(&mut self) {
        let Some(why) = self.journal.as_ref().and_then(|journal| journal.fenced()) else { return };
        self.readiness.lost.store(true, Ordering::Relaxed);
        if self.service.refusing_changes().is_none() {
            tracing::error!(%why, "the journal was taken over: answering 503 to changes");
            self.refuse_changes(Some(format!(
                "this process no longer owns the journal ({why}); restart it to serve changes"
            )));
        }
        self.end_if_lost();
    }

    /// Tells `serve_nodes` that this process must end when its journal can never take a
    /// change again here: wedged, or taken by another process with no node to forward
    /// its requests to. It never lives on refusing every change (decision 222).
    fn end_if_lost(&mut self) {
        let Some(journal) = self.journal.as_ref() else { return };
        let why = match (journal.fenced(), journal.wedged()) {
            (Some(why), _) if self.exits_when_fenced => why,
            (Some(_), _) => return,
            (None, Some(why)) => why,
            (None, None) => return,
        };
        self.wedge.set(why);
    }

    /// Refuses changes for `reason` (or accepts them again), and tells `/readyz`.
    fn refuse_changes(&mut self, reason: Option<String>) {
        *self.readiness.refusing.lock().unwrap_or_else(|p| p.into_inner()) = reason.clone();
        self.service.refuse_changes(reason);
    }

    /// With no append in flight: releases the pending group at once when it has no
    /// entries, or hands its entries (and a due snapshot) to the journal.
    fn hand_over(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut group = std::mem::take(&mut self.pending);
        if group.entries.is_empty() {
            self.release(group);
            return;
        }
        let mut journal = self.journal.take().expect("no append is in flight");
        // The engine is exactly at the end of these entries: a due snapshot is taken now.
        let snapshot = match journal.snapshot(self.service.engine(), group.entries.len() as u64) {
            Some(Err(error)) => {
                tracing::warn!(%error, "snapshot failed; the journal still holds everything");
                None
            }
            Some(Ok(snapshot)) => Some(snapshot),
            None => None,
        };
        let entries = std::mem::take(&mut group.entries);
        let work = move |journal: &mut dyn JournalSink| {
            let began = std::time::Instant::now();
            let appended = journal.append(&entries);
            crate::metrics::journal_append(entries.len(), began.elapsed(), appended.is_ok());
            if let (Ok(()), Some(snapshot)) = (&appended, snapshot) {
                match journal.write_snapshot(snapshot) {
                    Ok(()) => crate::metrics::snapshot_written(real_now_ms(), true),
                    Err(error) => tracing::warn!(%error, "snapshot failed; the journal still holds everything"),
                }
            }
            // After a failure, the durable state to go back to (none from a wedged journal).
            let reloaded = (appended.is_err() && journal.wedged().is_none()).then(|| journal.reload());
            (appended, reloaded)
        };
        if !journal.blocks() {
            let (appended, reloaded) = work(journal.as_mut());
            self.journal = Some(journal);
            self.appended(group, appended, reloaded);
            return;
        }
        let task = tokio::task::spawn_blocking(move || {
            let (appended, reloaded) = work(journal.as_mut());
            (journal, appended, reloaded)
        });
        self.readiness.append_since_ms.store(monotonic_ms(), Ordering::Relaxed);
        self.appending = Some(Appending { task, group, began: std::time::Instant::now() });
    }

    /// The end of an append: releases its group, or goes back to the durable state.
    fn appended(&mut self, group: Group, appended: std::io::Result<()>, reloaded: Option<Result<Engine, String>>) {
        let was_stalled = std::mem::take(&mut self.stalled);
        match appended {
            Ok(()) => {
                if was_stalled && self.service.refusing_changes() == Some(stall_reason().as_str()) {
                    tracing::info!("the journal confirmed the stalled append: changes are accepted");
                    self.refuse_changes(None);
                }
                self.release(group);
            }
            Err(error) => self.append_failed(group, error, reloaded),
        }
    }

    /// Sends a durable group's answers and hands out its deliveries.
    fn release(&mut self, group: Group) {
        self.shown_ms.store(self.service.shown_now().0, Ordering::Relaxed);
        for answer in group.answers {
            let _ = answer.reply.send(answer.response);
        }
        for delivery in group.deliveries {
            self.dispatcher.dispatch(delivery);
        }
    }

    /// When the oldest answer still waiting for an append reaches its deadline.
    fn next_expiry(&self) -> Option<tokio::time::Instant> {
        let appending = self.appending.as_ref().and_then(|a| a.group.answers.first());
        let oldest = appending.or(self.pending.answers.first())?;
        Some((oldest.applied + self.deadline).into())
    }

    /// Answers 503 with `Retry-After` every request that waited its whole deadline for
    /// an append (in flight, or queued behind one). What it changed may still become
    /// durable: a retry with the same `Idempotency-Key` finds out (decision 220).
    fn expire_waiting(&mut self) {
        let now = std::time::Instant::now();
        let deadline = self.deadline;
        let mut expired = 0;
        let groups = self.appending.as_mut().map(|a| &mut a.group).into_iter().chain([&mut self.pending]);
        for group in groups {
            // Answers are in the order applied: the expired ones are a prefix.
            let due = group.answers.iter().take_while(|a| now.duration_since(a.applied) >= deadline).count();
            for answer in group.answers.drain(..due) {
                let _ = answer.reply.send(journal_late(deadline));
                expired += 1;
            }
        }
        if expired > 0 {
            tracing::warn!(
                expired,
                deadline_ms = deadline.as_millis() as u64,
                "requests waited their whole deadline for the journal: answered 503"
            );
        }
    }

    /// The append in flight passed [`APPEND_STALL_MS`]: new changes are refused at once
    /// (503 with `Retry-After`) until it returns, so that nothing piles up in doubt behind it.
    fn stall(&mut self) {
        self.stalled = true;
        if self.service.refusing_changes().is_none() {
            tracing::warn!(
                stall_ms = APPEND_STALL_MS,
                "the journal's append stalls: refusing changes until it returns"
            );
            self.refuse_changes(Some(stall_reason()));
        }
    }

    /// Nothing of the failed group, nor of the group applied after it, is acknowledged;
    /// the journal was cut back to its last durable record. Go back to the durable state
    /// once (read back with the failed append, off this task), then refuse changes
    /// (reads go on) until the journal takes writes again: a full disk costs one reload
    /// per episode, not one per batch. A wedged journal, or a fenced one with nowhere to
    /// forward to, ends the process ([`Owner::end_if_lost`]).
    fn append_failed(&mut self, failed: Group, error: std::io::Error, reloaded: Option<Result<Engine, String>>) {
        let journal = self.journal.as_mut().expect("the append returned the journal");
        let reason = match (journal.fenced(), journal.wedged()) {
            (Some(why), _) => {
                self.readiness.lost.store(true, Ordering::Relaxed);
                format!("this process no longer owns the journal ({why}); restart it to serve changes")
            }
            (None, Some(why)) => format!(
                "the journal cannot be written and this process cannot continue ({why}); it stops so that a restart continues from what is durable"
            ),
            (None, None) => {
                format!("the journal cannot be written ({error}); retrying every {} s", PROBE_INTERVAL.as_secs())
            }
        };
        tracing::error!(%error, %reason, "journal append failed: answering 503 to changes and going back to the durable state");
        match reloaded {
            Some(Ok(engine)) => self.service.replace_engine(engine),
            Some(Err(why)) => {
                tracing::error!(%why, "cannot reload the durable state; changes stay refused");
                self.stale = true;
            }
            None => self.stale = true,
        }
        self.refuse_changes(Some(reason));
        self.end_if_lost();
        // The answers saw changes that are not durable: each request is answered again
        // from the durable state (its changes now refused, 503; its reads served), or 503
        // when that state could not be read back. Their deliveries are dropped (the
        // durable state hands out its own).
        let later = std::mem::take(&mut self.pending);
        for group in [failed, later] {
            for answer in group.answers {
                let response = match answer.request {
                    Some(request) if !self.stale => self.answer_again(&request),
                    _ => journal_unavailable(),
                };
                let _ = answer.reply.send(response);
            }
            for id in group.tests {
                if let Some((reply, request)) = self.waiting_tests.remove(&id) {
                    let response = if self.stale { journal_unavailable() } else { self.answer_again(&request) };
                    let _ = reply.send(response);
                }
            }
        }
        let _ = self.service.drain_journal();
        while self.service.poll_effect().is_some() {}
        while self.service.poll_event().is_some() {}
    }

    /// A request answered from the durable state while changes are refused.
    fn answer_again(&mut self, request: &http::Request<Bytes>) -> http::Response<Bytes> {
        let digest = request.extensions().get::<KeyDigest>().copied();
        match self.service.handle_admitted(self.clock.now(), request, digest) {
            Outcome::Respond(response) => response,
            Outcome::AwaitDelivery(_) => unavailable(),
        }
    }

    /// While changes are refused after a failed append: probes the journal for room
    /// (before each batch, and every [`PROBE_INTERVAL`] without one), reading the
    /// durable state back with it when the engine is stale. Waits at most
    /// [`PROBE_WAIT`]: a slower probe goes on without this task ([`Owner::probed`]).
    async fn probe_if_refusing(&mut self) {
        if self.service.refusing_changes().is_none() || self.appending.is_some() || self.probing.is_some() {
            return;
        }
        let Some(journal) = self.journal.take() else { return };
        if journal.wedged().is_some() {
            self.journal = Some(journal);
            self.end_if_lost();
            return;
        }
        let stale = self.stale;
        let work = move |journal: &mut dyn JournalSink| {
            let probed = journal.probe();
            let reloaded = (probed.is_ok() && stale).then(|| journal.reload());
            (probed, reloaded)
        };
        if !journal.blocks() {
            let mut journal = journal;
            let (probed, reloaded) = work(journal.as_mut());
            self.probed((journal, probed, reloaded));
            return;
        }
        let mut task = tokio::task::spawn_blocking(move || {
            let mut journal = journal;
            let (probed, reloaded) = work(journal.as_mut());
            (journal, probed, reloaded)
        });
        match tokio::time::timeout(PROBE_WAIT, &mut task).await {
            Ok(joined) => self.probed(joined.expect("a journal probe does not panic")),
            Err(_) => self.probing = Some(task),
        }
    }

    /// A probe's answer: changes accepted again when the journal takes writes and the
    /// durable state is in the engine; the process ends when the journal was lost.
    fn probed(&mut self, (journal, probed, reloaded): ProbeDone) {
        self.journal = Some(journal);
        if let Some(why) = self.journal.as_ref().and_then(|journal| journal.fenced()) {
            self.readiness.lost.store(true, Ordering::Relaxed);
            self.refuse_changes(Some(format!(
                "this process no longer owns the journal ({why}); restart it to serve changes"
            )));
            self.end_if_lost();
            return;
        }
        self.end_if_lost();
        if let Err(error) = &probed {
            tracing::debug!(%error, "the journal does not take writes yet");
            return;
        }
        match reloaded {
            Some(Ok(engine)) => {
                self.service.replace_engine(engine);
                self.stale = false;
            }
            Some(Err(why)) => {
                tracing::warn!(%why, "cannot reload the durable state yet; changes stay refused");
                return;
            }
            None => {}
        }
        if self.stale {
            return;
        }
        tracing::info!("the journal takes writes again: changes are accepted");
        self.refuse_changes(None);
        // Outcomes of deliveries that came back meanwhile were not recorded: hand
        // the deliveries in flight out again (receivers de-duplicate).
        self.service.engine_mut().restart();
    }
}

/// Why changes are refused while an append stalls.
fn stall_reason() -> String {
    format!("the journal has not confirmed an append for {APPEND_STALL_MS} ms (the store or the disk stalls)")
}

/// 503 for a request that waited its whole deadline for the journal.
fn journal_late(deadline: Duration) -> http::Response<Bytes> {
    let mut error = ApiError::new(
        ErrorCode::ServiceUnavailable,
        format!(
            "the journal did not confirm this request within {} ms (the store or the disk stalls); a change it made \
             may still become durable: retry with the same Idempotency-Key",
            deadline.as_millis()
        ),
    );
    error.retry_after_secs = Some(JOURNAL_RETRY_AFTER_S);
    error_response(error)
}

/// 503 with `Retry-After` for a request whose answer cannot be given from a durable state.
fn journal_unavailable() -> http::Response<Bytes> {
    let mut error = ApiError::new(
        ErrorCode::ServiceUnavailable,
        "the journal cannot take changes now; nothing of this request was acknowledged",
    );
    error.retry_after_secs = Some(JOURNAL_RETRY_AFTER_S);
    error_response(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::log_label;
    use esim_store::journal::SnapshotWritten;

    #[test]
    fn new_request_ids_are_16_hex_digits_counting_up() {
        let headers = http::HeaderMap::new();
        let (first, second) = (super::request_id(&headers), super::request_id(&headers));
        let number = |id: &str| {
            let hex = id.strip_prefix("req_").expect("req_ first");
            assert!(hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{id}");
            u64::from_str_radix(hex, 16).unwrap()
        };
        // Other tests of this binary may take ids in between, never this many.
        let step = number(&second).wrapping_sub(number(&first));
        assert!((1..1_000).contains(&step), "{first} then {second}");
    }

    #[test]
    fn api_keys_in_paths_are_never_logged() {
        let key = "rsk_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in
            [format!("/admin/v1/keys/{key}"), format!("//admin/v1/keys/{key}"), format!("/admin/v1/keys/{key}/x")]
        {
            for method in ["DELETE", "GET"] {
                let logged = log_label(method, &path);
                assert!(!logged.contains(key) && !logged.contains("rsk_"), "{logged}");
            }
        }
        assert_eq!(log_label("DELETE", &format!("//admin/v1/keys/{key}")), "/admin/v1/keys/{api_key}");
        assert_eq!(log_label("POST", "/api/v2/reseller/esim/89/fund"), "/api/v2/reseller/esim/{iccid}/fund");
    }

    /// A journal that keeps whom it is to tell of the snapshots its own thread writes.
    struct Listened(Arc<Mutex<Option<SnapshotWritten>>>);

    impl JournalSink for Listened {
        fn append(&mut self, _entries: &[crate::JournalEntry]) -> std::io::Result<()> {
            Ok(())
        }
        fn reload(&mut self) -> Result<Engine, String> {
            Err("nothing to reload".into())
        }
        fn blocks(&self) -> bool {
            false
        }
        fn on_snapshot_written(&mut self, written: SnapshotWritten) {
            *self.0.lock().unwrap() = Some(written);
        }
    }

    /// `esim_snapshots_written_total` as `GET /metrics` shows it (0 before the first).
    fn snapshots_written() -> u64 {
        let text = crate::metrics::handle().render();
        let line = text.lines().find(|line| line.starts_with(crate::metrics::SNAPSHOTS_WRITTEN));
        line.and_then(|line| line.rsplit(' ').next()?.parse().ok()).unwrap_or(0)
    }

    /// The store does not know the shell's metrics: the owner task's start tells its
    /// journal to count each snapshot the journal's own thread writes there.
    #[tokio::test]
    async fn a_journal_tells_the_metrics_of_the_snapshots_its_thread_writes() {
        let told = Arc::new(Mutex::new(None));
        let engine = Engine::new(esim_engine::EngineConfig::default(), Millis::VIRTUAL_EPOCH);
        let service = Service::new(engine, "adm_x".into(), ClockMode::Virtual, crate::secrets::Secrets::seeded(1));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let journal = Box::new(Listened(told.clone()));
        let server = tokio::spawn(serve(listener, service, journal, ServerOptions::new(1, true), async {
            let _ = stopped.await;
        }));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let written = loop {
            if let Some(written) = told.lock().unwrap().clone() {
                break written;
            }
            assert!(std::time::Instant::now() < deadline, "the owner task never told its journal");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let before = snapshots_written();
        written();
        assert_eq!(snapshots_written(), before + 1);
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    }
}
