//! Accounts sharded over engines, in one process (issue 17, first slice; decisions 168
//! to 173).
//!
//! Each shard is one engine with its own journal and owner task. A request goes to one
//! shard without a lookup, because every id it can route by names its shard:
//! - API keys (`rsk_`), account ids (`acc_`), webhook ids (`wh_`), event ids (`evt_`),
//!   eSIM and group UUIDs: their first random byte is the shard's index;
//! - ICCIDs: serials of shard k are k modulo the shard count.
//!
//! One function per id kind reads the shard back ([`shard_of_api_key`] and the rest).
//! Text that is no id of this service (garbled, another shard count's) goes to shard 0,
//! which answers as for any unknown id: the spec's `401 INVALID_API_KEY` or not-found.
//!
//! Requests naming no id fan out ([`FanOut`]): the sandbox clock moves every shard to
//! the same time, admin lists merge in a stable order (shard by shard, each oldest
//! first), the finance report shows each shard and the total. With one shard nothing
//! here runs: every request goes to shard 0, as before sharding.

use crate::api::{bearer_str, error_response, json_response};
pub use crate::routes::FanOut;
use crate::routes::{Match, ShardBy};
use bytes::Bytes;
use esim_engine::finance::FinanceReport;
use esim_engine::{ApiError, ErrorCode, Millis};
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};

/// The shard named by a hex id behind `prefix` (its first byte), if it is one.
fn shard_of_hex(id: &str, prefix: &str, shards: usize) -> Option<usize> {
    let hex = id.strip_prefix(prefix)?;
    let first = u8::from_str_radix(hex.get(..2)?, 16).ok()?;
    // Every id drawn has more than one byte and is lowercase hex.
    if hex.len() <= 2 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    Some(first as usize).filter(|&shard| shard < shards)
}

/// The shard of an API key (`rsk_` + 64 hex digits, its first byte the shard).
pub fn shard_of_api_key(api_key: &str, shards: usize) -> usize {
    shard_of_hex(api_key, "rsk_", shards).unwrap_or(0)
}

/// The shard of an account id (`acc_` + 16 hex digits).
pub fn shard_of_account_id(account_id: &str, shards: usize) -> usize {
    shard_of_hex(account_id, "acc_", shards).unwrap_or(0)
}

/// The shard of a webhook id (`wh_` + 16 hex digits).
pub fn shard_of_webhook_id(webhook_id: &str, shards: usize) -> usize {
    shard_of_hex(webhook_id, "wh_", shards).unwrap_or(0)
}

/// The shard of an event id (`evt_` + 24 hex digits).
pub fn shard_of_event_id(event_id: &str, shards: usize) -> usize {
    shard_of_hex(event_id, "evt_", shards).unwrap_or(0)
}

/// The shard of an eSIM or group id (a UUID whose first byte is the shard).
pub fn shard_of_uuid(id: &str, shards: usize) -> usize {
    let is_uuid = id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if !is_uuid {
        return 0;
    }
    let first = u8::from_str_radix(&id[..2], 16).expect("two hex digits") as usize;
    if first < shards {
        first
    } else {
        0
    }
}

/// The shard of an ICCID: its 12-digit serial modulo the shard count.
pub fn shard_of_iccid(iccid: &str, shards: usize) -> usize {
    if iccid.len() != 19 || !iccid.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let serial: u64 = iccid[6..18].parse().expect("12 digits");
    (serial % shards as u64) as usize
}

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// To this shard's engine.
    Shard(usize),
    /// A new account: to the shard the node places it on (round-robin, decision 169).
    NewAccount,
    /// To every shard, the answers merged.
    FanOut(FanOut),
}

/// Where a matched request goes among `shards` shards: what the endpoint table says
/// ([`crate::routes::Endpoint::shard_by`]), with the shard read from the id the request names.
pub fn route(matched: &Match<'_>, query: Option<&str>, headers: &http::HeaderMap, shards: usize) -> Route {
    if shards <= 1 {
        return Route::Shard(0);
    }
    let (endpoint, params) = match matched {
        Match::Found(endpoint, params) => (*endpoint, params),
        // 404 or 405 from any shard.
        Match::WrongMethod(_) | Match::NotFound => return Route::Shard(0),
    };
    let first_param = || params.first().map(String::as_str).unwrap_or("");
    let shard = match endpoint.shard_by() {
        // The key's shard holds the account and everything it owns.
        ShardBy::Key => shard_of_api_key(bearer_str(headers), shards),
        ShardBy::Any => 0,
        ShardBy::NewAccount => return Route::NewAccount,
        ShardBy::AccountId => shard_of_account_id(first_param(), shards),
        ShardBy::ApiKey => shard_of_api_key(first_param(), shards),
        ShardBy::Iccid => shard_of_iccid(first_param(), shards),
        ShardBy::Every(kind) => return Route::FanOut(kind),
        ShardBy::AccountQueryOrEvery(kind) => {
            let query = crate::api::parse_query(query);
            match crate::api::query_value(&query, "account_id") {
                Some(account_id) => shard_of_account_id(account_id, shards),
                None => return Route::FanOut(kind),
            }
        }
    };
    Route::Shard(shard)
}

