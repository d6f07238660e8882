//! Connection-level guards: what bounds the server's descriptors, memory and CPU
//! whatever the clients do (with or without a key).
//!
//! - [`Acceptor`]: at most [`EdgeLimits::connections_max`] open connections (never more
//!   than the descriptor limit allows, less [`DESCRIPTOR_RESERVE`]). At the cap the
//!   server stops accepting: new clients wait in the kernel's listen backlog, which
//!   costs the server nothing. Accept errors (`EMFILE` and the like) back off from
//!   [`ACCEPT_BACKOFF_MIN`] doubling to [`ACCEPT_BACKOFF_MAX`] and are logged at most
//!   once per [`ACCEPT_ERROR_LOG_INTERVAL`], with the count since the last line.
//! - [`first_byte`]: a connection that sends nothing within
//!   [`EdgeLimits::first_byte_timeout`] is closed before hyper sees it (hyper-util's
//!   protocol detection has no timeout of its own).
//! - [`IdleGuard`]: an IO wrapper that fails reads and writes once nothing moved for
//!   the idle limit while no request is in flight (HTTP/2 has no idle timeout in hyper;
//!   a client that stops reading its response is cut too).
//! - [`BodyReader`]: reads a request body within [`crate::api::MAX_BODY_BYTES`] (413),
//!   [`EdgeLimits::body_read_timeout`] (408) and a global budget of bytes held in
//!   request bodies, [`EdgeLimits::body_memory_max_bytes`] (503 with `Retry-After` when
//!   the budget stays spent for [`BODY_BUDGET_WAIT`]).

use crate::api::error_response;
use bytes::{Buf, Bytes, BytesMut};
use esim_engine::{ApiError, ErrorCode};
use http_body_util::BodyExt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Open connections at most (the default of `--max-connections`).
pub const CONNECTIONS_MAX: usize = 1_024;
/// Descriptors kept free of connections: webhook deliveries (a socket each, and one
/// for the name lookup), the journal and snapshot files, the listener, stdio and the
/// runtime's own.
pub const DESCRIPTOR_RESERVE: u64 = 2 * crate::sender::MAX_CONCURRENT_DELIVERIES as u64 + 32;
/// A new connection must send its first byte within this time.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight is closed after this long without a byte
/// read or written (HTTP/1 keep-alive waits are cut sooner, by the header read timeout).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A request body must arrive whole within this time from the start of its reading.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes held in request bodies at once, all connections together.
pub const BODY_MEMORY_MAX_BYTES: usize = 64 * 1024 * 1024;
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
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_read_timeout: Duration,
    pub body_memory_max_bytes: usize,
}

impl Default for EdgeLimits {
    fn default() -> EdgeLimits {
        EdgeLimits {
            connections_max: CONNECTIONS_MAX,
            first_byte_timeout: FIRST_BYTE_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            body_memory_max_bytes: BODY_MEMORY_MAX_BYTES,
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

/// An open connection's place under the cap; dropping it frees the place. It also
/// counts the connection in the open connections gauge of `GET /metrics`.
pub struct ConnectionSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl ConnectionSlot {
    fn new(permit: OwnedSemaphorePermit) -> ConnectionSlot {
        crate::metrics::connection_opened();
        ConnectionSlot(permit)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        crate::metrics::connection_closed();
    }
}

/// Accepts connections under the cap, backing off on errors.
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    cap: usize,
    backoff: Backoff,
    retry_at: Option<Instant>,
    errors: RateLimitedLog,
    at_cap: RateLimitedLog,
}

impl Acceptor {
    pub fn new(listener: TcpListener, connections_max: usize) -> Acceptor {
        let limit = descriptor_limit();
        let cap = connection_cap(connections_max, limit);
        if cap < connections_max {
            tracing::warn!(
                requested = connections_max,
                cap,
                descriptor_limit = limit,
                reserve = DESCRIPTOR_RESERVE,
                "the connection cap is lowered to fit the descriptor limit (raise it with ulimit -n)"
            );
        }
        Acceptor {
            listener,
            slots: Arc::new(Semaphore::new(cap)),
            cap,
            backoff: Backoff::default(),
            retry_at: None,
            errors: RateLimitedLog::default(),
            at_cap: RateLimitedLog::default(),
        }
    }

    /// The connection cap in force.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The next connection, with its slot. Cancel-safe (a `select!` branch): a
    /// cancelled call loses no connection and keeps the backoff.
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
                    return (stream, peer, ConnectionSlot::new(slot));
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
}

/// Waits for a connection's first byte (without consuming it): false when the
/// client sent nothing within `timeout`, closed, or failed.
pub async fn first_byte(stream: &TcpStream, timeout: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(timeout, stream.peek(&mut byte)).await, Ok(Ok(1..)))
}

/// What a connection's requests tell its [`IdleGuard`]: how many are in flight, and
/// whether one came at all.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    started: AtomicBool,
}

