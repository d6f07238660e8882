//! The webhook sender: real HTTP POSTs of the deliveries the engine hands out, with a
//! 10-second timeout and bounded concurrency. The outcome goes back to the engine.

use crate::secrets::SealingKey;
use bytes::Bytes;
use esim_engine::webhook::is_public_ip;
use esim_engine::{Delivery, DeliveryResult, EventName};
use http_body_util::Full;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Semaphore;

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
/// Deliveries in flight at once.
pub const MAX_CONCURRENT_DELIVERIES: usize = 64;

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

/// The headers of a delivery's POST, beside `Content-Type: application/json`, signed
/// with the webhook's secret (opened by the sender just for this): ours (`X-Service-*`,
/// the event's service time) and Standard Webhooks' (`webhook-*`, signed with the wall
/// clock's Unix seconds `now_unix_s` of this attempt, as receivers check it against
/// theirs; decision 114). During a rotation's overlap `previous` (the secret before it)
/// signs too: `webhook-signature` carries both, space-separated, the new one first;
/// `X-Service-Signature` uses the new one only (decision 116).
pub fn delivery_headers(
    delivery: &Delivery,
    secret: &str,
    previous: Option<&str>,
    now_unix_s: i64,
) -> [(&'static str, String); 7] {
    let body = delivery.body.as_bytes();
    let standard =
        |secret: &str| esim_engine::webhook::standard_signature(secret, &delivery.event_id, now_unix_s, body);
    let signatures = match previous {
        Some(previous) => format!("{} {}", standard(secret), standard(previous)),
        None => standard(secret),
    };
    [
        ("X-Service-Signature", esim_engine::webhook::sign(secret, body)),
        ("X-Service-Event-Id", delivery.event_id.clone()),
        ("X-Service-Timestamp", delivery.timestamp.to_rfc3339()),
        ("X-Service-Delivery-Attempt", delivery.attempt.to_string()),
        ("webhook-id", delivery.event_id.clone()),
        ("webhook-timestamp", now_unix_s.to_string()),
        ("webhook-signature", signatures),
    ]
}

/// The wall clock's Unix seconds (the signed `webhook-timestamp`).
fn unix_now_s() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[derive(Clone)]
pub struct Sender {
    client: HttpsClient,
    permits: Arc<Semaphore>,
    /// Per webhook id, its share of the slots ([`PER_WEBHOOK_CONCURRENT_MAX`]); an entry
    /// nobody holds is dropped once the map grows, so it stays as small as the set of
    /// webhooks with deliveries in flight.
    webhook_permits: Arc<std::sync::Mutex<std::collections::BTreeMap<String, Arc<Semaphore>>>>,
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
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_DELIVERIES)),
            webhook_permits: Arc::default(),
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
    /// [`TEST_CALL_TIMEOUT`], waiting for a slot included, and does not queue behind its
    /// webhook's own deliveries; any other delivery first takes its webhook's share.
    async fn attempt(&self, delivery: &Delivery) -> DeliveryResult {
        if delivery.event == EventName::Test {
            return tokio::time::timeout(TEST_CALL_TIMEOUT, self.post(delivery))
                .await
                .unwrap_or(DeliveryResult::Timeout);
        }
        let share = self.share_of(&delivery.webhook_id);
        let _share = share.acquire().await.expect("the semaphore is never closed");
        self.post(delivery).await
    }

    /// The webhook's share of the delivery slots.
    fn share_of(&self, webhook_id: &str) -> Arc<Semaphore> {
        let mut shares = self.webhook_permits.lock().unwrap_or_else(|e| e.into_inner());
        if shares.len() >= 1_024 {
            shares.retain(|_, share| Arc::strong_count(share) > 1);
        }
        shares
            .entry(webhook_id.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_WEBHOOK_CONCURRENT_MAX)))
            .clone()
    }

    /// Takes a slot and POSTs, bounded by [`DELIVERY_TIMEOUT`].
    async fn post(&self, delivery: &Delivery) -> DeliveryResult {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
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
}
