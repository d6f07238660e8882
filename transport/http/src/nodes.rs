//! Shards over several processes (issue 17): a node owns a set of a store's shards and
//! forwards a request for any other shard to its owner, whose address the store holds
//! (decisions 177-181).
//!
//! A forwarded request carries [`FORWARDED_SHARD`] naming its shard: the receiving node
//! answers it from that shard if it owns it, else 503 with `Retry-After` and
//! [`NOT_OWNER`] (it never forwards again, so there are no loops). The forwarding node
//! then reads the owner's address from the store again and tries once more. Everything
//! is bounded: [`FORWARD_TIMEOUT`] per forward, [`FORWARDS_IN_FLIGHT_MAX`] at once,
//! [`FORWARD_RESPONSE_MAX_BYTES`] of answer; an owner that cannot be reached is a 503
//! with `Retry-After`, never a panic.
//!
//! Only a request another node signed may carry [`FORWARDED_SHARD`], [`WANT_FIGURES`]
//! or [`POOL_SYNC`]: [`NODE_PROOF`] is an HMAC-SHA256 over the shard, method and target,
//! keyed from the admin token every node holds ([`LinkKey`]); a client's copies of these
//! headers are dropped unread and steer nothing (decision 218). Before a request for
//! another node's shard is read or forwarded, its credential is checked as far as this
//! node can ([`screen_forward`]): the admin token, or a key's form and shard.
//!
//! Fan-out requests (clock, admin lists, report, state) ask each remote shard through
//! its owner with the same header, so one merge code serves local and remote shards.
//! The finance report's figures (which a local shard hands over beside its rendering)
//! travel as JSON when [`WANT_FIGURES`] asks for them ([`FiguresWire`]).

use crate::api::error_response;
use crate::edge::Credential;
use crate::routes::{Api, Match};
use crate::store_pg::Locator;
use bytes::Bytes;
use esim_engine::finance::{AccountReport, DayRow, FinanceReport, Holdings, MoneyIn, MovedInside, PeriodText, Spent};
use esim_engine::{ApiError, ErrorCode};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rust_decimal::Decimal;
use serde::Deserialize;
use std::sync::Mutex;
use std::time::Duration;

/// The header that marks a forwarded request (and a fan-out part sent to another node)
/// with the shard it is for.
pub const FORWARDED_SHARD: &str = "esim-forwarded-shard";
/// On a request from another node: the hex HMAC-SHA256 that proves the node-only headers
/// above came from a node ([`LinkKey::proof`]).
pub const NODE_PROOF: &str = "esim-node-proof";
/// On a 503 from a node that does not own the shard a forwarded request named: the
/// forwarding node reads the owner's address again.
pub const NOT_OWNER: &str = "esim-not-owner";
/// On a fan-out part of the finance report: answer with the report's figures as JSON.
pub const WANT_FIGURES: &str = "esim-want-figures";
/// On an answer whose body is the report's figures as JSON (asked by [`WANT_FIGURES`]).
pub const FIGURES: &str = "esim-finance-figures";
/// On a forwarded `PUT /admin/v1/inventory` from another node's pool fan-out: the owner
/// reads the store's pool row again and has the shard zero a block of an older pool
/// generation (its local `SyncPool`), answering `{"shard_esims": N}` (decision 192).
pub const POOL_SYNC: &str = "esim-pool-sync";
/// One forward (connect, send, whole answer read) ends after this long: 503.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Reading an owner's address from the store ends after this long: 503.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Forwards in flight from this node at once; past it, 503 at once.
pub const FORWARDS_IN_FLIGHT_MAX: usize = 512;
/// The largest answer a forward reads (a finance report of many accounts is the
/// largest answer the API gives).
pub const FORWARD_RESPONSE_MAX_BYTES: usize = 64 * 1024 * 1024;
/// A pooled connection to an owner idle this long is closed (below the owner's own
/// idle timeout, [`crate::edge::IDLE_TIMEOUT`]).
const POOL_IDLE: Duration = Duration::from_secs(20);
/// `Retry-After` of the 503s of forwarding.
pub const RETRY_AFTER_S: u64 = 1;
/// The request headers a forward carries (the owner checks the credential as for any
/// request; the others decide the answer).
const FORWARDED_HEADERS: [&str; 7] =
    ["authorization", "idempotency-key", "content-type", "accept", crate::edge::REQUEST_ID, WANT_FIGURES, POOL_SYNC];
