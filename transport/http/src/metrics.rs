//! Operator metrics, served as `GET /metrics` in the Prometheus text format.
//!
//! Recorded through the `metrics` facade (atomic counters and gauges, histogram samples
//! in lock-free buckets) into `metrics-exporter-prometheus`'s recorder, which renders the
//! text format; no label string is allocated per request (endpoint names, statuses and
//! outcomes are `&'static str`). Only the shell records here: the engine never sees a
//! metric, so its determinism is untouched.
//!
//! The facade has one recorder per process: several servers in one process (tests)
//! share their series.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Requests answered, by endpoint (the route's name, never the path) and status.
pub const REQUESTS: &str = "esim_http_requests_total";
/// Time from the request's head to its answer, by endpoint.
pub const REQUEST_SECONDS: &str = "esim_http_request_duration_seconds";
/// Requests refused by the rate limit (429), by endpoint.
pub const RATE_LIMITED: &str = "esim_http_rate_limited_total";
/// Open client connections.
pub const OPEN_CONNECTIONS: &str = "esim_open_connections";
/// Journal entries made durable by one append (group commit's batch size).
pub const JOURNAL_BATCH_ENTRIES: &str = "esim_journal_batch_entries";
/// Time of one journal append (write and sync), failed ones included.
pub const JOURNAL_COMMIT_SECONDS: &str = "esim_journal_commit_seconds";
/// Journal appends that failed.
pub const JOURNAL_FAILURES: &str = "esim_journal_append_failures_total";
/// Seconds since the last snapshot was written (since the start when the data dir has none).
pub const SNAPSHOT_AGE_SECONDS: &str = "esim_snapshot_age_seconds";
/// Snapshots written by this process.
pub const SNAPSHOTS_WRITTEN: &str = "esim_snapshots_written_total";
/// Webhook delivery attempts, by outcome (`delivered`, `http_error`, `timeout`, `failed`).
pub const DELIVERIES: &str = "esim_webhook_deliveries_total";
/// Deliveries the engine still owns (in flight or waiting for a retry).
pub const RETRY_QUEUE_DEPTH: &str = "esim_webhook_retry_queue_depth";
/// Time the engine took to apply one request (in the owner task).
pub const ENGINE_COMMAND_SECONDS: &str = "esim_engine_command_seconds";
/// 1 while `/readyz` answers 200.
pub const READY: &str = "esim_ready";
/// Log lines dropped because stderr's reader fell behind (`esim serve --log-buffer-lines`).
pub const LOG_LINES_DROPPED: &str = "esim_log_lines_dropped_total";

/// Where the count of dropped log lines is read (set by the binary, which owns the log
/// writer; absent in programs that log otherwise).
static LOG_DROPS: OnceLock<Box<dyn Fn() -> u64 + Send + Sync>> = OnceLock::new();

/// Tells `/metrics` how many log lines were dropped so far (the log writer's counter).
pub fn count_log_drops(dropped: impl Fn() -> u64 + Send + Sync + 'static) {
    let _ = LOG_DROPS.set(Box::new(dropped));
}

/// Latency buckets (seconds): 50 µs to 10 s.
const SECONDS_BUCKETS: &[f64] =
    &[0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];
/// Batch-size buckets (entries): up to the owner task's largest batch and beyond.
const ENTRY_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];
/// How often histogram samples are folded into their buckets, so that memory stays
/// bounded when nobody scrapes.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// When the last snapshot was written (Unix ms); 0 before any.
static LAST_SNAPSHOT_UNIX_MS: AtomicI64 = AtomicI64::new(0);

/// The process's Prometheus recorder, installed as the `metrics` recorder on first use.
/// When another recorder was installed first (an embedding program), this one still
/// renders, but empty.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(JOURNAL_BATCH_ENTRIES.into()), ENTRY_BUCKETS))
            .expect("the bucket lists are not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder is installed: GET /metrics shows nothing");
        }
        describe();
        handle
    })
}

fn describe() {
    metrics::describe_counter!(REQUESTS, "Requests answered, by endpoint and status.");
    metrics::describe_histogram!(REQUEST_SECONDS, metrics::Unit::Seconds, "Request latency, by endpoint.");
    metrics::describe_counter!(RATE_LIMITED, "Requests refused by the rate limit (429), by endpoint.");
    metrics::describe_gauge!(OPEN_CONNECTIONS, "Open client connections.");
    metrics::describe_histogram!(JOURNAL_BATCH_ENTRIES, "Journal entries made durable by one append.");
    metrics::describe_histogram!(JOURNAL_COMMIT_SECONDS, metrics::Unit::Seconds, "Time of one journal append.");
    metrics::describe_counter!(JOURNAL_FAILURES, "Journal appends that failed.");
    metrics::describe_gauge!(SNAPSHOT_AGE_SECONDS, metrics::Unit::Seconds, "Seconds since the last snapshot.");
    metrics::describe_counter!(SNAPSHOTS_WRITTEN, "Snapshots written by this process.");
    metrics::describe_counter!(DELIVERIES, "Webhook delivery attempts, by outcome.");
    metrics::describe_gauge!(RETRY_QUEUE_DEPTH, "Webhook deliveries in flight or waiting for a retry.");
    metrics::describe_histogram!(ENGINE_COMMAND_SECONDS, metrics::Unit::Seconds, "Engine time of one request.");
    metrics::describe_gauge!(READY, "1 while /readyz answers 200.");
    metrics::describe_counter!(LOG_LINES_DROPPED, "Log lines dropped because stderr's reader fell behind.");
}

