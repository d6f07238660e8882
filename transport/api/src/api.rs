//! The pure API layer: an HTTP request becomes a [`Routed`] action (an engine command,
//! a clock operation, a report, or an immediate error), and an engine response becomes
//! an HTTP response. No sockets, no runtime, no clock, no business rules: everything
//! here is parsing, validation of shapes, and rendering.

pub use crate::bodies::exact_decimal;
use crate::bodies::*;
use crate::routes::{self, Api, Endpoint, Match};
use bytes::Bytes;
use esim_engine::{
    AdminOp, ApiError, Command, ErrorCode, KeyDigest, ResellerOp, ResellerRequest, Response, SandboxOp, SealedSecret,
};
use rust_decimal::Decimal;
use serde::Deserialize;
use std::borrow::Cow;

/// Largest request body accepted (413 above it).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
pub use crate::bodies::CLOCK_ADVANCE_MAX_SECONDS;

/// What a request asks for, once parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    /// Apply this command to the engine.
    Engine(Command),
    /// `GET /sandbox/v1/clock`.
    ClockRead,
    /// `POST /sandbox/v1/clock/advance` by this many milliseconds.
    ClockAdvance { ms: i64 },
    /// `GET /admin/v1/reports/conservation`: the finance report of one account or all,
    /// over a period of UTC days (`from` counted, `until` not: decision 107).
    Report { account_id: Option<String>, format: String, period: esim_engine::finance::Period },
    /// `GET /admin/v1/accounts`: one page of accounts, oldest first.
    Accounts { limit: u64, offset: u64 },
    /// `GET /admin/v1/state`: the engine's state digest and clock.
    StateDigest,
    /// `GET /sandbox/v1/pending`: the first `limit` timers still to fall due (decision 320).
    Pending { limit: u64 },
    /// The OpenAPI document of this API (`GET /api/v2/reseller/openapi.json`,
    /// `/admin/v1/openapi.json`, `/sandbox/v1/openapi.json`).
    OpenApi(Api),
    /// Answer at once with this error. (Credentials and the rate limit were checked
    /// before, by [`crate::admission`], so a bad request answers 401 or 429 first.)
    Reject(ApiError),
}

pub use crate::routes::percent_decode;

pub(crate) fn parse_query(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(&key.replace('+', " ")), percent_decode(&value.replace('+', " ")))
        })
        .collect()
}

/// A query parameter; present but empty (`?country=`) counts as absent.
pub(crate) fn query_value<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.trim().is_empty())
}

fn query_u64(query: &[(String, String)], name: &str) -> Result<Option<u64>, ApiError> {
    match query_value(query, name) {
        None => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::validation(format!("{name} must be a non-negative integer"))),
    }
}

/// The credential of a request: the token after `Bearer `, or empty.
pub fn bearer_str(headers: &http::HeaderMap) -> &str {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(str::trim)
        .unwrap_or_default()
}

/// Parses a request into what it asks for. `admin_token` guards the admin and sandbox
/// APIs; a reseller request comes with its key's digest when [`crate::admission`] hashed
/// the key already (once per request), or it is hashed here.
pub fn route(request: &http::Request<Bytes>, admin_token: &str, key_digest: Option<KeyDigest>) -> Routed {
    match try_route(request, admin_token, key_digest) {
        Ok(routed) => routed,
        Err(error) => Routed::Reject(error),
    }
}