/// Answer headers that belong to one connection, never copied from the owner's answer.
const HOP_BY_HOP: [&str; 4] = ["connection", "content-length", "transfer-encoding", "keep-alive"];

/// The headers only a node may send (dropped from any request no node signed).
const NODE_HEADERS: [&str; 4] = [FORWARDED_SHARD, WANT_FIGURES, POOL_SYNC, NODE_PROOF];

/// The key nodes sign their requests to each other with, derived from the admin token
/// (every node of a store holds the same one; a client does not).
#[derive(Clone)]
pub struct LinkKey(Hmac<sha2::Sha256>);

impl LinkKey {
    pub fn new(admin_token: &str) -> LinkKey {
        let mut derive = Hmac::<sha2::Sha256>::new_from_slice(admin_token.as_bytes()).expect("any key length");
        derive.update(b"esim node link v1");
        let key = derive.finalize().into_bytes();
        LinkKey(Hmac::new_from_slice(&key).expect("any key length"))
    }

    /// The proof a node sends with a request for `shard` (`target`: path and query).
    pub fn proof(&self, shard: usize, method: &http::Method, target: &str) -> String {
        let mut mac = self.0.clone();
        mac.update(format!("{shard}\n{method}\n{target}").as_bytes());
        let mut hex = String::with_capacity(64);
        for byte in mac.finalize().into_bytes() {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
        }
        hex
    }

    /// Whether `headers` carry a node's proof for their [`FORWARDED_SHARD`].
    fn signed(&self, headers: &http::HeaderMap, method: &http::Method, target: &str) -> bool {
        let (Some(shard), Some(proof)) = (headers.get(FORWARDED_SHARD), headers.get(NODE_PROOF)) else {
            return false;
        };
        let Some(shard) = shard.to_str().ok().and_then(|text| text.parse::<usize>().ok()) else { return false };
        esim_engine::engine::constant_time_eq(self.proof(shard, method, target).as_bytes(), proof.as_bytes())
    }
}

/// Keeps the node-only headers of a request another node signed, and drops them from
/// any other (a client's copies steer nothing): true when a node signed it.
pub fn screen_link(headers: &mut http::HeaderMap, method: &http::Method, target: &str, key: &LinkKey) -> bool {
    if !NODE_HEADERS.iter().any(|name| headers.contains_key(*name)) {
        return false;
    }
    if key.signed(headers, method, target) {
        return true;
    }
    for name in NODE_HEADERS {
        headers.remove(name);
    }
    false
}

/// Before a request for another node's shard `shard` is read or forwarded: its
/// credential as far as this node can check it. An admin or sandbox request needs the
/// admin token (verified); a reseller request a key of the right form naming `shard`
/// (unverified: only its owner holds the key directory, decision 215); a public request
/// needs none (`None`: its body is not read); a path outside every API is answered
/// here. `Err` is the answer, sent without reading the body.
pub fn screen_forward(
    matched: &Match<'_>,
    path: &str,
    headers: &http::HeaderMap,
    admin_token: &str,
    shard: usize,
    shards: usize,
) -> Result<Option<Credential>, ApiError> {
    let api = match matched {
        Match::Found(endpoint, _) => endpoint.api(),
        Match::NotFound | Match::WrongMethod(_) => match crate::routes::api_of_path(path) {
            Some(api) => api,
            None => return Err(crate::admission::outside_every_api(matched, path)),
        },
    };
    let credential = crate::api::bearer_str(headers);
    match api {
        Api::Public => Ok(None),
        Api::Admin | Api::Sandbox => {
            if esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes()) {
                Ok(Some(Credential::Verified))
            } else {
                Err(ApiError::new(ErrorCode::InvalidAdminToken, "missing or wrong admin token"))
            }
        }
        Api::Reseller if key_form_names(credential, shard, shards) => Ok(Some(Credential::Unverified)),
        Api::Reseller => Err(crate::admission::key_refusal(headers, admin_token)),
    }
}

/// Whether `key` has the form of an API key this service issues (`rsk_` and 64
/// lowercase hex digits) and names shard `shard` of `shards`.
fn key_form_names(key: &str, shard: usize, shards: usize) -> bool {
    let Some(hex) = key.strip_prefix("rsk_") else { return false };
    hex.len() == 64
        && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && crate::shards::shard_of_api_key(key, shards) == shard
}

/// 503 `SERVICE_UNAVAILABLE` with `Retry-After` and the spec's error body.
pub fn unavailable(message: String) -> http::Response<Bytes> {
    let mut error = ApiError::new(ErrorCode::ServiceUnavailable, message);
    error.retry_after_secs = Some(RETRY_AFTER_S);
    error_response(error)
}

