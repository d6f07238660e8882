//! The webhook sender: real HTTP POSTs of the deliveries the engine hands out, with a
//! 10-second timeout, and the [`Dispatcher`] that bounds them: at most
//! [`MAX_CONCURRENT_DELIVERIES`] tasks POST at once, at most
//! [`PER_WEBHOOK_CONCURRENT_MAX`] of them for one webhook, and the rest wait as data in
//! per-webhook queues served in turn. The outcome goes back to the engine.

use crate::secrets::SealingKey;
use bytes::Bytes;
use esim_engine::webhook::is_public_ip;
use esim_engine::{Delivery, DeliveryResult, EventName};
use http_body_util::Full;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

/// Per-POST timeout (documented in docs/decisions.md).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `POST /webhooks/{id}/test` waits for the receiver: well under the 10 s that
/// clients commonly give a call, so the caller learns "timeout" rather than giving up
/// itself (decision 115).
pub const TEST_CALL_TIMEOUT: Duration = Duration::from_secs(4);
/// Deliveries in flight to one webhook at most: a slow receiver holds at most this many
/// of the [`MAX_CONCURRENT_DELIVERIES`] slots, so it delays only its own deliveries.
pub const PER_WEBHOOK_CONCURRENT_MAX: usize = 2;
// One account's webhooks together never hold every slot.
const _: () =
    assert!(PER_WEBHOOK_CONCURRENT_MAX * esim_engine::config::limits::MAX_WEBHOOKS < MAX_CONCURRENT_DELIVERIES);
const _: () = assert!(TEST_CALL_TIMEOUT.as_secs() < DELIVERY_TIMEOUT.as_secs());
/// Deliveries in flight at once (test calls aside).
pub const MAX_CONCURRENT_DELIVERIES: usize = 64;
/// Test calls (`POST /webhooks/{id}/test`) in flight at once: they skip the delivery
/// queues, so they have their own bound; a test call waits for one of these within its
/// [`TEST_CALL_TIMEOUT`].
pub const MAX_CONCURRENT_TEST_CALLS: usize = 16;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector<PublicOnly>>, Full<Bytes>>;

/// DNS resolution that keeps only public addresses (unless insecure webhooks are
/// allowed): a public-looking name that resolves to loopback or a private network is
/// refused at connect time, which the URL check at registration cannot see.
#[derive(Clone)]
struct PublicOnly {
    inner: GaiResolver,
    allow_private: bool,
}

impl tower_service::Service<Name> for PublicOnly {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolving = self.inner.call(name.clone());
        let allow_private = self.allow_private;
        Box::pin(async move {
            let kept: Vec<SocketAddr> =
                resolving.await?.filter(|address| allow_private || is_public_ip(address.ip())).collect();
            if kept.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("{name} resolves only to private addresses (allowed with --allow-insecure-webhooks)"),
                ));
            }
            Ok(kept.into_iter())
        })
    }
}