impl Activity {
    /// Runs a request's handler; the connection is not idle meanwhile (a request may
    /// wait for a webhook receiver with nothing on the wire).
    pub fn during<F: Future>(self: &Arc<Self>, handler: F) -> impl Future<Output = F::Output> {
        struct InFlight(Arc<Activity>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.store(true, Ordering::Release);
        let in_flight = InFlight(self.clone());
        async move {
            let output = handler.await;
            drop(in_flight);
            output
        }
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }
}

/// An IO that fails a pending read or write with `TimedOut` once nothing was read or
/// written for the idle limit while no request was in flight. The limit is the first
/// byte timeout until the first request arrives (a client that sends part of the
/// HTTP/2 preface and stops), the idle timeout after. One timer serves reads and
/// writes: hyper polls both from the connection's one task.
pub struct IdleGuard<T> {
    inner: T,
    activity: Arc<Activity>,
    before_first_request: Duration,
    idle: Duration,
    last: Instant,
    timer: Pin<Box<Sleep>>,
}

impl<T> IdleGuard<T> {
    pub fn new(inner: T, limits: &EdgeLimits) -> (IdleGuard<T>, Arc<Activity>) {
        let activity = Arc::new(Activity::default());
        let now = Instant::now();
        let guard = IdleGuard {
            inner,
            activity: activity.clone(),
            before_first_request: limits.first_byte_timeout,
            idle: limits.idle_timeout,
            last: now,
            timer: Box::pin(tokio::time::sleep_until(now + limits.first_byte_timeout)),
        };
        (guard, activity)
    }