/// What a node answers to a forwarded request for a shard it does not own.
pub fn not_owner(shard: usize) -> http::Response<Bytes> {
    let mut response = unavailable(format!(
        "this node does not own shard {shard}: the request was forwarded on an old owner address; try again"
    ));
    response.headers_mut().insert(NOT_OWNER, http::HeaderValue::from(shard));
    response
}

/// The shard a forwarded request names: `Ok(None)` when it is not forwarded, `Err` (the
/// spec's 400 `VALIDATION_ERROR`) when the header is not a shard of `shards`.
pub fn forwarded_shard(headers: &http::HeaderMap, shards: usize) -> Result<Option<usize>, ApiError> {
    let Some(value) = headers.get(FORWARDED_SHARD) else { return Ok(None) };
    match value.to_str().ok().and_then(|text| text.parse::<usize>().ok()) {
        Some(shard) if shard < shards => Ok(Some(shard)),
        _ => Err(ApiError::new(
            ErrorCode::ValidationError,
            format!("{FORWARDED_SHARD} must be a shard index below {shards}"),
        )),
    }
}

/// Sends requests for remote shards to their owners.
pub struct Forwarder {
    client: Client<HttpConnector, Full<Bytes>>,
    locator: Locator,
    /// Each shard's owner address as last read from the store (`None`: read it).
    addresses: Mutex<Vec<Option<String>>>,
    in_flight: tokio::sync::Semaphore,
}

/// Why one attempt failed.
enum Failed {
    /// Nothing reached an owner that could apply it (no address, a refused connection,
    /// an old owner): read the address again and try once more.
    Retry(String),
    /// The owner may have received it: answered as it is, never sent twice.
    Final(http::Response<Bytes>),
}

impl Forwarder {
    pub fn new(locator: Locator, shards: usize) -> Forwarder {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(FORWARD_TIMEOUT));
        connector.set_nodelay(true);
        Forwarder {
            // Idle connections are dropped before the owner's idle timeout closes them,
            // so a request is not sent on a connection the owner is closing.
            client: Client::builder(TokioExecutor::new()).pool_idle_timeout(POOL_IDLE).build(connector),
            locator,
            addresses: Mutex::new(vec![None; shards]),
            in_flight: tokio::sync::Semaphore::new(FORWARDS_IN_FLIGHT_MAX),
        }
    }

    /// Shard `shard`'s answer to `request` from its owner; 503 with `Retry-After` when
    /// it cannot be had. The answer's figures (see [`WANT_FIGURES`]) are put back in its
    /// extensions.
    pub async fn forward(&self, shard: usize, request: &http::Request<Bytes>, key: &LinkKey) -> http::Response<Bytes> {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return unavailable(format!(
                "{FORWARDS_IN_FLIGHT_MAX} requests are being forwarded to other nodes already"
            ));
        };
        let mut why = String::new();
        for _attempt in 0..2 {
            match self.attempt(shard, request, key).await {
                Ok(response) => return response,
                Err(Failed::Final(response)) => return response,
                Err(Failed::Retry(reason)) => {
                    self.addresses.lock().unwrap_or_else(|p| p.into_inner())[shard] = None;
                    why = reason;
                }
            }
        }
        tracing::warn!(shard, %why, "a request for another node's shard could not be forwarded");
        unavailable(format!("shard {shard}'s owner cannot be reached now ({why})"))
    }

    async fn address(&self, shard: usize) -> Result<String, Failed> {
        if let Some(address) = self.addresses.lock().unwrap_or_else(|p| p.into_inner())[shard].clone() {
            return Ok(address);
        }
        let found = tokio::time::timeout(LOOKUP_TIMEOUT, self.locator.address(shard)).await;
        let address = match found {
            Ok(Ok(Some(address))) => address,
            Ok(Ok(None)) => return Err(Failed::Retry(format!("the store names no owner address for shard {shard}"))),
            Ok(Err(error)) => return Err(Failed::Retry(format!("the store cannot be read: {error}"))),
            Err(_) => return Err(Failed::Retry("the store did not answer in time".into())),
        };
        self.addresses.lock().unwrap_or_else(|p| p.into_inner())[shard] = Some(address.clone());
        Ok(address)
    }

    async fn attempt(
        &self,
        shard: usize,
        request: &http::Request<Bytes>,
        key: &LinkKey,
    ) -> Result<http::Response<Bytes>, Failed> {
        let address = self.address(shard).await?;
        let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let uri = format!("{}{target}", address.trim_end_matches('/'));
        let mut builder = http::Request::builder().method(request.method().clone()).uri(&uri);
        for name in FORWARDED_HEADERS {
            for value in request.headers().get_all(name) {
                builder = builder.header(name, value);
            }
        }
        let outgoing = builder
            .header(FORWARDED_SHARD, shard)
            .header(NODE_PROOF, key.proof(shard, request.method(), target))
            .body(Full::new(request.body().clone()))
            .map_err(|e| Failed::Retry(format!("the owner address {address:?} is not usable: {e}")))?;
        let exchange = async {
            let response = match self.client.request(outgoing).await {
                Ok(response) => response,
                // Not connected: nothing was sent.
                Err(error) if error.is_connect() => return Err(Failed::Retry(format!("{address}: {error}"))),
                Err(error) => {
                    return Err(Failed::Final(unavailable(format!(
                        "shard {shard}'s owner at {address} failed while answering ({error}); if the request \
                         changed something, send it again with the same Idempotency-Key"
                    ))))
                }
            };
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, FORWARD_RESPONSE_MAX_BYTES).collect().await.map_err(|error| {
                Failed::Final(unavailable(format!("shard {shard}'s answer could not be read ({error})")))
            })?;
            Ok(http::Response::from_parts(parts, body.to_bytes()))
        };
        let response = match tokio::time::timeout(FORWARD_TIMEOUT, exchange).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(Failed::Final(unavailable(format!(
                    "shard {shard}'s owner at {address} did not answer within {} s; if the request changed something, \
                     send it again with the same Idempotency-Key",
                    FORWARD_TIMEOUT.as_secs()
                ))))
            }
        };
        if response.headers().contains_key(NOT_OWNER) {
            return Err(Failed::Retry(format!("{address} no longer owns shard {shard}")));
        }
        let (mut parts, body) = response.into_parts();
        for name in HOP_BY_HOP {
            parts.headers.remove(name);
        }
        let mut response = http::Response::from_parts(parts, body);
        if response.headers_mut().remove(FIGURES).is_some() {
            match serde_json::from_slice::<FiguresWire>(response.body()) {
                Ok(figures) => {
                    response.extensions_mut().insert(FinanceReport::from(figures));
                }
                Err(error) => {
                    return Err(Failed::Final(unavailable(format!(
                        "shard {shard}'s report figures are unreadable: {error}"
                    ))))
                }
            }
        }
        Ok(response)
    }
}

