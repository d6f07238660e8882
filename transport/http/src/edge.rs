//! Connection-level guards: what bounds the server's descriptors, memory and CPU
//! whatever the clients do (with or without a key).
//!
//! - [`Acceptor`]: at most [`EdgeLimits::connections_max`] open connections (never more
//!   than the descriptor limit allows, less [`DESCRIPTOR_RESERVE`]). At the cap the
//!   server stops accepting: new clients wait in the kernel's listen backlog, which
//!   costs the server nothing. One client address ([`client_of`]) holds at most its
//!   share of the cap ([`address_share`]); a connection past it is accepted and closed
//!   at once (decision 216). Accept errors (`EMFILE` and the like) back off from
//!   [`ACCEPT_BACKOFF_MIN`] doubling to [`ACCEPT_BACKOFF_MAX`] and are logged at most
//!   once per [`ACCEPT_ERROR_LOG_INTERVAL`], with the count since the last line.
//! - [`first_byte`]: a connection that sends nothing within
//!   [`EdgeLimits::first_byte_timeout`] is closed before hyper sees it (hyper-util's
//!   protocol detection has no timeout of its own).
//! - [`IdleGuard`]: an IO wrapper that fails reads and writes once no request was in
//!   flight for the idle limit. Requests count, bytes do not: HTTP/2 PINGs and SETTINGS
//!   keep nothing open (decision 217). A request is in flight from its head until its
//!   response body was written ([`InFlightBody`]).
//! - [`EdgeLimits::connection_age_max`]: then the connection is closed gracefully
//!   (HTTP/2 GOAWAY; HTTP/1 closes after the answer in flight).
//! - [`BodyReader`]: reads a request body within [`crate::api::MAX_BODY_BYTES`] (413),
//!   [`EdgeLimits::body_read_timeout`] (408) and budgets of bytes held in request bodies:
//!   per connection, per client address, for requests whose credential is not verified
//!   here, and for all ([`EdgeLimits::body_memory_max_bytes`]); 503 with `Retry-After`
//!   when a share stays spent for [`BODY_BUDGET_WAIT`]. Only admitted requests' bodies
//!   are read at all (decision 215).
//! - [`ensure_retry_after`]: every 503 the service answers says when to retry.

use crate::api::error_response;
use bytes::{Buf, Bytes, BytesMut};
use esim_engine::{ApiError, ErrorCode};
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The request id header, taken from the client when usable and echoed in every answer.
pub const REQUEST_ID: &str = "x-request-id";
/// The longest client request id kept (a longer one is replaced by a new one).
pub const REQUEST_ID_MAX_CHARS: usize = 64;

/// Connections the kernel may queue before the acceptor takes them (capped by
/// `net.core.somaxconn`): above the connection cap, so that a burst filling the cap never
/// drops a new client's SYN, whose retry would wait a second.
pub const LISTEN_BACKLOG: u32 = 4_096;