fn try_route(
    request: &http::Request<Bytes>,
    admin_token: &str,
    key_digest: Option<KeyDigest>,
) -> Result<Routed, ApiError> {
    if request.body().len() > MAX_BODY_BYTES {
        return Err(ApiError::new(ErrorCode::PayloadTooLarge, format!("the body exceeds {MAX_BODY_BYTES} bytes")));
    }
    let (endpoint, params) = endpoint_of(request)?;
    let credential = bearer_str(request.headers());
    if matches!(endpoint.api(), Api::Admin | Api::Sandbox)
        && !esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes())
    {
        return Err(ApiError::new(ErrorCode::InvalidAdminToken, "missing or wrong admin token"));
    }
    // Every request's body is parsed, also where none is read: a malformed one is 400.
    let body = Fields::parse(request.body())?;
    let call = Call { params, query: parse_query(request.uri().query()), body };
    let routed = match endpoint.api() {
        Api::Reseller => {
            let op = reseller_op(endpoint, &call)?;
            let idempotency_key =
                request.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
            let key_digest = key_digest.unwrap_or_else(|| KeyDigest::of(credential));
            Some(Routed::Engine(Command::Reseller(ResellerRequest { key_digest, idempotency_key, op })))
        }
        Api::Public => {
            let document = matches!(endpoint, Endpoint::OpenApi | Endpoint::AdminOpenApi | Endpoint::SandboxOpenApi);
            document.then(|| Routed::OpenApi(endpoint.documented_in()))
        }
        Api::Admin => admin(endpoint, &call)?,
        Api::Sandbox => sandbox(endpoint, &call)?,
    };
    Ok(routed.unwrap_or_else(|| unreachable!("{endpoint:?} is routed by the functions of its API")))
}

/// The endpoint of a request and its path parameters: matched by the connection task
/// already, or here.
fn endpoint_of(request: &http::Request<Bytes>) -> Result<(Endpoint, Cow<'_, [String]>), ApiError> {
    if let Some(routes::Matched(endpoint, params)) = request.extensions().get::<routes::Matched>() {
        return Ok((*endpoint, Cow::Borrowed(params)));
    }
    let path = request.uri().path();
    match routes::find(request.method().as_str(), path) {
        Match::Found(endpoint, params) => Ok((endpoint, Cow::Owned(params))),
        Match::WrongMethod(allowed) => Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("{} is not allowed here; use {}", request.method(), allowed.join(", ")),
        )),
        Match::NotFound => Err(ApiError::new(ErrorCode::RouteNotFound, routes::not_found_message(path))),
    }
}

/// What the route functions read of a request: path parameters, query and body.
struct Call<'a> {
    params: Cow<'a, [String]>,
    query: Vec<(String, String)>,
    body: Fields,
}

impl Call<'_> {
    /// The `i`th path parameter (the endpoint's pattern has it).
    fn param(&self, i: usize) -> String {
        self.params[i].clone()
    }

    /// A query parameter; present but empty counts as absent.
    fn query(&self, name: &str) -> Option<&str> {
        query_value(&self.query, name)
    }

    fn query_string(&self, name: &str) -> Option<String> {
        self.query(name).map(str::to_string)
    }

    fn query_u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        query_u64(&self.query, name)
    }

    /// The body read into its type (the first refused field answers 400).
    fn body<'a, T: Deserialize<'a>>(&'a self) -> Result<T, ApiError> {
        self.body.read()
    }
}

/// The reseller command of an endpoint of the reseller API, by resource.
fn reseller_op(endpoint: Endpoint, call: &Call) -> Result<ResellerOp, ApiError> {
    for resource in [esim_op, group_op, webhook_op, account_op] {
        if let Some(op) = resource(endpoint, call)? {
            return Ok(op);
        }
    }
    unreachable!("{endpoint:?} is a reseller endpoint of no resource")
}

/// `/esim/...`; `None` for another endpoint.
fn esim_op(endpoint: Endpoint, call: &Call) -> Result<Option<ResellerOp>, ApiError> {
    use Endpoint as E;
    Ok(Some(match endpoint {
        E::ProvisionEsim => {
            let ProvisionRequest { end_user_reference, label, group_id } = call.body()?;
            ResellerOp::Provision { end_user_reference, label, group_id }
        }
        E::ListEsims => ResellerOp::ListEsims {
            status: call.query_string("status"),
            limit: call.query_u64("limit")?,
            offset: call.query_u64("offset")?,
        },
        E::GetEsim => ResellerOp::GetEsim { iccid: call.param(0) },
        E::EsimQrCode => ResellerOp::EsimQrCode { iccid: call.param(0) },
        E::EnableEsim => ResellerOp::Enable { iccid: call.param(0) },
        E::DisableEsim => ResellerOp::Disable { iccid: call.param(0) },
        E::TerminateEsim => ResellerOp::Terminate { iccid: call.param(0) },
        E::ThrottleEsim => {
            let ThrottleRequest { speed } = call.body()?;
            ResellerOp::Throttle { iccid: call.param(0), speed }
        }
        E::FundEsim => {
            let FundRequest { amount } = call.body()?;
            ResellerOp::Fund { iccid: call.param(0), amount }
        }
        E::DefundEsim => ResellerOp::Defund { iccid: call.param(0) },
        _ => return Ok(None),
    }))
}