/// An error and its causes, `a: b: c` (hyper's client error alone says only "Connect").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// The host of a URL when it is an IP literal (connected to without resolving).
fn literal_ip(url: &str) -> Option<IpAddr> {
    let uri: http::Uri = url.parse().ok()?;
    uri.host()?.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

pub use esim_api::webhook_headers::delivery_headers;

/// The wall clock's Unix seconds (the signed `webhook-timestamp`).
fn unix_now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[derive(Clone)]
pub struct Sender {
    client: HttpsClient,
    /// The test calls' own slots ([`MAX_CONCURRENT_TEST_CALLS`]); deliveries are bounded
    /// by the [`Dispatcher`].
    test_permits: Arc<Semaphore>,
    allow_insecure: bool,
    /// Opens each delivery's sealed signing secret to sign it.
    sealing_key: Arc<SealingKey>,
}

impl Sender {
    pub fn new(allow_insecure: bool, sealing_key: Arc<SealingKey>) -> Sender {
        let mut http =
            HttpConnector::new_with_resolver(PublicOnly { inner: GaiResolver::new(), allow_private: allow_insecure });
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("the ring provider supports the default protocol versions")
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Sender {
            client: Client::builder(TokioExecutor::new()).build(https),
            test_permits: Arc::new(Semaphore::new(MAX_CONCURRENT_TEST_CALLS)),
            allow_insecure,
            sealing_key,
        }
    }

    /// POSTs one delivery and says how it ended. Never panics, never hangs past the
    /// timeout. Every attempt is counted by outcome in `GET /metrics`, and every failed
    /// one is logged (never its URL, which may carry a receiver's token, nor its secret).
    pub async fn send(&self, delivery: &Delivery) -> DeliveryResult {
        let result = self.attempt(delivery).await;
        let outcome = match &result {
            DeliveryResult::Status(200..=299) => "delivered",
            DeliveryResult::Status(_) => "http_error",
            DeliveryResult::Timeout => "timeout",
            DeliveryResult::Failed(_) => "failed",
        };
        crate::metrics::delivery(outcome);
        if !result.is_success() {
            tracing::warn!(
                delivery_id = delivery.delivery_id,
                webhook_id = %delivery.webhook_id,
                event_id = %delivery.event_id,
                attempt = delivery.attempt,
                outcome,
                result = ?result,
                "webhook delivery attempt failed"
            );
        }
        result
    }

    /// One attempt. A test call (`POST /webhooks/{id}/test`) is bounded as a whole by
    /// [`TEST_CALL_TIMEOUT`], waiting for a test slot included, and does not queue behind
    /// its webhook's own deliveries; other deliveries come bounded by the [`Dispatcher`].
    async fn attempt(&self, delivery: &Delivery) -> DeliveryResult {
        if delivery.event == EventName::Test {
            let probe = async {
                let _permit = self.test_permits.acquire().await.expect("the semaphore is never closed");
                self.post(delivery).await
            };
            return tokio::time::timeout(TEST_CALL_TIMEOUT, probe).await.unwrap_or(DeliveryResult::Timeout);
        }
        self.post(delivery).await
    }

    /// POSTs, bounded by [`DELIVERY_TIMEOUT`].
    async fn post(&self, delivery: &Delivery) -> DeliveryResult {
        if !self.allow_insecure && !delivery.url.starts_with("https://") {
            return DeliveryResult::Failed("plain http:// targets need --allow-insecure-webhooks".into());
        }
        if !self.allow_insecure && literal_ip(&delivery.url).is_some_and(|ip| !is_public_ip(ip)) {
            return DeliveryResult::Failed("private addresses need --allow-insecure-webhooks".into());
        }
        let secret = match self.sealing_key.open(&delivery.signing_secret) {
            Ok(secret) => secret,
            Err(why) => return DeliveryResult::Failed(format!("the signing secret cannot be opened: {why}")),
        };
        let previous = match delivery.previous_signing_secret.as_ref().map(|sealed| self.sealing_key.open(sealed)) {
            None => None,
            Some(Ok(previous)) => Some(previous),
            Some(Err(why)) => {
                return DeliveryResult::Failed(format!("the previous signing secret cannot be opened: {why}"))
            }
        };
        let mut request = http::Request::post(&delivery.url).header(http::header::CONTENT_TYPE, "application/json");
        for (name, value) in delivery_headers(delivery, &secret, previous.as_deref(), unix_now_s()) {
            request = request.header(name, value);
        }
        let request = match request.body(Full::new(Bytes::from(delivery.body.clone()))) {
            Ok(request) => request,
            Err(error) => return DeliveryResult::Failed(format!("bad request: {error}")),
        };
        match tokio::time::timeout(DELIVERY_TIMEOUT, self.client.request(request)).await {
            Err(_) => DeliveryResult::Timeout,
            Ok(Err(error)) => DeliveryResult::Failed(with_causes(&error)),
            Ok(Ok(response)) => DeliveryResult::Status(response.status().as_u16()),
        }
    }
}

/// Where a delivery's outcome goes: (delivery id, result, duration in ms).
pub type Report = Box<dyn Fn(u64, DeliveryResult, u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Hands deliveries to the [`Sender`] with a bounded set of tasks (decision 115): at most
/// [`MAX_CONCURRENT_DELIVERIES`] POSTs at once and [`PER_WEBHOOK_CONCURRENT_MAX`] per
/// webhook; the others wait in their webhook's queue, and webhooks with work take turns,
/// so a slow receiver delays only its own deliveries. The queues hold what the engine has
/// handed out and not yet seen answered, no more. Test calls skip the queues (bounded by
/// [`MAX_CONCURRENT_TEST_CALLS`]).
pub struct Dispatcher {
    inbox: mpsc::UnboundedSender<Delivery>,
    running: Arc<AtomicUsize>,
}

impl Dispatcher {
    /// Starts the dispatching task; it ends when the dispatcher is dropped.
    pub fn start(sender: Sender, report: Report) -> Dispatcher {
        let (inbox, deliveries) = mpsc::unbounded_channel();
        let running = Arc::new(AtomicUsize::new(0));
        let state = Dispatching {
            sender,
            report,
            queues: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            ready: VecDeque::new(),
            tasks: JoinSet::new(),
            posting: 0,
            running: running.clone(),
        };
        tokio::spawn(state.run(deliveries));
        Dispatcher { inbox, running }
    }

    /// Queues a delivery (never blocks: the owner task calls it).
    pub fn dispatch(&self, delivery: Delivery) {
        let _ = self.inbox.send(delivery);
    }

    /// POST tasks running now, test calls included.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

/// The dispatching task's state. Invariant: a webhook is in `ready` (once) exactly when
/// its queue is not empty and it has fewer than [`PER_WEBHOOK_CONCURRENT_MAX`] in flight.
struct Dispatching {
    sender: Sender,
    report: Report,
    /// Per webhook id, its deliveries waiting, oldest first (no entry when none).
    queues: BTreeMap<String, VecDeque<Delivery>>,
    /// Per webhook id, its POSTs running (no entry when none).
    in_flight: BTreeMap<String, usize>,
    /// Webhooks that may start a POST now, in turn.
    ready: VecDeque<String>,
    /// Every running POST: (webhook id, or None for a test call; delivery id; result; ms).
    tasks: JoinSet<(Option<String>, u64, DeliveryResult, u64)>,
    /// Running POSTs of deliveries (test calls aside): at most [`MAX_CONCURRENT_DELIVERIES`].
    posting: usize,
    running: Arc<AtomicUsize>,
}

impl Dispatching {
    async fn run(mut self, mut deliveries: mpsc::UnboundedReceiver<Delivery>) {
        loop {
            tokio::select! {
                delivery = deliveries.recv() => match delivery {
                    Some(delivery) => self.enqueue(delivery),
                    None => return,
                },
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    let Ok((webhook, delivery_id, result, duration_ms)) = done else { continue };
                    if let Some(webhook) = webhook {
                        self.finished(webhook);
                    }
                    (self.report)(delivery_id, result, duration_ms).await;
                }
            }
            self.fill();
            self.running.store(self.tasks.len(), Ordering::Relaxed);
        }
    }

    fn enqueue(&mut self, delivery: Delivery) {
        if delivery.event == EventName::Test {
            self.spawn(None, delivery);
            return;
        }
        let webhook = delivery.webhook_id.clone();
        let queue = self.queues.entry(webhook.clone()).or_default();
        queue.push_back(delivery);
        let busy = self.in_flight.get(&webhook).copied().unwrap_or(0);
        if queue.len() == 1 && busy < PER_WEBHOOK_CONCURRENT_MAX {
            self.ready.push_back(webhook);
        }
    }

    fn finished(&mut self, webhook: String) {
        self.posting -= 1;
        let busy = self.in_flight.get_mut(&webhook).expect("a running POST is counted");
        *busy -= 1;
        let was_full = *busy + 1 == PER_WEBHOOK_CONCURRENT_MAX;
        if *busy == 0 {
            self.in_flight.remove(&webhook);
        }
        if was_full && self.queues.contains_key(&webhook) {
            self.ready.push_back(webhook);
        }
    }

    /// Starts POSTs while slots are free, one per ready webhook in turn.
    fn fill(&mut self) {
        while self.posting < MAX_CONCURRENT_DELIVERIES {
            let Some(webhook) = self.ready.pop_front() else { return };
            let queue = self.queues.get_mut(&webhook).expect("a ready webhook has a queue");
            let delivery = queue.pop_front().expect("a ready webhook's queue is not empty");
            let left = !queue.is_empty();
            if !left {
                self.queues.remove(&webhook);
            }
            let busy = self.in_flight.entry(webhook.clone()).or_default();
            *busy += 1;
            assert!(*busy <= PER_WEBHOOK_CONCURRENT_MAX, "a webhook's share is bounded");
            if left && *busy < PER_WEBHOOK_CONCURRENT_MAX {
                self.ready.push_back(webhook.clone());
            }
            self.posting += 1;
            self.spawn(Some(webhook), delivery);
        }
    }

    fn spawn(&mut self, webhook: Option<String>, delivery: Delivery) {
        let sender = self.sender.clone();
        self.tasks.spawn(async move {
            let started = Instant::now();
            let result = sender.send(&delivery).await;
            (webhook, delivery.delivery_id, result, started.elapsed().as_millis() as u64)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secrets;
    use esim_engine::{EventName, Millis};

    #[test]
    fn the_signature_is_the_hex_hmac_of_the_body_with_the_opened_secret() {
        use hmac::{Hmac, Mac};
        let mut secrets = Secrets::seeded(3);
        let issued = secrets.new_signing_secret();
        let mut sent = delivery("https://example.com/h");
        sent.body = r#"{"id":"evt_1","type":"test"}"#.into();
        sent.signing_secret = issued.sealed.clone();
        let secret = secrets.open(&sent.signing_secret).unwrap();
        let headers: std::collections::BTreeMap<&str, String> =
            delivery_headers(&sent, &secret, None, 1_767_225_600).into_iter().collect();
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(issued.secret.as_bytes()).unwrap();
        mac.update(sent.body.as_bytes());
        let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(headers["X-Service-Signature"], expected);
        assert_eq!(headers["X-Service-Event-Id"], "evt_1");
        assert_eq!(headers["X-Service-Delivery-Attempt"], "1");
        assert_eq!(headers["X-Service-Timestamp"], "2026-01-01T00:00:00.000Z");
        // Standard Webhooks: keyed with the decoded bytes after whsec_, over id.timestamp.body.
        use base64::Engine as _;
        let key = base64::engine::general_purpose::STANDARD.decode(&issued.secret["whsec_".len()..]).unwrap();
        assert_eq!(key.len(), 32);
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("evt_1.1767225600.{}", sent.body).as_bytes());
        let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
        assert_eq!(headers["webhook-signature"], expected);
        assert_eq!((headers["webhook-id"].as_str(), headers["webhook-timestamp"].as_str()), ("evt_1", "1767225600"));
    }

    fn key() -> Arc<SealingKey> {
        Secrets::seeded(3).sealing_key()
    }

    fn delivery(url: &str) -> Delivery {
        Delivery {
            delivery_id: 1,
            webhook_id: "w".into(),
            url: url.into(),
            event_id: "evt_1".into(),
            event: EventName::Test,
            body: "{}".into(),
            signing_secret: Secrets::seeded(3).new_signing_secret().sealed,
            previous_signing_secret: None,
            timestamp: Millis::VIRTUAL_EPOCH,
            attempt: 1,
            manual: false,
        }
    }

    /// Private targets are refused before any connection: by name once resolved, and as
    /// IP literals (including IPv4-mapped IPv6); with insecure webhooks allowed, the
    /// same targets are tried (and here refused by the closed port instead).
    #[tokio::test]
    async fn private_targets_are_refused_unless_insecure_webhooks_are_allowed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let secure = Sender::new(false, key());
        for url in [
            format!("https://localhost:{port}/h"),
            format!("https://127.0.0.1:{port}/h"),
            format!("https://[::ffff:127.0.0.1]:{port}/h"),
            format!("https://[::1]:{port}/h"),
        ] {
            let DeliveryResult::Failed(why) = secure.send(&delivery(&url)).await else { panic!("{url} was tried") };
            assert!(why.contains("private addresses"), "{url}: {why}");
        }
        let insecure = Sender::new(true, key());
        let DeliveryResult::Failed(why) = insecure.send(&delivery(&format!("http://localhost:{port}/h"))).await else {
            panic!("nothing listens there")
        };
        assert!(!why.contains("private addresses"), "{why}");
    }

    /// POSTs in progress at a receiver: (now in total, most in total, per path (now, most)).
    type Concurrency = Arc<std::sync::Mutex<(usize, usize, BTreeMap<String, (usize, usize)>)>>;

    /// A receiver on loopback that holds every POST for `hold`, counting the POSTs in
    /// progress, in total and per path; `/fast` answers at once.
    async fn slow_receiver(hold: Duration) -> (String, Concurrency) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen: Concurrency = Arc::default();
        let counts = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let counts = counts.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                        let counts = counts.clone();
                        async move {
                            let path = request.uri().path().to_string();
                            if path != "/fast" {
                                {
                                    let mut c = counts.lock().unwrap();
                                    c.0 += 1;
                                    c.1 = c.1.max(c.0);
                                    let one = c.2.entry(path.clone()).or_default();
                                    one.0 += 1;
                                    one.1 = one.1.max(one.0);
                                }
                                tokio::time::sleep(hold).await;
                                let mut c = counts.lock().unwrap();
                                c.0 -= 1;
                                c.2.get_mut(&path).unwrap().0 -= 1;
                            }
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        (base, seen)
    }

    /// 40 webhooks with 5 deliveries each on a receiver that holds every POST: never more
    /// than 64 POSTs (and tasks) at once, never more than 2 for one webhook, every outcome
    /// reported; a test call sent meanwhile is answered at once (its own slots).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_dispatcher_bounds_posts_per_webhook_and_in_total() {
        let (base, seen) = slow_receiver(Duration::from_millis(300)).await;
        let (outcomes, mut reported) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::start(
            Sender::new(true, key()),
            Box::new(move |id, result, _| {
                let outcomes = outcomes.clone();
                Box::pin(async move {
                    let _ = outcomes.send((id, result));
                })
            }),
        );
        let mut id = 0;
        for webhook in 0..40 {
            for _ in 0..5 {
                id += 1;
                let mut one = delivery(&format!("{base}/w{webhook}"));
                (one.delivery_id, one.webhook_id, one.event) = (id, format!("w{webhook}"), EventName::EsimProvisioned);
                dispatcher.dispatch(one);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut most_running = dispatcher.running();
        let mut probe = delivery(&format!("{base}/fast"));
        probe.delivery_id = 10_000;
        dispatcher.dispatch(probe);
        let mut answers = Vec::new();
        while answers.len() < 201 {
            let (id, result) = tokio::time::timeout(Duration::from_secs(20), reported.recv()).await.unwrap().unwrap();
            assert_eq!(result, DeliveryResult::Status(200), "delivery {id}");
            answers.push(id);
            most_running = most_running.max(dispatcher.running());
        }
        // Sent while every slot was held, the test call is answered before the first
        // held POSTs finish (it would come after 64 of them in one queue).
        let probe_at = answers.iter().position(|&id| id == 10_000).unwrap();
        assert!(probe_at < MAX_CONCURRENT_DELIVERIES, "the test call was answered {probe_at}th");
        answers.sort_unstable();
        answers.dedup();
        assert_eq!(answers.len(), 201, "every outcome reported once");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.1, MAX_CONCURRENT_DELIVERIES, "all the slots were used, never more");
        assert!(seen.2.values().all(|(_, most)| *most == PER_WEBHOOK_CONCURRENT_MAX), "{:?}", seen.2);
        assert!(most_running <= MAX_CONCURRENT_DELIVERIES + 1, "{most_running} tasks");
    }
}