/// Listens on `address` (each address it resolves to, in turn, as tokio's `bind` does)
/// with a queue of [`LISTEN_BACKLOG`] (tokio's `bind` queues 1,024).
pub async fn listen(address: &str) -> io::Result<TcpListener> {
    let mut last_error = None;
    for address in tokio::net::lookup_host(address).await? {
        let socket =
            if address.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(address) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on")))
}

/// Open connections at most (the default of `--max-connections`).
pub const CONNECTIONS_MAX: usize = 1_024;
/// Descriptors kept free of connections: webhook deliveries (a socket each, and one
/// for the name lookup), the journal and snapshot files, the listener, stdio and the
/// runtime's own.
pub const DESCRIPTOR_RESERVE: u64 = 2 * crate::sender::MAX_CONCURRENT_DELIVERIES as u64 + 32;
/// A new connection must send its first byte within this time.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight is closed after this long without a new
/// request (HTTP/1 keep-alive waits are cut sooner, by the header read timeout).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection is closed gracefully after this long, however busy (HTTP/2 GOAWAY):
/// no client keeps a place under the cap for good by sending a request now and then.
pub const CONNECTION_AGE_MAX: Duration = Duration::from_secs(10 * 60);
/// After that graceful close began, the requests in flight get this long to finish.
pub const CONNECTION_CLOSE_GRACE: Duration = Duration::from_secs(10);
/// Open connections at most from one client address (an IPv6 /64), when the cap leaves
/// room: see [`address_share`].
pub const CONNECTIONS_PER_ADDRESS_MAX: usize = 256;
/// A request body must arrive whole within this time from the start of its reading.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes held in request bodies at once, all connections together.
pub const BODY_MEMORY_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Bytes held in request bodies at once by one connection (its HTTP/2 streams share it).
pub const BODY_CONNECTION_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Bytes held in request bodies at once by one client address, all its connections.
pub const BODY_ADDRESS_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Bytes held at once in bodies of requests whose credential is not verified here (a
/// node forwarding a request for another node's shard checks a key's form only).
pub const BODY_UNVERIFIED_MAX_BYTES: usize = 8 * 1024 * 1024;
/// A refused request's unread body up to this size (declared) leaves an HTTP/1
/// connection open (hyper drains what already arrived); a larger or undeclared one
/// closes it, so that the server never reads it.
pub const UNREAD_BODY_KEEP_ALIVE_MAX_BYTES: u64 = 16 * 1024;
/// `Retry-After` of a 503 that names none of its own.
pub const RETRY_AFTER_DEFAULT_SECS: u64 = 1;
/// How long a request waits for its share of the body budget before a 503.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);
/// The `Retry-After` of that 503.
pub const BODY_BUDGET_RETRY_AFTER_SECS: u64 = 1;
/// First wait after a failed accept; it doubles on each failure in a row.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(1);
/// Longest wait after failed accepts.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Accept errors (and reaching the cap) are logged at most this often.
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// HTTP/1 read and write buffers at most per connection (hyper's default is ~400 KiB;
/// request heads above it answer 431).
pub const HTTP1_BUFFER_MAX_BYTES: usize = 64 * 1024;
/// HTTP/2 requests in flight at once per connection.
pub const HTTP2_STREAMS_MAX: u32 = 64;
/// HTTP/2 flow-control windows (per stream and per connection): what a client may send
/// before the server reads it, so what an HTTP/2 connection buffers at most.
pub const HTTP2_WINDOW_BYTES: u32 = 64 * 1024;
/// HTTP/2 request headers at most per request.
pub const HTTP2_HEADER_LIST_MAX_BYTES: u32 = 16 * 1024;

/// The limits, with the defaults above ([`EdgeLimits::default`]).
#[derive(Clone, Debug)]
pub struct EdgeLimits {
    /// Open connections at most (lowered to what the descriptor limit allows).
    pub connections_max: usize,
    /// Open connections at most per client address (lowered by [`address_share`]).
    pub connections_per_address_max: usize,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub connection_age_max: Duration,
    pub body_read_timeout: Duration,
    pub body_memory_max_bytes: usize,
    pub body_connection_max_bytes: usize,
    pub body_address_max_bytes: usize,
    pub body_unverified_max_bytes: usize,
}

impl Default for EdgeLimits {
    fn default() -> EdgeLimits {
        EdgeLimits {
            connections_max: CONNECTIONS_MAX,
            connections_per_address_max: CONNECTIONS_PER_ADDRESS_MAX,
            first_byte_timeout: FIRST_BYTE_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            connection_age_max: CONNECTION_AGE_MAX,
            body_read_timeout: BODY_READ_TIMEOUT,
            body_memory_max_bytes: BODY_MEMORY_MAX_BYTES,
            body_connection_max_bytes: BODY_CONNECTION_MAX_BYTES,
            body_address_max_bytes: BODY_ADDRESS_MAX_BYTES,
            body_unverified_max_bytes: BODY_UNVERIFIED_MAX_BYTES,
        }
    }
}

/// The soft `RLIMIT_NOFILE` of this process (`None`: unlimited or unknown).
pub fn descriptor_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The connection cap: `requested`, but never above the descriptor limit less
/// [`DESCRIPTOR_RESERVE`] (half the limit when it is that small), and at least 1.
pub fn connection_cap(requested: usize, descriptor_limit: Option<u64>) -> usize {
    let allowed = match descriptor_limit {
        Some(limit) => limit.saturating_sub(DESCRIPTOR_RESERVE).max(limit / 2),
        None => u64::MAX,
    };
    requested.min(usize::try_from(allowed).unwrap_or(usize::MAX)).max(1)
}

/// Rate-limits a repeated log line: [`RateLimitedLog::note`] says when to write one
/// and how many occurrences it stands for.
#[derive(Debug, Default)]
pub struct RateLimitedLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RateLimitedLog {
    /// Counts one occurrence at `now`; `Some(count)` when a line is due (the count
    /// includes this occurrence and every one since the last line).
    pub fn note(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        self.unlogged += 1;
        match self.last {
            Some(last) if now.duration_since(last) < interval => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.unlogged))
            }
        }
    }
}

/// Waits after failed accepts: from [`ACCEPT_BACKOFF_MIN`] doubling to
/// [`ACCEPT_BACKOFF_MAX`]; a success starts over.
#[derive(Debug, Default)]
pub struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    /// The wait after one more failure.
    pub fn failed(&mut self) -> Duration {
        let wait = self.next.unwrap_or(ACCEPT_BACKOFF_MIN);
        self.next = Some((wait * 2).min(ACCEPT_BACKOFF_MAX));
        wait
    }
    pub fn succeeded(&mut self) {
        self.next = None;
    }
}

/// The client a connection counts against: its IPv4 address, or the /64 prefix of its
/// IPv6 address (one subscriber's usual allocation; an IPv4-mapped address is IPv4).
pub fn client_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let segments = v6.segments();
                IpAddr::V6(Ipv6Addr::new(segments[0], segments[1], segments[2], segments[3], 0, 0, 0, 0))
            }
        },
    }
}

/// One client's share of the connection cap: `requested`, but never more than three
/// quarters of the cap, so that one client always leaves room for others (and at least 1).
pub fn address_share(requested: usize, cap: usize) -> usize {
    requested.min(cap - cap / 4).max(1)
}

/// The clients with open connections: how many each holds and its share of the body
/// budget. An entry lives while its client has a connection, so the map is bounded by
/// the connection cap.
pub struct Clients {
    open: Mutex<HashMap<IpAddr, (usize, Budget)>>,
    connections_max: usize,
    body_bytes: usize,
}

impl Clients {
    pub fn new(connections_max: usize, body_bytes: usize) -> Arc<Clients> {
        Arc::new(Clients { open: Mutex::new(HashMap::new()), connections_max, body_bytes })
    }

    /// A place for one more connection of `peer`'s client, or `None` past its share.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<ClientSlot> {
        let client = client_of(peer);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (count, bodies) = open.entry(client).or_insert_with(|| (0, Budget::new(self.body_bytes)));
        if *count >= self.connections_max {
            return None;
        }
        *count += 1;
        assert!(*count <= self.connections_max, "a client never holds more than its share");
        Some(ClientSlot { clients: self.clone(), client, bodies: bodies.clone() })
    }

    /// Connections open from `peer`'s client now.
    pub fn open_from(&self, peer: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(&client_of(peer)).map_or(0, |(count, _)| *count)
    }
}