/// `/groups/...`; `None` for another endpoint.
fn group_op(endpoint: Endpoint, call: &Call) -> Result<Option<ResellerOp>, ApiError> {
    use Endpoint as E;
    Ok(Some(match endpoint {
        E::ListGroups => ResellerOp::ListGroups,
        E::CreateGroup => {
            let GroupCreateRequest { name, low_balance_threshold_usd, refill_amount_usd } = call.body()?;
            ResellerOp::CreateGroup { name, low_balance_threshold_usd, refill_amount_usd }
        }
        E::GetGroup => ResellerOp::GetGroup { group_id: call.param(0) },
        E::UpdateGroup => {
            let GroupUpdateRequest { name, low_balance_threshold_usd, refill_amount_usd } = call.body()?;
            ResellerOp::UpdateGroup { group_id: call.param(0), name, low_balance_threshold_usd, refill_amount_usd }
        }
        E::FundGroup => {
            let GroupFundRequest { amount } = call.body()?;
            ResellerOp::FundGroup { group_id: call.param(0), amount }
        }
        E::DefundGroup => ResellerOp::DefundGroup { group_id: call.param(0) },
        E::ListGroupEsims => ResellerOp::ListGroupEsims {
            group_id: call.param(0),
            limit: call.query_u64("limit")?,
            offset: call.query_u64("offset")?,
        },
        E::AddGroupEsim => {
            let GroupAddEsimRequest { iccid } = call.body()?;
            ResellerOp::AddGroupEsim { group_id: call.param(0), iccid }
        }
        E::RemoveGroupEsim => ResellerOp::RemoveGroupEsim { group_id: call.param(0), iccid: call.param(1) },
        _ => return Ok(None),
    }))
}

/// `/webhooks/...` and `/events/...`; `None` for another endpoint.
fn webhook_op(endpoint: Endpoint, call: &Call) -> Result<Option<ResellerOp>, ApiError> {
    use Endpoint as E;
    Ok(Some(match endpoint {
        E::ListWebhooks => ResellerOp::ListWebhooks,
        E::CreateWebhook => {
            let WebhookCreateRequest { url, events } = call.body()?;
            // The secret is drawn and sealed by the service (`Service::issue_secrets`).
            ResellerOp::CreateWebhook { url, events, signing_secret: SealedSecret::default() }
        }
        E::GetWebhook => ResellerOp::GetWebhook { webhook_id: call.param(0) },
        E::UpdateWebhook => {
            let WebhookUpdateRequest { url, events, active } = call.body()?;
            ResellerOp::UpdateWebhook { webhook_id: call.param(0), url, events, active }
        }
        E::DeleteWebhook => ResellerOp::DeleteWebhook { webhook_id: call.param(0) },
        E::TestWebhook => ResellerOp::TestWebhook { webhook_id: call.param(0) },
        // Drawn and sealed by the service (`Service::issue_secrets`).
        E::RotateWebhookSecret => {
            ResellerOp::RotateWebhookSecret { webhook_id: call.param(0), signing_secret: SealedSecret::default() }
        }
        E::ListDeliveries => ResellerOp::ListDeliveries {
            webhook_id: call.param(0),
            event_id: call.query_string("event_id"),
            limit: call.query_u64("limit")?,
            offset: call.query_u64("offset")?,
        },
        E::ListEvents => ResellerOp::ListEvents {
            filter: esim_engine::event_log::EventFilter::parse(
                call.query("type"),
                call.query("created_after"),
                call.query("created_before"),
                call.query("iccid"),
                call.query("group_id"),
            )?,
            limit: call.query_u64("limit")?,
            offset: call.query_u64("offset")?,
        },
        E::GetEvent => ResellerOp::GetEvent { event_id: call.param(0) },
        E::ResendEvent => {
            let EventResendRequest { webhook_id } = call.body()?;
            ResellerOp::ResendEvent { event_id: call.param(0), webhook_id }
        }
        _ => return Ok(None),
    }))
}

