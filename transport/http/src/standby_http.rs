//! What a hot standby of a PostgreSQL store answers while it follows (issue 17;
//! decisions 146-153, 199-201). The following itself, and the takeover, are the store's
//! ([`esim_store::standby`]; both are re-exported as [`crate::standby`]).
//!
//! `esim serve --store URL` started while another process holds shard 0 with a live
//! lease becomes a standby ([`follow`]): it binds its listener at once and answers every
//! API request with a credential 503 `SERVICE_UNAVAILABLE` with `Retry-After` and
//! `Connection: close` (a client tries the other node, with the same
//! `Idempotency-Key`); `GET /healthz` is 200, `GET /readyz` 503 saying it is a standby.
//! Without a credential it answers nothing else (401 on an API's path, 404 elsewhere);
//! whom it follows and how far only to the admin token. Once it took the shard over,
//! the same listener is handed back to be served by the normal owner task.

use crate::api::error_response;
use crate::routes::Api;
use bytes::Bytes;
use esim_engine::{ApiError, ErrorCode};
use esim_store::journal::{JournalError, Recovery, SnapshotPolicy};
use esim_store::standby::{describe, follow_until_taken, Standby};
use esim_store::store_pg::{PgStore, ShardOwner, StoreOptions, SHARD};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};

/// The `Retry-After` (seconds) of a standby's 503.
pub const RETRY_AFTER_S: u64 = 1;
/// Connections a standby answers at once; more wait in the listen backlog.
const CONNECTIONS_MAX: usize = 1_024;
/// A standby's connection must send its request within this time, and is closed after
/// this time in any case (it gets one answer).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A finished takeover: the listener (the same socket), the store this process now
/// appends to, and the state it continues from.
pub struct Takeover {
    pub listener: TcpListener,
    pub store: PgStore,
    pub recovery: Recovery,
}

/// What a standby's `/readyz` says to anyone: that it is one, nothing of whom it
/// follows or how far (the detail is the operator's, behind the admin token).
const STANDBY_PUBLIC: &str =
    "standby: following shard 0 of the PostgreSQL store; takes over when the owner's lease runs out";

/// What a standby answers. Without a credential only `GET /healthz` (200) and `GET
/// /readyz` (503, [`STANDBY_PUBLIC`]); a path of an API 401, any other 404. With a
/// credential for an API, 503 `SERVICE_UNAVAILABLE` (retry on the owner) with
/// `Retry-After` and `Connection: close`. `status` (whom it follows, the epoch, how
/// far) only with the admin token.
fn standby_answer(
    method: &http::Method,
    path: &str,
    headers: &http::HeaderMap,
    admin_token: &str,
    status: &str,
) -> http::Response<Bytes> {
    let credential = crate::api::bearer_str(headers);
    let operator =
        !admin_token.is_empty() && esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes());
    let shown = if operator { status } else { STANDBY_PUBLIC };
    if method == http::Method::GET && path == "/healthz" {
        return http::Response::builder()
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Bytes::from_static(br#"{"status":"ok"}"#))
            .expect("a valid response");
    }
    if method == http::Method::GET && path == "/readyz" {
        return unavailable(shown.to_string());
    }
    let refused = match crate::routes::api_of_path(path) {
        None if path == "/metrics" && !operator => Some(ErrorCode::InvalidAdminToken),
        None if path != "/metrics" => Some(ErrorCode::RouteNotFound),
        Some(Api::Reseller) if credential.is_empty() => Some(ErrorCode::InvalidApiKey),
        Some(Api::Admin | Api::Sandbox) if !operator => Some(ErrorCode::InvalidAdminToken),
        _ => None,
    };
    if let Some(code) = refused {
        let message = match code {
            ErrorCode::RouteNotFound => "no route for this path".to_string(),
            _ => "missing or wrong credential".to_string(),
        };
        return error_response(ApiError::new(code, message));
    }
    let detail = if operator { format!(" ({status})") } else { String::new() };
    unavailable(format!(
        "this node is a standby and serves no request{detail}; retry on the owner, or here after a takeover, with \
         the same Idempotency-Key"
    ))
}

/// A standby's 503: `Retry-After` and `Connection: close` (the client tries another node).
fn unavailable(message: String) -> http::Response<Bytes> {
    let mut response = error_response(ApiError::new(ErrorCode::ServiceUnavailable, message));
    let headers = response.headers_mut();
    headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(RETRY_AFTER_S));
    headers.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// Answers every connection on `listener` as a standby until `stop`, then gives the