/// A connection's place in its client's share; dropping it frees the place.
pub struct ClientSlot {
    clients: Arc<Clients>,
    client: IpAddr,
    /// The client's share of the body budget.
    bodies: Budget,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((count, _)) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// An open connection's place under the cap and in its client's share; dropping it
/// frees both. It also counts the connection in the open connections gauge of
/// `GET /metrics`.
pub struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    client: ClientSlot,
}

impl ConnectionSlot {
    fn new(permit: OwnedSemaphorePermit, client: ClientSlot) -> ConnectionSlot {
        crate::metrics::connection_opened();
        ConnectionSlot { _permit: permit, client }
    }

    /// The shares of the body budget this connection's requests draw on: its own (of
    /// `limits.body_connection_max_bytes`) and its client's.
    pub fn body_share(&self, limits: &EdgeLimits) -> BodyShare {
        BodyShare { connection: Budget::new(limits.body_connection_max_bytes), client: self.client.bodies.clone() }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        crate::metrics::connection_closed();
    }
}

/// Accepts connections under the cap and each client's share, backing off on errors.
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    cap: usize,
    clients: Arc<Clients>,
    backoff: Backoff,
    retry_at: Option<Instant>,
    errors: RateLimitedLog,
    at_cap: RateLimitedLog,
    over_share: RateLimitedLog,
}

impl Acceptor {
    pub fn new(listener: TcpListener, limits: &EdgeLimits) -> Acceptor {
        let limit = descriptor_limit();
        let cap = connection_cap(limits.connections_max, limit);
        if cap < limits.connections_max {
            tracing::warn!(
                requested = limits.connections_max,
                cap,
                descriptor_limit = limit,
                reserve = DESCRIPTOR_RESERVE,
                "the connection cap is lowered to fit the descriptor limit (raise it with ulimit -n)"
            );
        }
        let share = address_share(limits.connections_per_address_max, cap);
        Acceptor {
            listener,
            slots: Arc::new(Semaphore::new(cap)),
            cap,
            clients: Clients::new(share, limits.body_address_max_bytes),
            backoff: Backoff::default(),
            retry_at: None,
            errors: RateLimitedLog::default(),
            at_cap: RateLimitedLog::default(),
            over_share: RateLimitedLog::default(),
        }
    }

    /// The connection cap in force.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The next connection, with its slot. Cancel-safe (a `select!` branch): a
    /// cancelled call loses no connection and keeps the backoff. A connection past its
    /// client's share is closed here at once, before it holds anything (decision 216).
    pub async fn accept(&mut self) -> (TcpStream, SocketAddr, ConnectionSlot) {
        loop {
            if let Some(at) = self.retry_at {
                tokio::time::sleep_until(at).await;
                self.retry_at = None;
            }
            let slot = match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    if let Some(times) = self.at_cap.note(Instant::now(), ACCEPT_ERROR_LOG_INTERVAL) {
                        tracing::warn!(
                            cap = self.cap,
                            times,
                            "at the connection cap: new connections wait in the listen backlog"
                        );
                    }
                    self.slots.clone().acquire_owned().await.expect("the semaphore is never closed")
                }
            };
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    self.backoff.succeeded();
                    match self.clients.admit(peer.ip()) {
                        Some(client) => return (stream, peer, ConnectionSlot::new(slot, client)),
                        None => self.refuse_over_share(stream, peer),
                    }
                }
                Err(error) => {
                    let wait = self.backoff.failed();
                    self.retry_at = Some(Instant::now() + wait);
                    if let Some(errors) = self.errors.note(Instant::now(), ACCEPT_ERROR_LOG_INTERVAL) {
                        tracing::warn!(%error, errors, backoff_ms = wait.as_millis() as u64, "accept failed");
                    }
                }
            }
        }
    }

    /// Closes a connection past its client's share at once (no byte read or written).
    fn refuse_over_share(&mut self, stream: TcpStream, peer: SocketAddr) {
        drop(stream);
        if let Some(times) = self.over_share.note(Instant::now(), ACCEPT_ERROR_LOG_INTERVAL) {
            tracing::warn!(
                client = %client_of(peer.ip()),
                share = self.clients.connections_max,
                times,
                "a client is at its share of the connection cap: its new connections are closed at once"
            );
        }
    }
}

/// Waits for a connection's first byte (without consuming it): false when the
/// client sent nothing within `timeout`, closed, or failed.
pub async fn first_byte(stream: &TcpStream, timeout: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(timeout, stream.peek(&mut byte)).await, Ok(Ok(1..)))
}

