//! The webhook sender: real HTTP POSTs of the deliveries the engine hands out, with a
//! 10-second timeout and bounded concurrency. The outcome goes back to the engine.

use bytes::Bytes;
use esim_engine::{Delivery, DeliveryResult};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Per-POST timeout (documented in docs/decisions.md).
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries in flight at once.
pub const MAX_CONCURRENT_DELIVERIES: usize = 64;

type HttpsClient =
    Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>;

#[derive(Clone)]
pub struct Sender {
    client: HttpsClient,
    permits: Arc<Semaphore>,
    allow_insecure: bool,
}

impl Sender {
    pub fn new(allow_insecure: bool) -> Sender {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("the ring provider supports the default protocol versions")
            .https_or_http()
            .enable_http1()
            .build();
        Sender {
            client: Client::builder(TokioExecutor::new()).build(https),
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_DELIVERIES)),
            allow_insecure,
        }
    }

    /// POSTs one delivery and says how it ended. Never panics, never hangs past the timeout.
    pub async fn send(&self, delivery: &Delivery) -> DeliveryResult {
        let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
        if !self.allow_insecure && !delivery.url.starts_with("https://") {
            return DeliveryResult::Failed("plain http:// targets need --allow-insecure-webhooks".into());
        }
        let mut request = http::Request::post(&delivery.url).header(http::header::CONTENT_TYPE, "application/json");
        for (name, value) in delivery.headers() {
            request = request.header(name, value);
        }
        let request = match request.body(Full::new(Bytes::from(delivery.body.clone()))) {
            Ok(request) => request,
            Err(error) => return DeliveryResult::Failed(format!("bad request: {error}")),
        };
        match tokio::time::timeout(DELIVERY_TIMEOUT, self.client.request(request)).await {
            Err(_) => DeliveryResult::Timeout,
            Ok(Err(error)) => DeliveryResult::Failed(error.to_string()),
            Ok(Ok(response)) => DeliveryResult::Status(response.status().as_u16()),
        }
    }
}