/// listener back (connections already accepted finish their one answer on their own).
async fn answer_as_standby(
    listener: TcpListener,
    status: Arc<Mutex<String>>,
    admin_token: Arc<str>,
    mut stop: oneshot::Receiver<()>,
) -> TcpListener {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let slot = tokio::select! {
            _ = &mut stop => return listener,
            slot = slots.clone().acquire_owned() => slot.expect("never closed"),
        };
        let accepted = tokio::select! {
            _ = &mut stop => return listener,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors and the like: wait a little rather than spin.
                tracing::warn!(%error, "the standby cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (status, admin_token) = (status.clone(), admin_token.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let text = status.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let response =
                    standby_answer(request.method(), request.uri().path(), request.headers(), &admin_token, &text);
                async move { Ok::<_, Infallible>(response.map(Full::new)) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .timer(TokioTimer::new())
                .header_read_timeout(CONNECTION_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
        });
    }
}

/// Follows shard 0 as a standby (answering on `listener` meanwhile, the detail only to
/// `admin_token`) until it takes the shard over, or until `shutdown` (then `None`).
/// `holder` is the owner found at start; `standby` the state loaded and checked.
pub async fn follow(
    listener: TcpListener,
    standby: Standby,
    policy: SnapshotPolicy,
    options: StoreOptions,
    (holder, admin_token): (ShardOwner, String),
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Result<Option<Takeover>, JournalError> {
    let status = Arc::new(Mutex::new(describe(SHARD, &holder, standby.next_index())));
    let (stop_answering, stop) = oneshot::channel();
    let answering = tokio::spawn(answer_as_standby(listener, status.clone(), Arc::from(admin_token), stop));
    tracing::info!(
        owner = %holder.owner, epoch = holder.epoch, head = holder.head, lease_left_s = holder.lease_left_s,
        "another process holds shard 0 with a live lease: this process is a standby (API requests answered 503)"
    );
    let taken = follow_until_taken(standby, None, policy, options, shutdown, Some(&status)).await;
    let _ = stop_answering.send(());
    let listener = answering.await.map_err(|e| JournalError(format!("the standby's listener task failed: {e}")))?;
    Ok(taken?.map(|(store, recovery)| Takeover { listener, store, recovery }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_answers_503_with_retry_after_and_close_but_is_alive() {
        let status = "standby: following shard 0, held by 42@host (epoch 7); 1234 of 1300 entries applied";
        let none = http::HeaderMap::new();
        let bearer = |token: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            headers
        };
        let (admin, reseller) = (bearer("adm_x"), bearer("rsk_someone"));
        let answer = |method: http::Method, path: &str, headers: &http::HeaderMap| {
            let response = standby_answer(&method, path, headers, "adm_x", status);
            let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap_or_default();
            (response, body)
        };
        let (health, _) = answer(http::Method::GET, "/healthz", &none);
        assert_eq!(health.status(), 200);
        // Anyone learns it is a standby, only the operator whom it follows and how far.
        let (ready, body) = answer(http::Method::GET, "/readyz", &none);
        assert_eq!(ready.status(), 503);
        assert_eq!(body["message"], STANDBY_PUBLIC);
        let (_, body) = answer(http::Method::GET, "/readyz", &admin);
        assert_eq!(body["message"], status);
        // With a credential for an API: 503, retry elsewhere, no detail but the operator's.
        for (method, path, headers) in [
            (http::Method::POST, "/api/v2/reseller/esim/1/fund", &reseller),
            (http::Method::POST, "/admin/v1/accounts", &admin),
        ] {
            let (refused, body) = answer(method, path, headers);
            assert_eq!(refused.status(), 503);
            assert_eq!(refused.headers()[http::header::RETRY_AFTER], RETRY_AFTER_S.to_string().as_str());
            assert_eq!(refused.headers()[http::header::CONNECTION], "close");
            assert_eq!(body["code"], "SERVICE_UNAVAILABLE");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains("standby"), "{body}");
            assert_eq!(message.contains("1234"), headers == &admin, "{body}");
        }
        // Without one: 401 for an API, 404 elsewhere; never a count or an owner.
        for (method, path, headers, code) in [
            (http::Method::POST, "/api/v2/reseller/esim/1/fund", &none, 401),
            (http::Method::GET, "/admin/v1/state", &none, 401),
            (http::Method::GET, "/admin/v1/state", &reseller, 401),
            (http::Method::POST, "/sandbox/v1/clock/advance", &none, 401),
            (http::Method::GET, "/metrics", &none, 401),
            (http::Method::GET, "/healthz/x", &none, 404),
            (http::Method::POST, "/x", &none, 404),
            (http::Method::GET, "/", &reseller, 404),
        ] {
            let (refused, body) = answer(method, path, headers);
            assert_eq!(refused.status(), code, "{path}: {body}");
            let text = body.to_string();
            assert!(!text.contains("1234") && !text.contains("42@host"), "{path}: {text}");
        }
    }
}