/// Folds histogram samples into buckets every [`UPKEEP_INTERVAL`] until aborted.
pub async fn upkeep() {
    let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        handle().run_upkeep();
    }
}

/// The text of `GET /metrics`, the snapshot age brought up to date first.
pub fn render(started_unix_ms: i64, now_unix_ms: i64) -> String {
    let last = LAST_SNAPSHOT_UNIX_MS.load(Ordering::Relaxed);
    let since = if last > 0 { last } else { started_unix_ms };
    metrics::gauge!(SNAPSHOT_AGE_SECONDS).set((now_unix_ms - since).max(0) as f64 / 1000.0);
    if let Some(dropped) = LOG_DROPS.get() {
        metrics::counter!(LOG_LINES_DROPPED).absolute(dropped());
    }
    handle().render()
}

/// The handle of a series without labels, registered with the recorder once: registering
/// looks the series up in the recorder's shared registry (a hash under a lock every
/// thread takes), which the hot paths (every request, command and group commit) would
/// otherwise pay each time; a kept handle is an atomic update. The recorder is installed
/// first: a handle taken without one would record nothing, ever.
fn registered<T>(cell: &'static OnceLock<T>, register: impl FnOnce() -> T) -> &'static T {
    cell.get_or_init(|| {
        handle();
        register()
    })
}

/// One answered request.
pub fn request(endpoint: &'static str, status: u16, elapsed: Duration) {
    /// The handles of one (endpoint, status) series, registered once per thread.
    struct Series {
        requests: metrics::Counter,
        seconds: metrics::Histogram,
        rate_limited: Option<metrics::Counter>,
    }
    thread_local! {
        /// Labelled series kept as [`registered`] keeps the others, per thread (no
        /// lock). Keyed by the name's address and length: the names are `&'static
        /// str`, and a name seen at two addresses only makes two handles to one series.
        static SERIES: std::cell::RefCell<std::collections::HashMap<(usize, usize, u16), Series>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    handle(); // before any handle is kept (see `registered`)
    SERIES.with_borrow_mut(|series| {
        // Statuses outside 100-599 share the `other` series (and one entry).
        let status = if (100..=599).contains(&status) { status } else { 0 };
        let series = series.entry((endpoint.as_ptr() as usize, endpoint.len(), status)).or_insert_with(|| Series {
            requests: metrics::counter!(REQUESTS, "endpoint" => endpoint, "status" => status_label(status)),
            seconds: metrics::histogram!(REQUEST_SECONDS, "endpoint" => endpoint),
            rate_limited: (status == 429).then(|| metrics::counter!(RATE_LIMITED, "endpoint" => endpoint)),
        });
        series.requests.increment(1);
        series.seconds.record(elapsed.as_secs_f64());
        if let Some(limited) = &series.rate_limited {
            limited.increment(1);
        }
    });
}

/// One journal append of `entries` entries that took `elapsed`.
pub fn journal_append(entries: usize, elapsed: Duration, ok: bool) {
    static ENTRIES: OnceLock<metrics::Histogram> = OnceLock::new();
    static SECONDS: OnceLock<metrics::Histogram> = OnceLock::new();
    registered(&ENTRIES, || metrics::histogram!(JOURNAL_BATCH_ENTRIES)).record(entries as f64);
    registered(&SECONDS, || metrics::histogram!(JOURNAL_COMMIT_SECONDS)).record(elapsed.as_secs_f64());
    if !ok {
        metrics::counter!(JOURNAL_FAILURES).increment(1);
    }
}

/// A snapshot was written at `unix_ms` (or, at start, the data dir's newest one was).
pub fn snapshot_written(unix_ms: i64, by_this_process: bool) {
    LAST_SNAPSHOT_UNIX_MS.fetch_max(unix_ms, Ordering::Relaxed);
    if by_this_process {
        metrics::counter!(SNAPSHOTS_WRITTEN).increment(1);
    }
}

/// One webhook delivery attempt ended with `outcome`.
pub fn delivery(outcome: &'static str) {
    metrics::counter!(DELIVERIES, "outcome" => outcome).increment(1);
}

pub fn retry_queue_depth(depth: usize) {
    static DEPTH: OnceLock<metrics::Gauge> = OnceLock::new();
    registered(&DEPTH, || metrics::gauge!(RETRY_QUEUE_DEPTH)).set(depth as f64);
}

pub fn connection_opened() {
    metrics::gauge!(OPEN_CONNECTIONS).increment(1.0);
}

pub fn connection_closed() {
    metrics::gauge!(OPEN_CONNECTIONS).decrement(1.0);
}

pub fn engine_command(elapsed: Duration) {
    static SECONDS: OnceLock<metrics::Histogram> = OnceLock::new();
    registered(&SECONDS, || metrics::histogram!(ENGINE_COMMAND_SECONDS)).record(elapsed.as_secs_f64());
}

pub fn ready(ready: bool) {
    metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// An HTTP status as a `&'static str` label, made once per process (no allocation per
/// request); statuses outside 100-599 are `other`.
fn status_label(status: u16) -> &'static str {
    static LABELS: OnceLock<Vec<String>> = OnceLock::new();
    let labels = LABELS.get_or_init(|| (100..600).map(|s: u16| s.to_string()).collect());
    match status {
        100..=599 => labels[usize::from(status - 100)].as_str(),
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_labels_are_the_numbers() {
        assert_eq!(super::status_label(200), "200");
        assert_eq!(super::status_label(599), "599");
        assert_eq!(super::status_label(100), "100");
        assert_eq!(super::status_label(42), "other");
    }
}