/// The account, its balance, rates, API keys and auto-refill; `None` for another
/// endpoint.
fn account_op(endpoint: Endpoint, call: &Call) -> Result<Option<ResellerOp>, ApiError> {
    use Endpoint as E;
    Ok(Some(match endpoint {
        E::WalletBalance => ResellerOp::WalletBalance,
        E::Rates => {
            ResellerOp::Rates { country: call.query_string("country"), continent: call.query_string("continent") }
        }
        E::Account => ResellerOp::Account,
        E::ListApiKeys => ResellerOp::ListApiKeys,
        // The key is drawn by the service (`Service::issue_secrets`).
        E::CreateApiKey => {
            ResellerOp::CreateApiKey { api_key_digest: KeyDigest::default(), api_key_prefix: String::new() }
        }
        E::RevokeApiKey => ResellerOp::RevokeApiKey { key_id: call.param(0) },
        E::GetAutoRefill => ResellerOp::GetAutoRefill,
        E::UpdateAutoRefill => {
            let AutoRefillUpdateRequest { enabled, amount_usd } = call.body()?;
            ResellerOp::UpdateAutoRefill { enabled, amount_usd }
        }
        _ => return Ok(None),
    }))
}

/// An endpoint of the admin API; `None` for another endpoint.
fn admin(endpoint: Endpoint, call: &Call) -> Result<Option<Routed>, ApiError> {
    use Endpoint as E;
    let op = match endpoint {
        E::CreateAccount => {
            let AccountCreateRequest { contact_email, company_name } = call.body()?;
            // The key is drawn by the service (`Service::issue_secrets`).
            AdminOp::CreateAccount {
                contact_email,
                company_name,
                api_key_digest: KeyDigest::default(),
                api_key_prefix: String::new(),
            }
        }
        E::ListAccounts => {
            let (limit, offset) = esim_engine::page(call.query_u64("limit")?, call.query_u64("offset")?)?;
            return Ok(Some(Routed::Accounts { limit, offset }));
        }
        E::TopUp => {
            let TopUpRequest { amount_usd } = call.body()?;
            AdminOp::TopUp { account_id: call.param(0), amount_usd }
        }
        E::CreateKey => AdminOp::CreateKey {
            account_id: call.param(0),
            api_key_digest: KeyDigest::default(),
            api_key_prefix: String::new(),
        },
        E::RevokeKey => AdminOp::RevokeKey { api_key_digest: KeyDigest::of(&call.param(0)) },
        E::Freeze => {
            let FreezeRequest { frozen } = call.body()?;
            AdminOp::Freeze { account_id: call.param(0), frozen }
        }
        E::SetAutoRefill => {
            let AdminAutoRefillRequest { card, enabled, amount_usd } = call.body()?;
            AdminOp::SetAutoRefill { account_id: call.param(0), enabled, amount_usd, card }
        }
        E::SetLimits => {
            let LimitsRequest { max_groups, max_group_size } = call.body()?;
            // Read as at most `COUNT_MAX`, a u32's largest.
            let count = |value: u64| u32::try_from(value).unwrap_or(u32::MAX);
            AdminOp::SetLimits {
                account_id: call.param(0),
                max_groups: max_groups.map(count),
                max_group_size: max_group_size.map(count),
            }
        }
        E::SetInventory => {
            let InventoryRequest { available } = call.body()?;
            AdminOp::SetInventory { available }
        }
        E::ConservationReport => return report(call).map(Some),
        E::State => return Ok(Some(Routed::StateDigest)),
        _ => return Ok(None),
    };
    Ok(Some(Routed::Engine(Command::Admin(op))))
}