/// A copy of `request` (method, headers, version) with another path and query and body.
fn sub_request(request: &http::Request<Bytes>, path_and_query: &str, body: Bytes) -> http::Request<Bytes> {
    let mut copy = http::Request::builder()
        .method(request.method().clone())
        .uri(path_and_query)
        .version(request.version())
        .body(body)
        .expect("a path of a valid request");
    *copy.headers_mut() = request.headers().clone();
    // The part's body is its own (never sent on a wire, but kept truthful).
    copy.headers_mut().remove(http::header::CONTENT_LENGTH);
    copy
}

fn same(request: &http::Request<Bytes>) -> http::Request<Bytes> {
    let target = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/").to_string();
    sub_request(request, &target, request.body().clone())
}

fn body_json(response: &http::Response<Bytes>) -> Option<Value> {
    serde_json::from_slice(response.body()).ok()
}

fn ok(response: &http::Response<Bytes>) -> bool {
    response.status().is_success()
}

fn internal(why: &str) -> http::Response<Bytes> {
    tracing::error!(%why, "a fan-out answer could not be merged");
    error_response(ApiError::new(
        ErrorCode::ServiceUnavailable,
        format!("the shards' answers could not be merged: {why}"),
    ))
}

/// Answers a fan-out request over `shards` shards; `ask(k, request)` is shard k's
/// answer (through its owner task, so after what it applied before is durable). The
/// first shard refusing (an error status) gives the answer.
pub async fn fan_out<F, Fut>(
    kind: FanOut,
    request: &http::Request<Bytes>,
    shards: usize,
    ask: F,
) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    match kind {
        FanOut::ListAccounts => list_accounts(request, shards, ask).await,
        FanOut::Report => report(request, shards, ask).await,
        FanOut::State => state(request, shards, ask).await,
        FanOut::AdvanceClock => advance_clock(request, shards, ask).await,
        FanOut::SetInventory => set_inventory(request, shards, ask).await,
        FanOut::Pending => pending(request, shards, ask).await,
        FanOut::SetFaults => {
            let mut first = None;
            for shard in 0..shards {
                let answer = ask(shard, same(request)).await;
                if !ok(&answer) {
                    return answer;
                }
                first.get_or_insert(answer);
            }
            first.expect("at least one shard")
        }
    }
}

/// Shard k's accounts come after every account of shards 0..k (each shard's oldest
/// first): the order is stable, and a page needs at most two answers of each shard.
async fn list_accounts<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    const PATH: &str = "/admin/v1/accounts";
    // Shard 0 checks the query and answers its own share of the page.
    let first = ask(0, same(request)).await;
    if !ok(&first) {
        return first;
    }
    let Some(mut merged) = body_json(&first) else { return internal("shard 0 answered no JSON") };
    let read = |value: &Value, name: &str| value.get(name).and_then(Value::as_u64);
    let (Some(limit), Some(offset), Some(total_0)) =
        (read(&merged, "limit"), read(&merged, "offset"), read(&merged, "total"))
    else {
        return internal("shard 0's page has no limit, offset or total");
    };
    let mut listed = Vec::new();
    let mut take = |shard: usize, page: &Value| {
        for account in page.get("accounts").and_then(Value::as_array).into_iter().flatten() {
            let mut account = account.clone();
            account["shard"] = Value::from(shard);
            listed.push(account);
        }
    };
    take(0, &merged);
    let mut start = total_0;
    let end = offset.saturating_add(limit);
    for shard in 1..shards {
        let counted = ask(shard, sub_request(request, &format!("{PATH}?limit=1&offset=0"), Bytes::new())).await;
        let Some(total) = body_json(&counted).as_ref().and_then(|v| read(v, "total")) else {
            return if ok(&counted) { internal("a shard's page has no total") } else { counted };
        };
        let (from, to) = (offset.max(start), end.min(start + total));
        if from < to {
            let path = format!("{PATH}?limit={}&offset={}", to - from, from - start);
            let page = ask(shard, sub_request(request, &path, Bytes::new())).await;
            match body_json(&page) {
                Some(body) if ok(&page) => take(shard, &body),
                _ => return page,
            }
        }
        start += total;
    }
    merged["accounts"] = Value::Array(listed);
    merged["total"] = Value::from(start);
    json_response(200, serde_json::to_vec(&merged).expect("json"))
}