    /// Called when the inner IO is pending: `Err` once the connection is idle too long.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            if self.activity.busy() {
                self.last = Instant::now();
            }
            let limit =
                if self.activity.started.load(Ordering::Acquire) { self.idle } else { self.before_first_request };
            let deadline = self.last + limit;
            // The timer may stay at an earlier deadline while traffic moves `last` on:
            // when it fires it is moved to the current one (one timer reset per idle
            // period, not one per read).
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
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleGuard<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.last = Instant::now();
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
                if written > 0 {
                    self.last = Instant::now();
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

/// A body read whole, with its share of the budget (held until this is dropped, so
/// a body waiting for the owner task still counts).
#[derive(Debug)]
pub struct HeldBody {
    pub bytes: Bytes,
    _share: Option<OwnedSemaphorePermit>,
}

/// Largest declared body that is read and dropped before its 413 (see
/// [`BodyReader::read`]); larger ones are refused without reading.
pub const OVERSIZE_DISCARD_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// Reads request bodies within the size limit, the read timeout and the global budget.
#[derive(Clone, Debug)]
pub struct BodyReader {
    budget: Arc<Semaphore>,
    budget_bytes: usize,
    read_timeout: Duration,
    budget_wait: Duration,
}

impl BodyReader {
    pub fn new(limits: &EdgeLimits) -> BodyReader {
        let budget_bytes = limits.body_memory_max_bytes.clamp(1, Semaphore::MAX_PERMITS);
        BodyReader {
            budget: Arc::new(Semaphore::new(budget_bytes)),
            budget_bytes,
            read_timeout: limits.body_read_timeout,
            budget_wait: BODY_BUDGET_WAIT,
        }
    }

    /// Bytes of the budget free now.
    pub fn budget_free(&self) -> usize {
        self.budget.available_permits()
    }

    /// Reads `body` whole: at most `limit` bytes (413 above, before reading when the
    /// declared length says so), within the read timeout (408), once its share of the
    /// budget is free (the declared length, or `limit` when unknown; 503 with
    /// `Retry-After` after [`BODY_BUDGET_WAIT`]). `Err` is the response to send.
    pub async fn read<B>(&self, body: B, limit: usize) -> Result<HeldBody, http::Response<Bytes>>
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
            return Ok(HeldBody { bytes: Bytes::new(), _share: None });
        }
        let expected = hint.upper().map_or(limit, |upper| upper.min(limit as u64) as usize);
        let need = expected.clamp(1, self.budget_bytes);
        let acquire = self.budget.clone().acquire_many_owned(u32::try_from(need).unwrap_or(u32::MAX));
        let mut share = match tokio::time::timeout(self.budget_wait, acquire).await {
            Ok(share) => share.expect("the budget is never closed"),
            Err(_) => {
                let mut error = ApiError::new(
                    ErrorCode::ServiceUnavailable,
                    "too many request bodies are being received at once; retry shortly",
                );
                error.retry_after_secs = Some(BODY_BUDGET_RETRY_AFTER_SECS);
                return Err(error_response(error));
            }
        };
        let collect = async {
            let mut body = body;
            let mut bytes = BytesMut::with_capacity(expected);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|error| {
                    error_response(ApiError::validation(format!("the request body could not be read: {error}")))
                })?;
                if let Ok(mut data) = frame.into_data() {
                    if bytes.len() + data.remaining() > limit {
                        return Err(too_large());
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
        };
        let bytes = match tokio::time::timeout(self.read_timeout, collect).await {
            Ok(read) => read?,
            Err(_) => {
                return Err(error_response(ApiError::new(
                    ErrorCode::RequestTimeout,
                    format!("the request body did not arrive within {} s", self.read_timeout.as_secs()),
                )))
            }
        };
        // Keep only the share the body really holds.
        if bytes.len() < share.num_permits() {
            drop(share.split(share.num_permits() - bytes.len().max(1)));
        }
        Ok(HeldBody { bytes, _share: Some(share) })
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

    fn status(result: Result<HeldBody, http::Response<Bytes>>) -> u16 {
        match result {
            Ok(_) => 200,
            Err(response) => response.status().as_u16(),
        }
    }

    #[tokio::test]
    async fn bodies_are_read_within_their_limits() {
        let bodies = reader(1_000, 5_000);
        let held = bodies.read(Full::new(Bytes::from_static(b"{\"a\":1}")), 100).await.unwrap();
        assert_eq!(&held.bytes[..], b"{\"a\":1}");
        assert_eq!(bodies.budget_free(), 1_000 - 7, "a held body keeps its share");
        drop(held);
        assert_eq!(bodies.budget_free(), 1_000);
        // Declared too large: refused before reading.
        assert_eq!(status(bodies.read(Full::new(Bytes::from(vec![0u8; 101])), 100).await), 413);
        // Undeclared (chunked) and too large: refused while reading.
        let chunked = TestBody { chunks: vec![Bytes::from(vec![0u8; 60]); 2], declared: None, stall: false };
        assert_eq!(status(bodies.read(chunked, 100).await), 413);
        // Undeclared and small: the share shrinks to the real size.
        let chunked = TestBody { chunks: vec![Bytes::from_static(b"abc"); 2], declared: None, stall: false };
        let held = bodies.read(chunked, 100).await.unwrap();
        assert_eq!((&held.bytes[..], bodies.budget_free()), (&b"abcabc"[..], 1_000 - 6));
        drop(held);
        assert_eq!(bodies.budget_free(), 1_000);
        let empty = bodies.read(Full::new(Bytes::new()), 100).await.unwrap();
        assert!(empty.bytes.is_empty());
    }

    #[tokio::test]
    async fn a_stalled_body_times_out_with_408_and_frees_its_share() {
        let bodies = reader(1_000, 50);
        let stalled = TestBody { chunks: vec![Bytes::from_static(b"abc")], declared: Some(10), stall: true };
        let response = bodies.read(stalled, 100).await.unwrap_err();
        assert_eq!(response.status().as_u16(), 408);
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["code"], "REQUEST_TIMEOUT", "{body}");
        assert_eq!(bodies.budget_free(), 1_000);
    }

    #[tokio::test]
    async fn a_spent_budget_answers_503_with_retry_after() {
        let bodies = reader(100, 5_000);
        let held = bodies.read(Full::new(Bytes::from(vec![1u8; 80])), 100).await.unwrap();
        let started = std::time::Instant::now();
        let response = bodies.read(Full::new(Bytes::from(vec![1u8; 30])), 100).await.unwrap_err();
        assert!(started.elapsed() >= BODY_BUDGET_WAIT);
        assert_eq!(response.status().as_u16(), 503);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "1");
        // A body that fits what is left goes through at once.
        assert!(bodies.read(Full::new(Bytes::from(vec![1u8; 20])), 100).await.is_ok());
        drop(held);
        assert!(bodies.read(Full::new(Bytes::from(vec![1u8; 30])), 100).await.is_ok());
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
        let slow = activity.during(tokio::time::sleep(Duration::from_millis(500)));
        let writer = tokio::spawn(async move {
            slow.await;
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
}