/// `GET /admin/v1/reports/conservation`: its format, period and account from the query.
fn report(call: &Call) -> Result<Routed, ApiError> {
    let format = call.query("format").unwrap_or("json").to_string();
    if !esim_engine::finance_render::FORMATS.contains(&format.as_str()) {
        return Err(ApiError::validation("format must be json, csv, md or html"));
    }
    let period = esim_engine::finance::Period::parse(call.query("from"), call.query("until"))
        .map_err(|message| ApiError::validation(format!("{message} (in a query, write the + of an offset as %2B)")))?;
    Ok(Routed::Report { account_id: call.query_string("account_id"), format, period })
}

/// An endpoint of the sandbox API; `None` for another endpoint.
fn sandbox(endpoint: Endpoint, call: &Call) -> Result<Option<Routed>, ApiError> {
    use Endpoint as E;
    let op = match endpoint {
        E::Clock => return Ok(Some(Routed::ClockRead)),
        E::Pending => {
            let (limit, _) = esim_engine::page(call.query_u64("limit")?, None)?;
            return Ok(Some(Routed::Pending { limit }));
        }
        E::AdvanceClock => {
            let ClockAdvanceRequest { seconds } = call.body()?;
            if seconds <= Decimal::ZERO || seconds > Decimal::from(CLOCK_ADVANCE_MAX_SECONDS) {
                return Err(ApiError::validation(format!(
                    "seconds must be above 0 and at most one year ({CLOCK_ADVANCE_MAX_SECONDS})"
                )));
            }
            let ms = (seconds * Decimal::from(1000)).trunc();
            return Ok(Some(Routed::ClockAdvance { ms: ms.to_string().parse().unwrap_or(1).max(1) }));
        }
        E::Install => SandboxOp::Install { iccid: call.param(0) },
        E::Usage => {
            let UsageRequest { mb, country, operator } = call.body()?;
            SandboxOp::Usage { iccid: call.param(0), mb, country, operator }
        }
        E::SetFaults => {
            let FaultsRequest { upstream_pause_fails, network_read_fails } = call.body()?;
            SandboxOp::SetFaults { upstream_pause_fails, network_read_fails }
        }
        _ => return Ok(None),
    };
    Ok(Some(Routed::Engine(Command::Sandbox(op))))
}

/// A JSON response with the given status and body.
pub fn json_response(status: u16, body: impl Into<Bytes>) -> http::Response<Bytes> {
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .expect("valid response parts")
}

/// Renders an engine response: the success body or the spec's error body, with
/// `Retry-After` on a rate limit.
pub fn respond(response: &Response) -> http::Response<Bytes> {
    let (status, body) = esim_engine::render(response);
    let mut http_response = json_response(status, body);
    if let Err(ApiError { retry_after_secs: Some(seconds), .. }) = response {
        http_response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(*seconds));
    }
    if let Err(ApiError { code: ErrorCode::MethodNotAllowed, message, .. }) = response {
        if let Some(allowed) = message.split("use ").nth(1) {
            if let Ok(value) = http::HeaderValue::from_str(allowed) {
                http_response.headers_mut().insert(http::header::ALLOW, value);
            }
        }
    }
    http_response
}