/// On the owner: the answer to a forwarded fan-out part that asked for the report's
/// figures ([`WANT_FIGURES`]) carries them as its JSON body.
pub fn figures_for_forward(request_headers: &http::HeaderMap, response: &mut http::Response<Bytes>) {
    if !request_headers.contains_key(WANT_FIGURES) || !request_headers.contains_key(FORWARDED_SHARD) {
        return;
    }
    if let Some(report) = response.extensions().get::<FinanceReport>() {
        let body = serde_json::to_vec(report).expect("a report serializes");
        *response.body_mut() = Bytes::from(body);
        response.headers_mut().insert(FIGURES, http::HeaderValue::from_static("1"));
        response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    }
}

/// The finance report as its JSON serialization says it (the engine's report types are
/// written, never read, so the wire form is read here; a test checks the round trip).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FiguresWire {
    generated_at: String,
    scope: String,
    period: PeriodWire,
    accounts: Vec<AccountWire>,
    total: AccountWire,
    days: Vec<DayWire>,
    conserved: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeriodWire {
    from: Option<String>,
    until: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountWire {
    account_id: String,
    company_name: Option<String>,
    opening: HoldingsWire,
    money_in: MoneyInWire,
    closing: HoldingsWire,
    spent: SpentWire,
    difference_usd: Decimal,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DayWire {
    date: String,
    money_in: MoneyInWire,
    moved_inside: MovedInsideWire,
    spent: SpentWire,
    closing: HoldingsWire,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MoneyInWire {
    top_ups_usd: Decimal,
    auto_refills_usd: Decimal,
    total_usd: Decimal,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldingsWire {
    reseller_balance_usd: Decimal,
    esim_wallets_usd: Decimal,
    group_balances_usd: Decimal,
    returns_pending_usd: Decimal,
    total_usd: Decimal,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpentWire {
    provisioning_fees_usd: Decimal,
    data_charged_reported_usd: Decimal,
    data_charged_unreported_usd: Decimal,
    forfeited_usd: Decimal,
    dust_usd: Decimal,
    total_usd: Decimal,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MovedInsideWire {
    esim_funds_usd: Decimal,
    group_funds_usd: Decimal,
    returns_requested_usd: Decimal,
    returns_settled_usd: Decimal,
}

impl From<MoneyInWire> for MoneyIn {
    fn from(w: MoneyInWire) -> MoneyIn {
        MoneyIn { top_ups_usd: w.top_ups_usd, auto_refills_usd: w.auto_refills_usd, total_usd: w.total_usd }
    }
}

impl From<HoldingsWire> for Holdings {
    fn from(w: HoldingsWire) -> Holdings {
        Holdings {
            reseller_balance_usd: w.reseller_balance_usd,
            esim_wallets_usd: w.esim_wallets_usd,
            group_balances_usd: w.group_balances_usd,
            returns_pending_usd: w.returns_pending_usd,
            total_usd: w.total_usd,
        }
    }
}

impl From<SpentWire> for Spent {
    fn from(w: SpentWire) -> Spent {
        Spent {
            provisioning_fees_usd: w.provisioning_fees_usd,
            data_charged_reported_usd: w.data_charged_reported_usd,
            data_charged_unreported_usd: w.data_charged_unreported_usd,
            forfeited_usd: w.forfeited_usd,
            dust_usd: w.dust_usd,
            total_usd: w.total_usd,
        }
    }
}

impl From<MovedInsideWire> for MovedInside {
    fn from(w: MovedInsideWire) -> MovedInside {
        MovedInside {
            esim_funds_usd: w.esim_funds_usd,
            group_funds_usd: w.group_funds_usd,
            returns_requested_usd: w.returns_requested_usd,
            returns_settled_usd: w.returns_settled_usd,
        }
    }
}

impl From<AccountWire> for AccountReport {
    fn from(w: AccountWire) -> AccountReport {
        AccountReport {
            account_id: w.account_id,
            company_name: w.company_name,
            opening: w.opening.into(),
            money_in: w.money_in.into(),
            closing: w.closing.into(),
            spent: w.spent.into(),
            difference_usd: w.difference_usd,
        }
    }
}

impl From<DayWire> for DayRow {
    fn from(w: DayWire) -> DayRow {
        DayRow {
            date: w.date,
            money_in: w.money_in.into(),
            moved_inside: w.moved_inside.into(),
            spent: w.spent.into(),
            closing: w.closing.into(),
        }
    }
}

impl From<FiguresWire> for FinanceReport {
    fn from(w: FiguresWire) -> FinanceReport {
        FinanceReport {
            generated_at: w.generated_at,
            scope: w.scope,
            period: PeriodText { from: w.period.from, until: w.period.until },
            accounts: w.accounts.into_iter().map(AccountReport::from).collect(),
            total: w.total.into(),
            days: w.days.into_iter().map(DayRow::from).collect(),
            conserved: w.conserved,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn money(text: &str) -> Decimal {
        text.parse().unwrap()
    }

    /// The report's JSON reads back into the same report: a field added to the engine's
    /// report (unknown here) or renamed fails this.
    #[test]
    fn figures_round_trip_exactly() {
        let holdings = Holdings {
            reseller_balance_usd: money("12.345678"),
            esim_wallets_usd: money("0.1"),
            group_balances_usd: money("3"),
            returns_pending_usd: money("0.000001"),
            total_usd: money("15.445679"),
        };
        let money_in = MoneyIn { top_ups_usd: money("20"), auto_refills_usd: money("0.5"), total_usd: money("20.5") };
        let spent = Spent {
            provisioning_fees_usd: money("1"),
            data_charged_reported_usd: money("2.25"),
            data_charged_unreported_usd: money("-0.75"),
            forfeited_usd: money("0"),
            dust_usd: money("0.000000001"),
            total_usd: money("2.500000001"),
        };
        let account = AccountReport {
            account_id: "acc_0102030405060708".into(),
            company_name: Some("Ünïcode \"Co\"".into()),
            opening: Holdings::default(),
            money_in: money_in.clone(),
            closing: holdings.clone(),
            spent: spent.clone(),
            difference_usd: money("0"),
        };
        let report = FinanceReport {
            generated_at: "2026-01-02T03:04:05.678Z".into(),
            scope: "one row per account".into(),
            period: PeriodText { from: Some("2026-01-01".into()), until: None },
            accounts: vec![account.clone(), AccountReport { company_name: None, ..account.clone() }],
            total: account,
            days: vec![DayRow {
                date: "2026-01-01".into(),
                money_in,
                moved_inside: MovedInside {
                    esim_funds_usd: money("5"),
                    group_funds_usd: money("1.5"),
                    returns_requested_usd: money("0.25"),
                    returns_settled_usd: money("0.125"),
                },
                spent,
                closing: holdings,
            }],
            conserved: true,
        };
        let json = serde_json::to_vec(&report).unwrap();
        let back: FiguresWire = serde_json::from_slice(&json).unwrap();
        assert_eq!(FinanceReport::from(back), report);
    }

    #[test]
    fn a_forwarded_shard_outside_the_count_is_refused() {
        let mut headers = http::HeaderMap::new();
        assert!(matches!(forwarded_shard(&headers, 4), Ok(None)));
        headers.insert(FORWARDED_SHARD, http::HeaderValue::from_static("3"));
        assert!(matches!(forwarded_shard(&headers, 4), Ok(Some(3))));
        for bad in ["4", "-1", "x", ""] {
            headers.insert(FORWARDED_SHARD, http::HeaderValue::from_static(bad));
            let refused = error_response(forwarded_shard(&headers, 4).unwrap_err());
            assert_eq!(refused.status(), 400, "{bad:?}");
        }
        let answer = not_owner(2);
        assert_eq!(answer.status(), 503);
        assert_eq!(answer.headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(answer.headers()[NOT_OWNER], "2");
    }

    /// A client's node-only headers are dropped; a node's signed ones stay, for the
    /// method, target and shard they were signed for only.
    #[test]
    fn only_a_node_may_name_a_shard() {
        let key = LinkKey::new("admin-token");
        let post = http::Method::POST;
        let target = "/sandbox/v1/clock/advance";
        let with = |pairs: &[(&'static str, String)]| {
            let mut headers = http::HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            headers
        };
        let mut client = with(&[(FORWARDED_SHARD, "1".into()), (WANT_FIGURES, "1".into()), (POOL_SYNC, "1".into())]);
        assert!(!screen_link(&mut client, &post, target, &key));
        assert!(client.is_empty(), "{client:?}");
        let proof = key.proof(1, &post, target);
        let mut node = with(&[(FORWARDED_SHARD, "1".into()), (NODE_PROOF, proof.clone()), (WANT_FIGURES, "1".into())]);
        assert!(screen_link(&mut node, &post, target, &key));
        assert_eq!(node.len(), 3);
        for (shard, method, path, signer) in [
            ("2", &post, target, &key),
            ("1", &http::Method::GET, target, &key),
            ("1", &post, "/sandbox/v1/clock", &key),
            ("1", &post, target, &LinkKey::new("another-token")),
        ] {
            let mut forged = with(&[(FORWARDED_SHARD, shard.into()), (NODE_PROOF, proof.clone())]);
            assert!(!screen_link(&mut forged, method, path, signer), "{shard} {method} {path}");
            assert!(forged.is_empty());
        }
    }

    #[test]
    fn a_forward_checks_what_this_node_can_before_the_body() {
        let key = format!("rsk_02{}", "ab".repeat(31));
        let bearer = |token: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            headers
        };
        let screen = |method: &str, path: &str, headers: &http::HeaderMap, shard: usize| {
            let matched = crate::routes::find(method, path);
            screen_forward(&matched, path, headers, "adm", shard, 4).map_err(|error| error.status())
        };
        let groups = "/api/v2/reseller/groups";
        assert_eq!(screen("POST", groups, &bearer(&key), 2), Ok(Some(Credential::Unverified)));
        assert_eq!(screen("POST", groups, &bearer(&key), 3), Err(401), "the key names another shard");
        assert_eq!(screen("POST", groups, &bearer("rsk_02garbled"), 2), Err(401));
        assert_eq!(screen("POST", groups, &http::HeaderMap::new(), 0), Err(401));
        assert_eq!(screen("POST", "/admin/v1/accounts", &bearer("adm"), 1), Ok(Some(Credential::Verified)));
        assert_eq!(screen("POST", "/admin/v1/accounts", &bearer(&key), 1), Err(401));
        assert_eq!(screen("POST", "/x", &http::HeaderMap::new(), 0), Err(404));
        assert_eq!(screen("GET", "/api/v2/reseller/openapi.json", &http::HeaderMap::new(), 0), Ok(None));
    }
}