/// Each shard's report (carried beside its rendering, [`crate::service`]), combined:
/// a row per shard (its accounts summed) and the total, exact.
async fn report<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let mut parts = Vec::with_capacity(shards);
    let mut generated_at = String::new();
    for shard in 0..shards {
        let mut answer = ask(shard, same(request)).await;
        if !ok(&answer) {
            return answer;
        }
        let Some(report) = answer.extensions_mut().remove::<FinanceReport>() else {
            return internal("a shard's report came without its figures");
        };
        generated_at = generated_at.max(report.generated_at.clone());
        parts.push((format!("shard-{shard}"), None, report));
    }
    let combined = combine_reports(generated_at, parts);
    let query = crate::api::parse_query(request.uri().query());
    let format = crate::api::query_value(&query, "format").unwrap_or("json");
    let Some(body) = combined.render(format) else { return internal("a format the shards accepted") };
    let mut response = json_response(200, body);
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(FinanceReport::content_type(format)));
    response
}

/// The report of a sharded service: one row per shard (`shard-k`, its accounts summed)
/// and the total (also what `esim report` prints for a sharded data dir).
pub fn combine_reports(generated_at: String, parts: Vec<(String, Option<String>, FinanceReport)>) -> FinanceReport {
    use esim_engine::finance_render::count;
    let accounts: usize = parts.iter().map(|(_, _, part)| part.accounts.len()).sum();
    let shards = parts.len();
    let (shards, accounts) = (count(shards, "shard", "shards"), count(accounts, "account", "accounts"));
    FinanceReport::combine(
        generated_at,
        format!(
            "one row per shard ({shards}): each shard's accounts summed ({accounts} in all); the per-day table sums every shard's day by date"
        ),
        parts,
    )
}

/// One digest over the shards' digests (SHA-256 of `k:digest` lines), each shown too.
pub fn combined_digest(digests: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (shard, digest) in digests.iter().enumerate() {
        hasher.update(format!("{shard}:{digest}\n").as_bytes());
    }
    crate::secrets::hex(&hasher.finalize())
}

async fn state<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let mut listed = Vec::with_capacity(shards);
    let mut digests = Vec::with_capacity(shards);
    let (mut now, mut writes) = (String::new(), "accepted".to_string());
    for shard in 0..shards {
        let answer = ask(shard, same(request)).await;
        if !ok(&answer) {
            return answer;
        }
        let Some(mut body) = body_json(&answer) else { return internal("a shard's state is no JSON") };
        let text = |name: &str| body.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
        digests.push(text("state_digest"));
        now = now.max(text("now"));
        if writes == "accepted" && text("writes") != "accepted" {
            writes = format!("shard {shard}: {}", text("writes"));
        }
        body["shard"] = Value::from(shard);
        listed.push(body);
    }
    let available: u64 = listed.iter().filter_map(|body| body["inventory"]["available"].as_u64()).sum();
    let body = serde_json::json!({
        "state_digest": combined_digest(&digests),
        "now": now,
        "writes": writes,
        "inventory": { "available": available },
        "shards": listed,
    });
    json_response(200, serde_json::to_vec(&body).expect("json"))
}

/// The clock of shard k as its `GET /sandbox/v1/clock` shows it.
async fn clock_of<F, Fut>(
    request: &http::Request<Bytes>,
    shard: usize,
    ask: &F,
) -> Result<Millis, http::Response<Bytes>>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let mut read = sub_request(request, "/sandbox/v1/clock", Bytes::new());
    *read.method_mut() = http::Method::GET;
    let answer = ask(shard, read).await;
    if !ok(&answer) {
        return Err(answer);
    }
    body_json(&answer)
        .and_then(|body| body.get("now").and_then(Value::as_str).and_then(Millis::parse_rfc3339))
        .ok_or_else(|| internal("a shard's clock shows no time"))
}