/// Renders an error alone.
pub fn error_response(error: ApiError) -> http::Response<Bytes> {
    respond(&Err(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str, body: &str) -> http::Request<Bytes> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", "Bearer rsk_k")
            .body(Bytes::from(body.to_string()))
            .unwrap()
    }

    /// Every endpoint is routed by the function of its API (none falls through to the
    /// `unreachable!`), with its path parameters, an empty body and the admin token.
    #[test]
    fn every_endpoint_is_routed() {
        for &endpoint in Endpoint::ALL {
            let pattern = endpoint.pattern();
            let path: Vec<&str> =
                pattern.split('/').map(|segment| if segment.starts_with('{') { "p1" } else { segment }).collect();
            let uri = routes::full_path(endpoint.api(), &path.join("/"));
            let request = http::Request::builder()
                .method(endpoint.method())
                .uri(&uri)
                .header("authorization", "Bearer t")
                .body(Bytes::new())
                .unwrap();
            match route(&request, "t", None) {
                Routed::Reject(error) => assert_eq!(error.code, ErrorCode::ValidationError, "{uri}: {error:?}"),
                Routed::Engine(_) | Routed::ClockRead | Routed::StateDigest | Routed::OpenApi(_) => {}
                Routed::Accounts { .. }
                | Routed::Report { .. }
                | Routed::ClockAdvance { .. }
                | Routed::Pending { .. } => {}
            }
        }
    }

    #[test]
    fn percent_decoding_never_panics_on_odd_input() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("é%"), "é%");
        assert_eq!(percent_decode("%C3%A9"), "é");
    }

    #[test]
    fn bodies_and_queries_parse_into_commands() {
        let Routed::Engine(Command::Reseller(r)) =
            route(&request("POST", "/api/v2/reseller/esim/89/fund", r#"{"amount": 19.99, "extra": 1}"#), "t", None)
        else {
            panic!()
        };
        assert_eq!(r.op, ResellerOp::Fund { iccid: "89".into(), amount: Decimal::new(1999, 2) });
        assert_eq!(r.key_digest, KeyDigest::of("rsk_k"), "the key is hashed, never carried");
        let Routed::Engine(Command::Reseller(r)) =
            route(&request("GET", "/api/v2/reseller/rates?country=United%20States&continent=", ""), "t", None)
        else {
            panic!()
        };
        assert_eq!(r.op, ResellerOp::Rates { country: Some("United States".into()), continent: None });
        // An empty optional body is fine, even declared as JSON.
        assert!(matches!(route(&request("POST", "/api/v2/reseller/esim/provision", ""), "t", None), Routed::Engine(_)));
    }

    #[test]
    fn shape_errors_name_the_field() {
        for (body, field) in [(r#"{"amount": "1"}"#, "amount"), ("{}", "amount"), (r#"{"amount": true}"#, "amount")] {
            let Routed::Reject(error) = route(&request("POST", "/api/v2/reseller/esim/89/fund", body), "t", None)
            else {
                panic!()
            };
            assert_eq!(error.code, ErrorCode::ValidationError);
            assert!(error.message.contains(field), "{}", error.message);
        }
        let Routed::Reject(error) = route(&request("PUT", "/admin/v1/inventory", r#"{"available": -1}"#), "t", None)
        else {
            panic!()
        };
        assert_eq!(error.code, ErrorCode::InvalidAdminToken, "admin routes check the token first");
    }

    #[test]
    fn amounts_are_exact_or_refused_naming_the_field() {
        let fund = |amount: &str| {
            route(&request("POST", "/api/v2/reseller/esim/89/fund", &format!("{{\"amount\": {amount}}}")), "t", None)
        };
        for (amount, expected) in
            [("19.99", "19.99"), ("20.10", "20.1"), ("1e2", "100"), ("2.5E+1", "25"), ("0.0", "0")]
        {
            let Routed::Engine(Command::Reseller(r)) = fund(amount) else { panic!("{amount}") };
            let ResellerOp::Fund { amount: parsed, .. } = r.op else { panic!() };
            assert_eq!(parsed.normalize().to_string(), expected, "{amount}");
        }
        // More than 2 decimals, more digits than a Decimal holds, or out of its range:
        // 400 naming the field, never a rounded amount.
        for amount in [
            "19.999",
            "9999.99999999999999999999999999999",
            "10000.00000000000000000000000000001",
            "1e40",
            "123456789012345678901234567890123",
            "1.5e-30",
        ] {
            let Routed::Reject(error) = fund(amount) else { panic!("{amount} was accepted") };
            assert_eq!(error.code, ErrorCode::ValidationError, "{amount}");
            assert!(error.message.contains("amount"), "{amount}: {}", error.message);
        }
        assert_eq!(exact_decimal("0.000000000000000000000000001").map(|d| d.scale()), Some(27));
        assert_eq!(exact_decimal("1.25e-2"), Some(Decimal::new(125, 4)));
    }
}