/// What a connection's requests tell its [`IdleGuard`]: how many are in flight (their
/// handlers run), how many answers are being written, whether a request came at all,
/// and since when nothing moved. Bytes read tell it nothing: a client that only pings is
/// idle (decision 217); bytes written count only while an answer is being written.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    responding: AtomicUsize,
    started: AtomicBool,
    born: Instant,
    /// When a request's handler or the writing of its answer last ended, or a piece of an
    /// answer was last written, in microseconds after `born`.
    quiet_since_us: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            responding: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            born: Instant::now(),
            quiet_since_us: AtomicU64::new(0),
        }
    }

    /// A request begins: the connection is not idle until the returned guard is dropped
    /// (when its handler ends or is cancelled; its answer then goes on in an
    /// [`InFlightBody`]).
    ///
    /// The connection's quiet time is not moved here: it is read only while no request
    /// is in flight, and this request's end moves it on (later) before that. (This runs
    /// on the connection's task, as the [`IdleGuard`] does: hyper calls the service
    /// there, for HTTP/2 streams too.)
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.store(true, Ordering::Release);
        InFlight(Some(self.clone()))
    }

    // `#[inline]`: called from `IdleGuard<T>`'s and `InFlightBody<B>`'s code, compiled
    // where they are used.
    #[inline]
    fn mark_quiet_now(&self) {
        let since = Instant::now().saturating_duration_since(self.born).as_micros();
        self.quiet_since_us.fetch_max(u64::try_from(since).unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    /// A request's handler ended (or was cancelled).
    #[inline]
    fn end_request(&self) {
        self.mark_quiet_now();
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    #[inline]
    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    #[inline]
    fn quiet_since(&self) -> Instant {
        self.born + Duration::from_micros(self.quiet_since_us.load(Ordering::Acquire))
    }
}

/// One request in flight on a connection (see [`Activity::begin`]); `None` once it
/// became a [`Responding`] (which took its reference to the activity).
#[derive(Debug)]
pub struct InFlight(Option<Arc<Activity>>);

impl InFlight {
    /// The handler answered: the answer is being written from now on.
    fn into_responding(mut self) -> Responding {
        let activity = self.0.take().expect("a request in flight holds its connection's activity");
        activity.responding.fetch_add(1, Ordering::AcqRel);
        activity.end_request();
        Responding(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(activity) = &self.0 {
            activity.end_request();
        }
    }
}

/// An answer being written on a connection (see [`InFlightBody`]).
#[derive(Debug)]
struct Responding(Arc<Activity>);

impl Drop for Responding {
    #[inline]
    fn drop(&mut self) {
        self.0.mark_quiet_now();
        self.0.responding.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body is handed to hyper in pieces of at most this size, so that hyper
/// takes the next one only as the client takes the answer (hyper buffers a few).
pub const RESPONSE_PIECE_BYTES: usize = 64 * 1024;

/// A response body being written: while it is, bytes written count as activity (a
/// client taking a long answer is not idle; one that stops reading it is, after the
/// idle limit). It hands its data on in pieces of [`RESPONSE_PIECE_BYTES`], so that it
/// is dropped (and the answer counts as written) only when little of it is left.
pub struct InFlightBody<B> {
    inner: B,
    rest: Bytes,
    _responding: Responding,
}

impl<B> InFlightBody<B> {
    pub fn new(inner: B, in_flight: InFlight) -> InFlightBody<B> {
        InFlightBody { inner, rest: Bytes::new(), _responding: in_flight.into_responding() }
    }
}

impl<B: hyper::body::Body<Data = Bytes> + Unpin> hyper::body::Body for InFlightBody<B> {
    type Data = Bytes;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if this.rest.is_empty() {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.rest = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                other => return other,
            }
        }
        let piece = this.rest.split_to(this.rest.len().min(RESPONSE_PIECE_BYTES));
        Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }
    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(inner.lower() + rest);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}

/// An IO that fails a read or write with `TimedOut` once no request was in flight for
/// the idle limit. The limit is the first byte timeout until the first request arrives
/// (a client that sends part of the HTTP/2 preface, or only SETTINGS and PINGs, and
/// stops), the idle timeout after. One timer serves reads and writes: hyper polls both
/// from the connection's one task.
pub struct IdleGuard<T> {
    inner: T,
    activity: Arc<Activity>,
    before_first_request: Duration,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleGuard<T> {
    pub fn new(inner: T, limits: &EdgeLimits) -> (IdleGuard<T>, Arc<Activity>) {
        let activity = Arc::new(Activity::new());
        let guard = IdleGuard {
            inner,
            activity: activity.clone(),
            before_first_request: limits.first_byte_timeout,
            idle: limits.idle_timeout,
            timer: Box::pin(tokio::time::sleep_until(activity.born + limits.first_byte_timeout)),
        };
        (guard, activity)
    }

    /// When the connection counts as idle too long, if no request begins before.
    fn deadline(&self) -> Instant {
        if self.activity.busy() {
            // Looked at again then (a request's end on another task wakes nothing here).
            return Instant::now() + self.idle;
        }
        let limit = if self.activity.started.load(Ordering::Acquire) { self.idle } else { self.before_first_request };
        self.activity.quiet_since() + limit
    }

    /// `Err` once the connection is idle too long; else the timer is armed to wake the
    /// connection's task then.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            let deadline = self.deadline();
            // The timer may stay at an earlier deadline while requests move it on: when
            // it fires it is moved to the current one (one reset per idle period).
            if self.timer.deadline() > deadline {
                self.timer.as_mut().reset(deadline);
            }
            match self.timer.as_mut().poll(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(()) if !self.activity.busy() && Instant::now() >= deadline => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "connection idle too long"))
                }
                Poll::Ready(()) => {
                    self.timer.as_mut().reset(deadline.max(Instant::now()));
                    continue;
                }
            }
        }
    }

    /// After a read or write that moved bytes: `Err` when the connection is idle too
    /// long all the same (bytes without requests keep nothing open).
    fn still_wanted(&self) -> io::Result<()> {
        if !self.activity.busy() && Instant::now() >= self.deadline() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "connection idle too long"));
        }
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleGuard<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.still_wanted()?;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match this.poll_idle(cx) {
                Ok(()) => Poll::Pending,
                Err(error) => Poll::Ready(Err(error)),
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> IdleGuard<T> {
    fn after_write(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(written)) => {
                if written > 0 && self.activity.responding.load(Ordering::Acquire) > 0 {
                    self.activity.mark_quiet_now();
                }
                Poll::Ready(Ok(written))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => match self.poll_idle(cx) {
                Ok(()) => Poll::Pending,
                Err(error) => Poll::Ready(Err(error)),
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleGuard<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        this.after_write(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, data);
        this.after_write(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A body read whole, with its shares of the budgets (held until this is dropped, so a
/// body waiting for the owner task still counts).
#[derive(Debug)]
pub struct HeldBody {
    pub bytes: Bytes,
    _shares: Vec<OwnedSemaphorePermit>,
}

/// Largest declared body that is read and dropped before its 413 (see
/// [`BodyReader::read`]); larger ones are refused without reading.
pub const OVERSIZE_DISCARD_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// A budget of body bytes and its size (a request never asks one for more than it has).
#[derive(Clone, Debug)]
struct Budget {
    bytes: Arc<Semaphore>,
    size: usize,
}

impl Budget {
    fn new(size: usize) -> Budget {
        let size = size.clamp(1, Semaphore::MAX_PERMITS);
        Budget { bytes: Arc::new(Semaphore::new(size)), size }
    }
}

/// The shares of the body budget one connection's requests draw on: the connection's
/// own and its client address's (see [`ConnectionSlot::body_share`]).
#[derive(Clone, Debug)]
pub struct BodyShare {
    connection: Budget,
    client: Budget,
}

impl BodyShare {
    /// Shares of their own (a connection whose client holds no other).
    pub fn new(connection_bytes: usize, client_bytes: usize) -> BodyShare {
        BodyShare { connection: Budget::new(connection_bytes), client: Budget::new(client_bytes) }
    }
}

/// Whether a request's credential was verified here before its body is read: a body of
/// an unverified one also draws on [`EdgeLimits::body_unverified_max_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    Verified,
    Unverified,
}

/// Reads request bodies within the size limit, the read timeout and the budgets.
#[derive(Clone, Debug)]
pub struct BodyReader {
    budget: Budget,
    unverified: Budget,
    read_timeout: Duration,
    budget_wait: Duration,
}

impl BodyReader {
    pub fn new(limits: &EdgeLimits) -> BodyReader {
        BodyReader {
            budget: Budget::new(limits.body_memory_max_bytes),
            unverified: Budget::new(limits.body_unverified_max_bytes),
            read_timeout: limits.body_read_timeout,
            budget_wait: BODY_BUDGET_WAIT,
        }
    }

    /// Bytes of the global budget free now.
    pub fn budget_free(&self) -> usize {
        self.budget.bytes.available_permits()
    }

    /// `need` bytes of each budget the body draws on, narrowest first (the
    /// connection's, the client's, the unverified requests', all): `None` when they are
    /// not all free within [`BODY_BUDGET_WAIT`]. Always taken in this order, so two
    /// readers never wait on each other crosswise.
    async fn take_shares(
        &self,
        need: usize,
        share: &BodyShare,
        credential: Credential,
    ) -> Option<Vec<OwnedSemaphorePermit>> {
        let mut budgets = vec![&share.connection, &share.client];
        if credential == Credential::Unverified {
            budgets.push(&self.unverified);
        }
        budgets.push(&self.budget);
        let take = async {
            let mut held = Vec::with_capacity(budgets.len());
            for budget in budgets {
                let bytes = u32::try_from(need.clamp(1, budget.size)).unwrap_or(u32::MAX);
                held.push(budget.bytes.clone().acquire_many_owned(bytes).await.expect("a budget is never closed"));
            }
            held
        };
        tokio::time::timeout(self.budget_wait, take).await.ok()
    }

    /// Reads `body` whole: at most `limit` bytes (413 above, before reading when the
    /// declared length says so), within the read timeout (408), once its shares of the
    /// budgets are free (the declared length, or `limit` when unknown; 503 with
    /// `Retry-After` after [`BODY_BUDGET_WAIT`]). `Err` is the response to send.
    pub async fn read<B>(
        &self,
        body: B,
        limit: usize,
        share: &BodyShare,
        credential: Credential,
    ) -> Result<HeldBody, http::Response<Bytes>>
    where
        B: hyper::body::Body + Unpin,
        B::Error: std::fmt::Display,
    {
        let hint = body.size_hint();
        let too_large =
            || error_response(ApiError::new(ErrorCode::PayloadTooLarge, format!("the body exceeds {limit} bytes")));
        if hint.lower() > limit as u64 {
            // A body a little over the limit is read and dropped (holding nothing) before
            // the 413, so that a client still writing it gets the answer rather than a
            // reset connection; a far larger one is refused at once.
            if hint.lower() <= OVERSIZE_DISCARD_MAX_BYTES {
                let mut body = body;
                let discard = async { while let Some(Ok(_)) = body.frame().await {} };
                let _ = tokio::time::timeout(self.read_timeout, discard).await;
            }
            return Err(too_large());
        }
        if hint.exact() == Some(0) || body.is_end_stream() {
            return Ok(HeldBody { bytes: Bytes::new(), _shares: Vec::new() });
        }
        let expected = hint.upper().map_or(limit, |upper| upper.min(limit as u64) as usize);
        let Some(mut shares) = self.take_shares(expected, share, credential).await else {
            let mut error = ApiError::new(
                ErrorCode::ServiceUnavailable,
                "too many request bodies are being received at once; retry shortly",
            );
            error.retry_after_secs = Some(BODY_BUDGET_RETRY_AFTER_SECS);
            return Err(error_response(error));
        };
        let bytes = match tokio::time::timeout(self.read_timeout, collect(body, expected, limit)).await {
            Ok(read) => read?,
            Err(_) => {
                return Err(error_response(ApiError::new(
                    ErrorCode::RequestTimeout,
                    format!("the request body did not arrive within {} s", self.read_timeout.as_secs()),
                )))
            }
        };
        // Keep only the shares the body really holds.
        for held in &mut shares {
            if bytes.len() < held.num_permits() {
                drop(held.split(held.num_permits() - bytes.len().max(1)));
            }
        }
        Ok(HeldBody { bytes, _shares: shares })
    }
}

/// A body's bytes, at most `limit` (413 past it).
async fn collect<B>(mut body: B, expected: usize, limit: usize) -> Result<Bytes, http::Response<Bytes>>
where
    B: hyper::body::Body + Unpin,
    B::Error: std::fmt::Display,
{
    let mut bytes = BytesMut::with_capacity(expected);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            error_response(ApiError::validation(format!("the request body could not be read: {error}")))
        })?;
        if let Ok(mut data) = frame.into_data() {
            if bytes.len() + data.remaining() > limit {
                return Err(error_response(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    format!("the body exceeds {limit} bytes"),
                )));
            }
            while data.has_remaining() {
                let chunk = data.chunk();
                bytes.extend_from_slice(chunk);
                let read = chunk.len();
                data.advance(read);
            }
        }
    }
    Ok(bytes.freeze())
}

/// Whether answering a request without reading its body must close an HTTP/1
/// connection: the body did not end and is undeclared or declared larger than
/// [`UNREAD_BODY_KEEP_ALIVE_MAX_BYTES`] (hyper drains a small one that already arrived
/// and closes the connection itself when it cannot). HTTP/2 resets the stream instead.
pub fn unread_body_closes<B: hyper::body::Body>(version: http::Version, body: &B) -> bool {
    let http1 = matches!(version, http::Version::HTTP_09 | http::Version::HTTP_10 | http::Version::HTTP_11);
    let hint = body.size_hint();
    http1 && !body.is_end_stream() && hint.upper().is_none_or(|upper| upper > UNREAD_BODY_KEEP_ALIVE_MAX_BYTES)
}

/// Gives a 503 that names no `Retry-After` the default one
/// ([`RETRY_AFTER_DEFAULT_SECS`]): every 503 the service answers passes here (the
/// server's request handler), so every one says when to retry.
pub fn ensure_retry_after<B>(response: &mut http::Response<B>) {
    if response.status() == http::StatusCode::SERVICE_UNAVAILABLE
        && !response.headers().contains_key(http::header::RETRY_AFTER)
    {
        response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(RETRY_AFTER_DEFAULT_SECS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[test]
    fn the_cap_fits_the_descriptor_limit() {
        assert_eq!(connection_cap(1_024, None), 1_024);
        assert_eq!(connection_cap(1_024, Some(1_000_000)), 1_024);
        assert_eq!(connection_cap(1_024, Some(1_024)), 1_024 - DESCRIPTOR_RESERVE as usize);
        assert_eq!(connection_cap(1_024, Some(300)), 150, "half the limit when the reserve would leave less");
        assert_eq!(connection_cap(1_024, Some(100)), 50);
        assert_eq!(connection_cap(0, Some(100)), 1);
        assert_eq!(connection_cap(1_024, Some(0)), 1);
    }

    #[test]
    fn backoff_doubles_to_a_second_and_starts_over() {
        let mut backoff = Backoff::default();
        let waits: Vec<u128> = (0..13).map(|_| backoff.failed().as_millis()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000, 1000]);
        backoff.succeeded();
        assert_eq!(backoff.failed(), ACCEPT_BACKOFF_MIN);
    }

    #[test]
    fn a_repeated_line_is_written_once_a_second_with_its_count() {
        let mut log = RateLimitedLog::default();
        let start = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(log.note(start, second), Some(1));
        let written: Vec<Option<u64>> =
            (1..=2_000).map(|i| log.note(start + Duration::from_millis(i), second)).collect();
        assert_eq!(written.iter().flatten().collect::<Vec<_>>(), [&1_000, &1_000]);
    }

    /// A body that yields `chunks` and then stalls forever (or ends).
    struct TestBody {
        chunks: Vec<Bytes>,
        declared: Option<u64>,
        stall: bool,
    }

    impl hyper::body::Body for TestBody {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            if self.chunks.is_empty() {
                return if self.stall { Poll::Pending } else { Poll::Ready(None) };
            }
            let chunk = self.chunks.remove(0);
            Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))))
        }
        fn size_hint(&self) -> hyper::body::SizeHint {
            self.declared.map(hyper::body::SizeHint::with_exact).unwrap_or_default()
        }
    }

    fn reader(budget: usize, timeout_ms: u64) -> BodyReader {
        BodyReader::new(&EdgeLimits {
            body_memory_max_bytes: budget,
            body_read_timeout: Duration::from_millis(timeout_ms),
            ..EdgeLimits::default()
        })
    }

    /// A connection's reads, its shares of its own.
    trait ReadAll {
        async fn read_all<B>(&self, body: B, limit: usize) -> Result<HeldBody, http::Response<Bytes>>
        where
            B: hyper::body::Body + Unpin,
            B::Error: std::fmt::Display;
    }

    impl ReadAll for BodyReader {
        async fn read_all<B>(&self, body: B, limit: usize) -> Result<HeldBody, http::Response<Bytes>>
        where
            B: hyper::body::Body + Unpin,
            B::Error: std::fmt::Display,
        {
            self.read(body, limit, &BodyShare::new(1 << 20, 1 << 20), Credential::Verified).await
        }
    }

    fn status(result: Result<HeldBody, http::Response<Bytes>>) -> u16 {
        match result {
            Ok(_) => 200,
            Err(response) => response.status().as_u16(),
        }
    }

    #[tokio::test]
    async fn bodies_are_read_within_their_limits() {
        let bodies = reader(1_000, 5_000);
        let held = bodies.read_all(Full::new(Bytes::from_static(b"{\"a\":1}")), 100).await.unwrap();
        assert_eq!(&held.bytes[..], b"{\"a\":1}");
        assert_eq!(bodies.budget_free(), 1_000 - 7, "a held body keeps its share");
        drop(held);
        assert_eq!(bodies.budget_free(), 1_000);
        // Declared too large: refused before reading.
        assert_eq!(status(bodies.read_all(Full::new(Bytes::from(vec![0u8; 101])), 100).await), 413);
        // Undeclared (chunked) and too large: refused while reading.
        let chunked = TestBody { chunks: vec![Bytes::from(vec![0u8; 60]); 2], declared: None, stall: false };
        assert_eq!(status(bodies.read_all(chunked, 100).await), 413);
        // Undeclared and small: the share shrinks to the real size.
        let chunked = TestBody { chunks: vec![Bytes::from_static(b"abc"); 2], declared: None, stall: false };
        let held = bodies.read_all(chunked, 100).await.unwrap();
        assert_eq!((&held.bytes[..], bodies.budget_free()), (&b"abcabc"[..], 1_000 - 6));
        drop(held);
        assert_eq!(bodies.budget_free(), 1_000);
        let empty = bodies.read_all(Full::new(Bytes::new()), 100).await.unwrap();
        assert!(empty.bytes.is_empty());
    }

    #[tokio::test]
    async fn a_stalled_body_times_out_with_408_and_frees_its_share() {
        let bodies = reader(1_000, 50);
        let stalled = TestBody { chunks: vec![Bytes::from_static(b"abc")], declared: Some(10), stall: true };
        let response = bodies.read_all(stalled, 100).await.unwrap_err();
        assert_eq!(response.status().as_u16(), 408);
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["code"], "REQUEST_TIMEOUT", "{body}");
        assert_eq!(bodies.budget_free(), 1_000);
    }

    #[tokio::test]
    async fn a_spent_budget_answers_503_with_retry_after() {
        let bodies = reader(100, 5_000);
        let held = bodies.read_all(Full::new(Bytes::from(vec![1u8; 80])), 100).await.unwrap();
        let started = std::time::Instant::now();
        let response = bodies.read_all(Full::new(Bytes::from(vec![1u8; 30])), 100).await.unwrap_err();
        assert!(started.elapsed() >= BODY_BUDGET_WAIT);
        assert_eq!(response.status().as_u16(), 503);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
        // A body that fits what is left goes through at once.
        assert!(bodies.read_all(Full::new(Bytes::from(vec![1u8; 20])), 100).await.is_ok());
        drop(held);
        assert!(bodies.read_all(Full::new(Bytes::from(vec![1u8; 30])), 100).await.is_ok());
    }

    #[tokio::test]
    async fn an_idle_connection_fails_its_read_but_not_while_a_request_is_in_flight() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = EdgeLimits {
            first_byte_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(200),
            ..EdgeLimits::default()
        };
        // Before any request: the shorter limit.
        let (near, _far) = tokio::io::duplex(64);
        let (mut guarded, _activity) = IdleGuard::new(near, &limits);
        let started = Instant::now();
        let error = guarded.read(&mut [0u8; 8]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_millis(190), "{:?}", started.elapsed());

        // A request in flight for longer than the idle limit: the read waits.
        let (near, mut far) = tokio::io::duplex(64);
        let (mut guarded, activity) = IdleGuard::new(near, &limits);
        let in_flight = activity.begin();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            drop(in_flight);
            far.write_all(b"x").await.unwrap();
            far
        });
        let mut byte = [0u8; 1];
        assert_eq!(guarded.read(&mut byte).await.unwrap(), 1, "not cut while the request ran");
        let _far = writer.await.unwrap();
        // Then idle: cut after the idle limit.
        let started = Instant::now();
        assert_eq!(guarded.read(&mut byte).await.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(190) && waited < Duration::from_millis(400), "{waited:?}");
    }

    /// Bytes without requests (HTTP/2 PINGs and SETTINGS) keep no connection open.
    #[tokio::test]
    async fn bytes_without_requests_do_not_keep_a_connection_open() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = EdgeLimits {
            first_byte_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
            ..EdgeLimits::default()
        };
        let (near, mut far) = tokio::io::duplex(1024);
        let (mut guarded, activity) = IdleGuard::new(near, &limits);
        drop(activity.begin());
        let pinger = tokio::spawn(async move {
            // A "ping" every 50 ms, far more often than the idle limit.
            while far.write_all(b"ping").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let started = Instant::now();
        let mut buffer = [0u8; 64];
        let cut = loop {
            match guarded.read(&mut buffer).await {
                Ok(0) => panic!("the pinger closed"),
                Ok(_) => assert!(started.elapsed() < Duration::from_secs(2), "pings kept the connection open"),
                Err(error) => break error,
            }
        };
        assert_eq!(cut.kind(), io::ErrorKind::TimedOut);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(290) && waited < Duration::from_millis(700), "{waited:?}");
        pinger.abort();
    }

    #[test]
    fn clients_are_addresses_or_ipv6_prefixes_and_hold_a_share() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(client_of(v4), v4);
        assert_eq!(client_of("::ffff:192.0.2.7".parse().unwrap()), v4);
        let prefix: IpAddr = "2001:db8:1:2::".parse().unwrap();
        assert_eq!(client_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap()), prefix);
        assert_eq!(address_share(256, 1_024), 256);
        assert_eq!(address_share(256, 150), 113, "three quarters of a lowered cap");
        assert_eq!(address_share(256, 1), 1);
        let clients = Clients::new(2, 1_000);
        let (one, two) = (clients.admit(v4).unwrap(), clients.admit(v4).unwrap());
        assert!(clients.admit(v4).is_none(), "past the share");
        assert!(clients.admit("192.0.2.8".parse().unwrap()).is_some(), "another client has its own share");
        drop(one);
        let three = clients.admit(v4).expect("a place freed");
        drop((two, three));
        assert_eq!(clients.open_from(v4), 0);
        assert!(clients.open.lock().unwrap().is_empty(), "no entry outlives its connections");
    }

    #[tokio::test]
    async fn a_connection_and_a_client_hold_their_share_of_the_budget_only() {
        let bodies = reader(1_000, 5_000);
        let body = |n: usize| Full::new(Bytes::from(vec![1u8; n]));
        // One connection: 300 bytes at most, whatever the budget has free.
        let connection = BodyShare::new(300, 600);
        let held = bodies.read(body(250), 1_000, &connection, Credential::Verified).await.unwrap();
        let refused = bodies.read(body(100), 1_000, &connection, Credential::Verified).await.unwrap_err();
        assert_eq!(
            (refused.status().as_u16(), &refused.headers()[http::header::RETRY_AFTER]),
            (503, &"1".parse::<http::HeaderValue>().unwrap())
        );
        // Another connection of the same client: the client's 600 less the 250 held.
        let sibling = BodyShare { connection: Budget::new(300), client: connection.client.clone() };
        assert!(bodies.read(body(300), 1_000, &sibling, Credential::Verified).await.is_ok());
        let _sibling_held = bodies.read(body(300), 1_000, &sibling, Credential::Verified).await.unwrap();
        assert_eq!(status(bodies.read(body(100), 1_000, &sibling, Credential::Verified).await), 503);
        // Another client is not held back by this one.
        assert!(bodies.read(body(300), 1_000, &BodyShare::new(300, 600), Credential::Verified).await.is_ok());
        drop(held);
        assert_eq!(bodies.budget_free(), 1_000 - 300);
    }

    #[tokio::test]
    async fn unverified_bodies_share_a_bound_of_their_own() {
        let bodies = BodyReader::new(&EdgeLimits {
            body_memory_max_bytes: 1_000,
            body_unverified_max_bytes: 200,
            ..EdgeLimits::default()
        });
        let body = |n: usize| Full::new(Bytes::from(vec![1u8; n]));
        let share = || BodyShare::new(1_000, 1_000);
        let _held = bodies.read(body(150), 1_000, &share(), Credential::Unverified).await.unwrap();
        assert_eq!(status(bodies.read(body(100), 1_000, &share(), Credential::Unverified).await), 503);
        assert!(bodies.read(body(500), 1_000, &share(), Credential::Verified).await.is_ok());
    }

    #[test]
    fn every_503_says_when_to_retry() {
        let mut bare = http::Response::builder().status(503).body(()).unwrap();
        ensure_retry_after(&mut bare);
        assert_eq!(bare.headers()[http::header::RETRY_AFTER], "1");
        let mut own = http::Response::builder().status(503).header("retry-after", "7").body(()).unwrap();
        ensure_retry_after(&mut own);
        assert_eq!(own.headers()[http::header::RETRY_AFTER], "7", "a 503's own Retry-After stays");
        let mut ok = http::Response::builder().status(200).body(()).unwrap();
        ensure_retry_after(&mut ok);
        assert!(!ok.headers().contains_key(http::header::RETRY_AFTER));
    }

    #[test]
    fn an_unread_large_or_undeclared_body_closes_an_http1_connection() {
        let small = Full::new(Bytes::from(vec![0u8; 100]));
        let large = TestBody { chunks: vec![], declared: Some(1 << 20), stall: true };
        let chunked = TestBody { chunks: vec![Bytes::from_static(b"x")], declared: None, stall: true };
        let v11 = http::Version::HTTP_11;
        assert!(!unread_body_closes(v11, &small));
        assert!(!unread_body_closes(v11, &Full::new(Bytes::new())));
        assert!(unread_body_closes(v11, &large));
        assert!(unread_body_closes(v11, &chunked));
        assert!(!unread_body_closes(http::Version::HTTP_2, &large), "HTTP/2 resets the stream");
    }

    #[tokio::test]
    async fn an_answer_is_handed_on_in_pieces_and_counts_as_written_at_its_end() {
        let (near, _far) = tokio::io::duplex(64);
        let (_guarded, activity) = IdleGuard::new(near, &EdgeLimits::default());
        let answer = Bytes::from(vec![7u8; 2 * RESPONSE_PIECE_BYTES + 5]);
        let mut body = InFlightBody::new(Full::new(answer.clone()), activity.begin());
        assert_eq!(hyper::body::Body::size_hint(&body).exact(), Some(answer.len() as u64));
        assert_eq!(activity.responding.load(Ordering::Acquire), 1);
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            pieces.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(pieces.iter().map(Bytes::len).collect::<Vec<_>>(), [RESPONSE_PIECE_BYTES, RESPONSE_PIECE_BYTES, 5]);
        assert_eq!(pieces.concat(), answer.to_vec());
        assert!(hyper::body::Body::is_end_stream(&body));
        drop(body);
        assert_eq!(activity.responding.load(Ordering::Acquire), 0);
        assert!(!activity.busy());
    }
}