/// Every shard to the same time: the shard furthest ahead takes the request as it came
/// (and checks it), then each other shard advances by what it lacks to that time. So
/// shards that drifted apart (an advance refused on one of them) meet again at the next
/// advance.
async fn advance_clock<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let mut clocks = Vec::with_capacity(shards);
    for shard in 0..shards {
        match clock_of(request, shard, &ask).await {
            Ok(now) => clocks.push(now),
            Err(answer) => return answer,
        }
    }
    let leader = (0..shards).max_by_key(|&k| (clocks[k], std::cmp::Reverse(k))).expect("at least one shard");
    let answer = ask(leader, same(request)).await;
    if !ok(&answer) {
        return answer;
    }
    let Some(target) =
        body_json(&answer).and_then(|b| b.get("now").and_then(Value::as_str).and_then(Millis::parse_rfc3339))
    else {
        return internal("the advanced clock shows no time");
    };
    for shard in (0..shards).filter(|&k| k != leader) {
        let behind_ms = target.0 - clocks[shard].0;
        if behind_ms <= 0 {
            continue;
        }
        let seconds = rust_decimal::Decimal::new(behind_ms, 3).normalize();
        let body = Bytes::from(serde_json::json!({ "seconds": seconds }).to_string());
        let moved = ask(shard, sub_request(request, "/sandbox/v1/clock/advance", body)).await;
        if !ok(&moved) {
            return moved;
        }
    }
    answer
}

/// Every shard's pending timers, soonest first (shards in order on a tie), the first
/// `limit` of them (each shard's answer holds its own first `limit`, so the merge has them
/// all); the total over every shard.
async fn pending<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let (mut now, mut total, mut limit) = (String::new(), 0u64, 0u64);
    let mut timers: Vec<(String, usize, Value)> = Vec::new();
    for shard in 0..shards {
        let answer = ask(shard, same(request)).await;
        if !ok(&answer) {
            return answer;
        }
        let Some(body) = body_json(&answer) else { return internal("a shard's pending timers are no JSON") };
        now = now.max(body["now"].as_str().unwrap_or_default().to_string());
        total += body["total"].as_u64().unwrap_or(0);
        limit = limit.max(body["limit"].as_u64().unwrap_or(0));
        for timer in body["timers"].as_array().into_iter().flatten() {
            let due = timer["due_at"].as_str().unwrap_or_default().to_string();
            timers.push((due, shard, timer.clone()));
        }
    }
    // RFC 3339 times of one format sort as text; the sort is stable within a shard.
    timers.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let listed: Vec<Value> = timers.into_iter().take(limit as usize).map(|(_, _, timer)| timer).collect();
    let body = serde_json::json!({ "now": now, "total": total, "limit": limit, "timers": listed });
    json_response(200, serde_json::to_vec(&body).expect("json"))
}

/// `available` split over the shards as evenly as whole eSIMs go (the lower shards take
/// the remainder), each shard's stock its own in this slice (decision 171).
pub fn split_inventory(available: u64, shards: usize) -> Vec<u64> {
    let n = shards as u64;
    (0..n).map(|k| available / n + u64::from(k < available % n)).collect()
}

async fn set_inventory<F, Fut>(request: &http::Request<Bytes>, shards: usize, ask: F) -> http::Response<Bytes>
where
    F: Fn(usize, http::Request<Bytes>) -> Fut,
    Fut: Future<Output = http::Response<Bytes>>,
{
    let available = serde_json::from_slice::<Value>(request.body()).ok().and_then(|b| b.get("available")?.as_u64());
    let Some(available) = available else {
        // Shard 0 says what is wrong with the body.
        return ask(0, same(request)).await;
    };
    let mut per_shard = Vec::with_capacity(shards);
    for (shard, share) in split_inventory(available, shards).into_iter().enumerate() {
        let path = request.uri().path().to_string();
        let answer = ask(shard, sub_request(request, &path, Bytes::from(format!(r#"{{"available":{share}}}"#)))).await;
        if !ok(&answer) {
            return answer;
        }
        per_shard.push(share);
    }
    let body = serde_json::json!({ "available": available, "shards": per_shard });
    json_response(200, serde_json::to_vec(&body).expect("json"))
}

/// On the virtual clock, every shard starts at the time of the shard furthest ahead: a
/// crash between the shards' parts of one clock advance leaves them apart, and `GET
/// /sandbox/v1/clock` reads shard 0 (decision 171). Each shard behind advances as the
/// sandbox request would (journaled: the caller appends its entries).
pub fn align_virtual_clocks(mut services: Vec<&mut crate::Service>) -> Result<(), String> {
    let Some(ahead) = services.iter().map(|service| service.shown_now()).max() else { return Ok(()) };
    for (shard, service) in services.iter_mut().enumerate() {
        let behind_ms = ahead.0 - service.shown_now().0;
        if service.clock() != crate::ClockMode::Virtual || behind_ms <= 0 {
            continue;
        }
        let seconds = rust_decimal::Decimal::new(behind_ms, 3).normalize();
        let request = http::Request::builder()
            .method("POST")
            .uri("/sandbox/v1/clock/advance")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", service.admin_token()))
            .body(Bytes::from(serde_json::json!({ "seconds": seconds }).to_string()))
            .expect("a valid request");
        match service.handle(ahead, &request) {
            crate::Outcome::Respond(response) if response.status().is_success() => {
                tracing::warn!(shard, behind_ms, "this shard's virtual clock was behind the others: moved to {ahead}");
            }
            _ => return Err(format!("shard {shard}'s virtual clock could not be moved to {ahead}")),
        }
    }
    Ok(())
}

/// The file of a sharded data dir that records its shard count (decision 170).
pub const SHARDS_FILE: &str = "shards";

/// Where shard k of a sharded data dir keeps its journal and snapshots (a data dir of
/// its own inside, as [`crate::journal`] lays one out).
pub fn shard_dir(data_dir: &Path, shard: u32) -> PathBuf {
    data_dir.join(format!("shard-{shard}"))
}

/// The shard count a data dir was made with: its `shards` file; else 1 when it holds
/// an unsharded journal (a data dir made before sharding, or with one shard); else
/// `None`, a new data dir.
pub fn recorded_shards(data_dir: &Path) -> Result<Option<u32>, String> {
    let path = data_dir.join(SHARDS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(count) if (2..=esim_engine::config::SHARD_COUNT_MAX).contains(&count) => Ok(Some(count)),
            _ => Err(format!("{} does not hold a shard count (2 to 64): {:?}", path.display(), text.trim())),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let journal = data_dir.join("journal");
            let unsharded = std::fs::read_dir(&journal).map(|mut entries| entries.next().is_some()).unwrap_or(false);
            Ok(unsharded.then_some(1))
        }
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Records the shard count of a new sharded data dir (mode 0600, synced with its
/// directory) before any shard's journal exists, so a crash never leaves shard
/// journals without it.
pub fn record_shards(data_dir: &Path, shards: u32) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = crate::secrets::private_file(&data_dir.join(SHARDS_FILE))?;
    file.write_all(format!("{shards}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// The shard count to serve `data_dir` with: `asked` (the flag) or what the data dir
/// holds; a data dir refuses another count than it was made with, since every id it
/// issued names its shard.
pub fn shards_to_serve(data_dir: &Path, asked: Option<u32>) -> Result<(u32, bool), String> {
    let recorded = recorded_shards(data_dir)?;
    match (recorded, asked) {
        (Some(recorded), Some(asked)) if recorded != asked => Err(format!(
            "the data dir {} was made with {recorded} shard(s) and cannot be served with --shards {asked}: every id \
             it issued names its shard; start it with --shards {recorded} (or without --shards)",
            data_dir.display()
        )),
        (Some(recorded), _) => Ok((recorded, false)),
        (None, asked) => Ok((asked.unwrap_or(1), true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::{Api, Endpoint};
    use crate::secrets::Secrets;
    use crate::service::{ClockMode, Outcome, Service};
    use esim_engine::{Engine, EngineConfig};
    use serde_json::json;

    const ADMIN: &str = "adm";

    fn call(service: &mut Service, method: &str, path: &str, token: &str, body: Value) -> Value {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) })
            .unwrap();
        let Outcome::Respond(response) = service.handle(Millis::VIRTUAL_EPOCH, &request) else {
            panic!("no webhook test here")
        };
        assert!(response.status().is_success(), "{method} {path}: {:?}", response.body());
        serde_json::from_slice(response.body()).unwrap()
    }

    /// Shard `shard` of `shards`: an account with an eSIM, a group, a webhook and events.
    fn ids_of_a_shard(shard: u32, shards: u32) -> Vec<(&'static str, String)> {
        let config = EngineConfig {
            seed: 9,
            shard,
            shard_count: shards,
            allow_insecure_webhooks: true,
            ..EngineConfig::default()
        };
        let mut secrets = Secrets::seeded(9);
        secrets.set_shard(shard, shards);
        let engine = Engine::new(config, Millis::VIRTUAL_EPOCH);
        let mut service = Service::new(engine, ADMIN.into(), ClockMode::Virtual, secrets);
        let created = call(&mut service, "POST", "/admin/v1/accounts", ADMIN, json!({"contact_email": "a@b.example"}));
        let account = created["account_id"].as_str().unwrap().to_string();
        let key = created["api_key"].as_str().unwrap().to_string();
        call(&mut service, "POST", &format!("/admin/v1/accounts/{account}/topups"), ADMIN, json!({"amount_usd": 50}));
        let r = "/api/v2/reseller";
        let mut ids = vec![("account", account), ("key", key.clone())];
        for _ in 0..3 {
            let esim = call(&mut service, "POST", &format!("{r}/esim/provision"), &key, json!({}));
            ids.push(("iccid", esim["iccid"].as_str().unwrap().to_string()));
            ids.push(("uuid", esim["id"].as_str().unwrap_or_else(|| panic!("{esim}")).to_string()));
        }
        let group = call(&mut service, "POST", &format!("{r}/groups"), &key, json!({"name": "g"}));
        ids.push(("uuid", group["id"].as_str().unwrap_or_else(|| panic!("{group}")).to_string()));
        let hook = call(
            &mut service,
            "POST",
            &format!("{r}/webhooks"),
            &key,
            json!({"url": "http://127.0.0.1:9/h", "events": ["*"]}),
        );
        ids.push(("webhook", hook["id"].as_str().unwrap().to_string()));
        let events = call(&mut service, "GET", &format!("{r}/events"), &key, Value::Null);
        let events = events["events"].as_array().unwrap_or_else(|| panic!("{events}")).clone();
        assert!(events.len() >= 4, "{events:?}");
        for event in events {
            ids.push(("event", event["id"].as_str().unwrap().to_string()));
        }
        ids
    }

    fn shard_of(kind: &str, id: &str, shards: usize) -> usize {
        match kind {
            "account" => shard_of_account_id(id, shards),
            "key" => shard_of_api_key(id, shards),
            "iccid" => shard_of_iccid(id, shards),
            "uuid" => shard_of_uuid(id, shards),
            "webhook" => shard_of_webhook_id(id, shards),
            "event" => shard_of_event_id(id, shards),
            other => unreachable!("{other}"),
        }
    }

    #[test]
    fn every_id_a_shard_makes_reads_back_as_that_shard() {
        let mut seen = std::collections::BTreeSet::new();
        for shards in [2u32, 4, 64] {
            for shard in std::collections::BTreeSet::from([0, 1, shards - 1]) {
                for (kind, id) in ids_of_a_shard(shard, shards) {
                    assert_eq!(
                        shard_of(kind, &id, shards as usize),
                        shard as usize,
                        "{kind} {id} of shard {shard}/{shards}"
                    );
                    assert!(seen.insert((shards, id.clone())), "{id} made twice");
                }
            }
        }
    }

    #[test]
    fn iccids_of_shards_never_meet() {
        let mut all = std::collections::BTreeSet::new();
        for shard in 0..4 {
            for (kind, id) in ids_of_a_shard(shard, 4) {
                if kind == "iccid" {
                    assert!(all.insert(id.clone()), "{id} issued by two shards");
                }
            }
        }
        assert_eq!(all.len(), 12);
    }

    #[test]
    fn garbled_and_foreign_ids_go_to_shard_zero() {
        for text in ["", "acc_", "acc_zz00", "acc_07", "acc_FF00112233445566", "acc_ff00112233445566", "rsk_", "wh_3"] {
            assert_eq!(shard_of_account_id(text, 4), 0, "{text}");
            assert_eq!(shard_of_api_key(text, 4), 0, "{text}");
            assert_eq!(shard_of_webhook_id(text, 4), 0, "{text}");
            assert_eq!(shard_of_event_id(text, 4), 0, "{text}");
            assert_eq!(shard_of_uuid(text, 4), 0, "{text}");
            assert_eq!(shard_of_iccid(text, 4), 0, "{text}");
        }
        assert_eq!(shard_of_account_id("acc_0300112233445566", 4), 3);
        assert_eq!(shard_of_account_id("acc_0400112233445566", 4), 0, "shard 4 of 4 does not exist");
        assert_eq!(shard_of_iccid("89441000000000000x1", 4), 0);
        assert_eq!(shard_of_iccid(&esim_engine::codes::iccid_for_serial(7), 4), 3);
        assert_eq!(shard_of_uuid("02345678-1234-4234-8234-123456789abc", 4), 2);
        for shards in [1, 2, 64] {
            assert_eq!(shard_of_account_id("acc_0100112233445566", shards), usize::from(shards > 1));
        }
    }

    #[test]
    fn one_shard_routes_everything_to_it() {
        let headers = http::HeaderMap::new();
        for endpoint in Endpoint::ALL {
            let params = vec!["acc_0300112233445566".to_string(); endpoint.parameters().count()];
            assert_eq!(route(&Match::Found(*endpoint, params), None, &headers, 1), Route::Shard(0));
        }
    }

    /// The table's shard column agrees with the rest of the table: reseller calls go by
    /// their key and only they; an id read from the path is the path's first parameter,
    /// of that kind.
    #[test]
    fn the_shard_column_of_the_table_fits_each_endpoint() {
        for &endpoint in Endpoint::ALL {
            let by = endpoint.shard_by();
            assert_eq!(by == ShardBy::Key, endpoint.api() == Api::Reseller, "{endpoint:?}");
            let first = endpoint.parameters().next();
            match by {
                ShardBy::AccountId => assert_eq!(first, Some("account_id"), "{endpoint:?}"),
                ShardBy::ApiKey => assert_eq!(first, Some("api_key"), "{endpoint:?}"),
                ShardBy::Iccid => assert_eq!(first, Some("iccid"), "{endpoint:?}"),
                _ => {}
            }
        }
    }

    #[test]
    fn requests_route_by_the_id_they_name() {
        let mut headers = http::HeaderMap::new();
        let key = format!("rsk_02{}", "ab".repeat(31));
        headers.insert(http::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
        let found = |endpoint: Endpoint, param: &str| {
            Match::Found(endpoint, vec![param.to_string(); endpoint.parameters().count()])
        };
        let iccid = esim_engine::codes::iccid_for_serial(5);
        assert_eq!(route(&found(Endpoint::FundEsim, &iccid), None, &headers, 4), Route::Shard(2), "by the key");
        assert_eq!(route(&found(Endpoint::Usage, &iccid), None, &headers, 4), Route::Shard(1), "by the ICCID");
        assert_eq!(route(&found(Endpoint::TopUp, "acc_0300112233445566"), None, &headers, 4), Route::Shard(3));
        assert_eq!(route(&found(Endpoint::RevokeKey, &key), None, &headers, 4), Route::Shard(2));
        assert_eq!(route(&found(Endpoint::CreateAccount, ""), None, &headers, 4), Route::NewAccount);
        assert_eq!(
            route(&found(Endpoint::ConservationReport, ""), Some("account_id=acc_0100112233445566"), &headers, 4),
            Route::Shard(1)
        );
        assert_eq!(
            route(&found(Endpoint::ConservationReport, ""), Some("format=csv"), &headers, 4),
            Route::FanOut(FanOut::Report)
        );
        assert_eq!(route(&found(Endpoint::AdvanceClock, ""), None, &headers, 4), Route::FanOut(FanOut::AdvanceClock));
        assert_eq!(route(&Match::NotFound, None, &headers, 4), Route::Shard(0));
    }

    #[test]
    fn a_data_dir_keeps_its_shard_count() {
        let dir = std::env::temp_dir().join(format!("esim-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(shards_to_serve(&dir, None).unwrap(), (1, true), "new, default");
        assert_eq!(shards_to_serve(&dir, Some(4)).unwrap(), (4, true), "new, asked");
        record_shards(&dir, 4).unwrap();
        assert_eq!(shards_to_serve(&dir, None).unwrap(), (4, false));
        assert_eq!(shards_to_serve(&dir, Some(4)).unwrap(), (4, false));
        let refused = shards_to_serve(&dir, Some(2)).unwrap_err();
        assert!(refused.contains("made with 4 shard(s)") && refused.contains("--shards 2"), "{refused}");
        std::fs::write(dir.join(SHARDS_FILE), "many").unwrap();
        assert!(shards_to_serve(&dir, None).unwrap_err().contains("does not hold a shard count"));
        std::fs::remove_file(dir.join(SHARDS_FILE)).unwrap();
        std::fs::create_dir_all(dir.join("journal")).unwrap();
        std::fs::write(dir.join("journal").join("00000000000000000000.seg"), b"x").unwrap();
        assert_eq!(shards_to_serve(&dir, None).unwrap(), (1, false), "an unsharded journal");
        assert!(shards_to_serve(&dir, Some(4)).unwrap_err().contains("made with 1 shard(s)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shards_apart_on_the_virtual_clock_start_together() {
        let shard = |k: u32| {
            let config = EngineConfig { seed: 1, shard: k, shard_count: 3, ..EngineConfig::default() };
            Service::new(
                Engine::new(config, Millis::VIRTUAL_EPOCH),
                ADMIN.into(),
                ClockMode::Virtual,
                Secrets::seeded(1),
            )
        };
        let (mut a, mut b, mut c) = (shard(0), shard(1), shard(2));
        call(&mut b, "POST", "/sandbox/v1/clock/advance", ADMIN, json!({"seconds": 90.5}));
        let _ = b.drain_journal();
        align_virtual_clocks(vec![&mut a, &mut b, &mut c]).unwrap();
        let ahead = Millis::VIRTUAL_EPOCH.plus_ms(90_500);
        for service in [&mut a, &mut b, &mut c] {
            assert_eq!(service.shown_now(), ahead);
            assert_eq!(service.engine().now(), ahead);
        }
        assert_eq!(a.drain_journal().len(), 1, "the move is journaled");
        assert!(b.drain_journal().is_empty(), "the shard ahead stays");
    }

    /// Runs a fan-out whose shards answer at once (no runtime needed: nothing waits).
    fn fan_out_now(kind: FanOut, request: &http::Request<Bytes>, shards: &mut [Service]) -> Value {
        let shards = std::cell::RefCell::new(shards);
        let ask = |k: usize, part: http::Request<Bytes>| {
            let Outcome::Respond(answer) = shards.borrow_mut()[k].handle(Millis::VIRTUAL_EPOCH, &part) else {
                panic!("no webhook test here")
            };
            std::future::ready(answer)
        };
        let count = shards.borrow().len();
        let mut future = std::pin::pin!(fan_out(kind, request, count, ask));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let std::task::Poll::Ready(answer) = future.as_mut().poll(&mut context) else { panic!("it waited") };
        assert!(answer.status().is_success(), "{:?}", answer.body());
        serde_json::from_slice(answer.body()).unwrap()
    }

    #[test]
    fn pending_timers_and_inventories_merge_over_the_shards() {
        let mut shards: Vec<Service> = (0..2)
            .map(|k| {
                let config = EngineConfig { seed: 3, shard: k, shard_count: 2, ..EngineConfig::default() };
                let mut secrets = Secrets::seeded(3);
                secrets.set_shard(k, 2);
                Service::new(Engine::new(config, Millis::VIRTUAL_EPOCH), ADMIN.into(), ClockMode::Virtual, secrets)
            })
            .collect();
        let r = "/api/v2/reseller";
        for (k, service) in shards.iter_mut().enumerate() {
            let created = call(service, "POST", "/admin/v1/accounts", ADMIN, json!({"contact_email": "a@b.example"}));
            let (account, key) = (created["account_id"].as_str().unwrap(), created["api_key"].as_str().unwrap());
            call(service, "POST", &format!("/admin/v1/accounts/{account}/topups"), ADMIN, json!({"amount_usd": 50}));
            let iccid = call(service, "POST", &format!("{r}/esim/provision"), key, json!({}))["iccid"].clone();
            let iccid = iccid.as_str().unwrap();
            call(service, "POST", &format!("/sandbox/v1/esims/{iccid}/install"), ADMIN, Value::Null);
            call(service, "POST", &format!("{r}/esim/{iccid}/fund"), key, json!({"amount": 10}));
            // Shard 1 uses data later: its report falls due later too.
            call(service, "POST", "/sandbox/v1/clock/advance", ADMIN, json!({"seconds": 1 + 1800 * k}));
            call(
                service,
                "POST",
                &format!("/sandbox/v1/esims/{iccid}/usage"),
                ADMIN,
                json!({"mb": 10, "country": "FR"}),
            );
        }
        let request = |path: &str| {
            http::Request::get(path).header("authorization", format!("Bearer {ADMIN}")).body(Bytes::new()).unwrap()
        };
        let one = call(&mut shards[1], "GET", "/sandbox/v1/pending", ADMIN, Value::Null);
        assert_eq!(
            (one["total"].as_u64(), one["timers"][0]["kind"].as_str()),
            (Some(1), Some("usage_report")),
            "{one}"
        );
        let merged = fan_out_now(FanOut::Pending, &request("/sandbox/v1/pending"), &mut shards);
        assert_eq!(merged["total"], 2, "{merged}");
        let due: Vec<&str> =
            merged["timers"].as_array().unwrap().iter().map(|t| t["due_at"].as_str().unwrap()).collect();
        assert!(due.len() == 2 && due[0] < due[1], "soonest first over the shards: {merged}");
        let first = fan_out_now(FanOut::Pending, &request("/sandbox/v1/pending?limit=1"), &mut shards);
        assert_eq!((first["total"].as_u64(), first["timers"].as_array().map(Vec::len)), (Some(2), Some(1)));
        assert_eq!(first["timers"][0], merged["timers"][0]);
        let state = fan_out_now(FanOut::State, &request("/admin/v1/state"), &mut shards);
        let each: Vec<u64> = (0..2).map(|k| shards[k].engine().inventory()).collect();
        assert_eq!(state["inventory"]["available"].as_u64(), Some(each.iter().sum()), "{state}");
    }

    #[test]
    fn inventory_splits_exactly() {
        assert_eq!(split_inventory(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(split_inventory(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split_inventory(100_000, 3).iter().sum::<u64>(), 100_000);
    }

    #[test]
    fn the_combined_digest_depends_on_every_shard_and_its_place() {
        let a = combined_digest(&["x".into(), "y".into()]);
        assert_ne!(a, combined_digest(&["y".into(), "x".into()]));
        assert_ne!(a, combined_digest(&["x".into(), "z".into()]));
        assert_eq!(a, combined_digest(&["x".into(), "y".into()]));
    }
}
