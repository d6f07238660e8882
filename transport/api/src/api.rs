//! The pure API layer: an HTTP request becomes a [`Routed`] action (an engine command,
//! a clock operation, a report, or an immediate error), and an engine response becomes
//! an HTTP response. No sockets, no runtime, no clock, no business rules: everything
//! here is parsing, validation of shapes, and rendering.

use crate::routes::{self, Api, Endpoint, Match};
use bytes::Bytes;
use esim_engine::{
    AdminOp, ApiError, CardBehavior, Command, ErrorCode, KeyDigest, ResellerOp, ResellerRequest, Response, SandboxOp,
    SealedSecret,
};
use rust_decimal::Decimal;
use serde_json::{Map, Value};

/// Largest request body accepted (413 above it).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// One sandbox clock advance at most: a leap year (decision 67); a longer jump is
/// several calls.
pub const CLOCK_ADVANCE_MAX_SECONDS: i64 = 366 * 24 * 3600;

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
    /// `GET /api/v2/reseller/openapi.json`.
    OpenApi,
    /// Answer at once with this error. (Credentials and the rate limit were checked
    /// before, by [`crate::admission`], so a bad request answers 401 or 429 first.)
    Reject(ApiError),
}

/// Decodes `%XX` escapes (and `+` as space in queries is left to the caller).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

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

/// A parsed JSON body: an object, or empty when the body was absent.
struct Body(Map<String, Value>);

impl Body {
    fn parse(bytes: &[u8]) -> Result<Body, ApiError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body(Map::new()));
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body(map)),
            Ok(_) => Err(ApiError::validation("the body must be a JSON object")),
            Err(error) => Err(ApiError::validation(format!("malformed JSON body: {error}"))),
        }
    }

    fn present(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn string(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(ApiError::validation(format!("{name} must be a string"))),
        }
    }

    fn required_string(&self, name: &str) -> Result<String, ApiError> {
        self.string(name)?.ok_or_else(|| ApiError::validation(format!("{name} is required")))
    }

    /// A number exactly as written: one with more digits than a `Decimal` holds is
    /// refused, never rounded.
    fn decimal(&self, name: &str) -> Result<Option<Decimal>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Number(number)) => exact_decimal(&number.to_string()).map(Some).ok_or_else(|| {
                ApiError::validation(format!("{name} has more digits than can be held exactly, or is out of range"))
            }),
            Some(_) => Err(ApiError::validation(format!("{name} must be a number"))),
        }
    }

    fn required_decimal(&self, name: &str) -> Result<Decimal, ApiError> {
        self.decimal(name)?.ok_or_else(|| ApiError::validation(format!("{name} is required")))
    }

    /// A USD amount: at most 2 decimal places (decision 3), never rounded.
    fn money(&self, name: &str) -> Result<Option<Decimal>, ApiError> {
        match self.decimal(name)? {
            Some(amount) if amount.normalize().scale() > 2 => {
                Err(ApiError::validation(format!("{name} must have at most 2 decimal places")))
            }
            other => Ok(other),
        }
    }

    fn required_money(&self, name: &str) -> Result<Decimal, ApiError> {
        self.money(name)?.ok_or_else(|| ApiError::validation(format!("{name} is required")))
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(_) => Err(ApiError::validation(format!("{name} must be true or false"))),
        }
    }

    fn required_bool(&self, name: &str) -> Result<bool, ApiError> {
        self.bool(name)?.ok_or_else(|| ApiError::validation(format!("{name} is required")))
    }

    fn integer(&self, name: &str, max: u64) -> Result<Option<u64>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Number(number)) => match number.as_u64() {
                Some(value) if value <= max => Ok(Some(value)),
                _ => Err(ApiError::validation(format!("{name} must be an integer from 0 to {max}"))),
            },
            Some(_) => Err(ApiError::validation(format!("{name} must be an integer"))),
        }
    }

    fn strings(&self, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .map(Some)
                .ok_or_else(|| ApiError::validation(format!("{name} must be an array of strings"))),
            Some(_) => Err(ApiError::validation(format!("{name} must be an array of strings"))),
        }
    }
}

/// A number's text as an exact `Decimal` (plain or scientific), or `None` when it has
/// more significant digits than a `Decimal` holds or is out of its range.
pub fn exact_decimal(text: &str) -> Option<Decimal> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let mut value = Decimal::from_str_exact(mantissa).ok()?;
    if value.is_zero() {
        return Some(Decimal::ZERO);
    }
    if exponent >= 0 {
        // Past 10^29 nothing but zero fits a Decimal (at most about 7.9 * 10^28).
        for _ in 0..exponent.min(29) {
            value = value.checked_mul(Decimal::TEN)?;
        }
        (exponent <= 29).then_some(value)
    } else {
        let scale = value.scale().checked_add(exponent.unsigned_abs())?;
        value.set_scale(scale).ok()?;
        Some(value)
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
    let path = request.uri().path();
    let found;
    let (endpoint, params): (Endpoint, &[String]) = match request.extensions().get::<routes::Matched>() {
        // Matched by the connection task already.
        Some(routes::Matched(endpoint, params)) => (*endpoint, params),
        None => {
            found = routes::find(request.method().as_str(), path);
            match &found {
                Match::Found(endpoint, params) => (*endpoint, params),
                Match::WrongMethod(allowed) => {
                    return Err(ApiError::new(
                        ErrorCode::MethodNotAllowed,
                        format!("{} is not allowed here; use {}", request.method(), allowed.join(", ")),
                    ))
                }
                Match::NotFound => return Err(ApiError::new(ErrorCode::RouteNotFound, format!("no route for {path}"))),
            }
        }
    };
    let credential = bearer_str(request.headers());
    if matches!(endpoint.api(), Api::Admin | Api::Sandbox)
        && !esim_engine::engine::constant_time_eq(credential.as_bytes(), admin_token.as_bytes())
    {
        return Err(ApiError::new(ErrorCode::InvalidAdminToken, "missing or wrong admin token"));
    }
    let query = parse_query(request.uri().query());
    let body = Body::parse(request.body())?;
    let param = |i: usize| params[i].clone();
    let reseller = |op: ResellerOp| {
        let idempotency_key =
            request.headers().get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
        let key_digest = key_digest.unwrap_or_else(|| KeyDigest::of(credential));
        Routed::Engine(Command::Reseller(ResellerRequest { key_digest, idempotency_key, op }))
    };
    let admin = |op: AdminOp| Routed::Engine(Command::Admin(op));
    let sandbox = |op: SandboxOp| Routed::Engine(Command::Sandbox(op));
    use Endpoint as E;
    Ok(match endpoint {
        E::ProvisionEsim => reseller(ResellerOp::Provision {
            end_user_reference: body.string("end_user_reference")?,
            label: body.string("label")?,
            group_id: body.string("group_id")?,
        }),
        E::ListEsims => reseller(ResellerOp::ListEsims {
            status: query_value(&query, "status").map(str::to_string),
            limit: query_u64(&query, "limit")?,
            offset: query_u64(&query, "offset")?,
        }),
        E::GetEsim => reseller(ResellerOp::GetEsim { iccid: param(0) }),
        E::EsimQrCode => reseller(ResellerOp::EsimQrCode { iccid: param(0) }),
        E::EnableEsim => reseller(ResellerOp::Enable { iccid: param(0) }),
        E::DisableEsim => reseller(ResellerOp::Disable { iccid: param(0) }),
        E::TerminateEsim => reseller(ResellerOp::Terminate { iccid: param(0) }),
        E::ThrottleEsim => reseller(ResellerOp::Throttle { iccid: param(0), speed: body.required_string("speed")? }),
        E::FundEsim => reseller(ResellerOp::Fund { iccid: param(0), amount: body.required_money("amount")? }),
        E::DefundEsim => reseller(ResellerOp::Defund { iccid: param(0) }),
        E::ListGroups => reseller(ResellerOp::ListGroups),
        E::CreateGroup => reseller(ResellerOp::CreateGroup {
            name: body.required_string("name")?,
            low_balance_threshold_usd: body.money("low_balance_threshold_usd")?,
            refill_amount_usd: body.money("refill_amount_usd")?,
        }),
        E::GetGroup => reseller(ResellerOp::GetGroup { group_id: param(0) }),
        E::UpdateGroup => reseller(ResellerOp::UpdateGroup {
            group_id: param(0),
            name: body.string("name")?,
            low_balance_threshold_usd: body.money("low_balance_threshold_usd")?,
            refill_amount_usd: body.money("refill_amount_usd")?,
        }),
        E::FundGroup => reseller(ResellerOp::FundGroup { group_id: param(0), amount: body.required_money("amount")? }),
        E::DefundGroup => reseller(ResellerOp::DefundGroup { group_id: param(0) }),
        E::ListGroupEsims => reseller(ResellerOp::ListGroupEsims {
            group_id: param(0),
            limit: query_u64(&query, "limit")?,
            offset: query_u64(&query, "offset")?,
        }),
        E::AddGroupEsim => {
            reseller(ResellerOp::AddGroupEsim { group_id: param(0), iccid: body.required_string("iccid")? })
        }
        E::RemoveGroupEsim => reseller(ResellerOp::RemoveGroupEsim { group_id: param(0), iccid: param(1) }),
        E::WalletBalance => reseller(ResellerOp::WalletBalance),
        E::Rates => reseller(ResellerOp::Rates {
            country: query_value(&query, "country").map(str::to_string),
            continent: query_value(&query, "continent").map(str::to_string),
        }),
        E::Account => reseller(ResellerOp::Account),
        E::ListWebhooks => reseller(ResellerOp::ListWebhooks),
        E::CreateWebhook => reseller(ResellerOp::CreateWebhook {
            url: body.required_string("url")?,
            events: body.strings("events")?.ok_or_else(|| ApiError::validation("events is required"))?,
            // Drawn and sealed by the service (`Service::issue_secrets`).
            signing_secret: SealedSecret::default(),
        }),
        E::GetWebhook => reseller(ResellerOp::GetWebhook { webhook_id: param(0) }),
        E::ListEvents => reseller(ResellerOp::ListEvents {
            filter: esim_engine::event_log::EventFilter::parse(
                query_value(&query, "type"),
                query_value(&query, "created_after"),
                query_value(&query, "created_before"),
                query_value(&query, "iccid"),
                query_value(&query, "group_id"),
            )?,
            limit: query_u64(&query, "limit")?,
            offset: query_u64(&query, "offset")?,
        }),
        E::GetEvent => reseller(ResellerOp::GetEvent { event_id: param(0) }),
        E::ResendEvent => {
            reseller(ResellerOp::ResendEvent { event_id: param(0), webhook_id: body.required_string("webhook_id")? })
        }
        E::ListDeliveries => reseller(ResellerOp::ListDeliveries {
            webhook_id: param(0),
            event_id: query_value(&query, "event_id").map(str::to_string),
            limit: query_u64(&query, "limit")?,
            offset: query_u64(&query, "offset")?,
        }),
        E::RotateWebhookSecret => reseller(ResellerOp::RotateWebhookSecret {
            webhook_id: param(0),
            // Drawn and sealed by the service (`Service::issue_secrets`).
            signing_secret: SealedSecret::default(),
        }),
        E::UpdateWebhook => reseller(ResellerOp::UpdateWebhook {
            webhook_id: param(0),
            url: body.string("url")?,
            events: body.strings("events")?,
            active: body.bool("active")?,
        }),
        E::DeleteWebhook => reseller(ResellerOp::DeleteWebhook { webhook_id: param(0) }),
        E::ListApiKeys => reseller(ResellerOp::ListApiKeys),
        E::CreateApiKey => reseller(ResellerOp::CreateApiKey {
            // Drawn by the service (`Service::issue_secrets`).
            api_key_digest: KeyDigest::default(),
            api_key_prefix: String::new(),
        }),
        E::RevokeApiKey => reseller(ResellerOp::RevokeApiKey { key_id: param(0) }),
        E::GetAutoRefill => reseller(ResellerOp::GetAutoRefill),
        E::UpdateAutoRefill => reseller(ResellerOp::UpdateAutoRefill {
            enabled: body.bool("enabled")?,
            amount_usd: body.money("amount_usd")?,
        }),
        E::TestWebhook => reseller(ResellerOp::TestWebhook { webhook_id: param(0) }),
        E::OpenApi => Routed::OpenApi,
        E::CreateAccount => admin(AdminOp::CreateAccount {
            contact_email: body.required_string("contact_email")?,
            company_name: body.string("company_name")?,
            // Drawn by the service (`Service::issue_secrets`).
            api_key_digest: KeyDigest::default(),
            api_key_prefix: String::new(),
        }),
        E::ListAccounts => {
            let (limit, offset) = esim_engine::page(query_u64(&query, "limit")?, query_u64(&query, "offset")?)?;
            Routed::Accounts { limit, offset }
        }
        E::TopUp => admin(AdminOp::TopUp { account_id: param(0), amount_usd: body.required_money("amount_usd")? }),
        E::CreateKey => admin(AdminOp::CreateKey {
            account_id: param(0),
            api_key_digest: KeyDigest::default(),
            api_key_prefix: String::new(),
        }),
        E::RevokeKey => admin(AdminOp::RevokeKey { api_key_digest: KeyDigest::of(&param(0)) }),
        E::Freeze => admin(AdminOp::Freeze { account_id: param(0), frozen: body.required_bool("frozen")? }),
        E::SetAutoRefill => {
            let card = match body.string("card")? {
                None => None,
                Some(text) => Some(text.parse::<CardBehavior>().map_err(ApiError::validation)?),
            };
            admin(AdminOp::SetAutoRefill {
                account_id: param(0),
                enabled: body.bool("enabled")?,
                amount_usd: body.money("amount_usd")?,
                card,
            })
        }
        E::SetLimits => admin(AdminOp::SetLimits {
            account_id: param(0),
            max_groups: body.integer("max_groups", u32::MAX.into())?.map(|v| v as u32),
            max_group_size: body.integer("max_group_size", u32::MAX.into())?.map(|v| v as u32),
        }),
        E::SetInventory => admin(AdminOp::SetInventory {
            available: body
                .integer("available", 1_000_000_000)?
                .ok_or_else(|| ApiError::validation("available is required"))?,
        }),
        E::ConservationReport => {
            let format = query_value(&query, "format").unwrap_or("json").to_string();
            if !esim_engine::finance_render::FORMATS.contains(&format.as_str()) {
                return Err(ApiError::validation("format must be json, csv, md or html"));
            }
            let period = esim_engine::finance::Period::parse(query_value(&query, "from"), query_value(&query, "until"))
                .map_err(|message| {
                    ApiError::validation(format!("{message} (in a query, write the + of an offset as %2B)"))
                })?;
            Routed::Report { account_id: query_value(&query, "account_id").map(str::to_string), format, period }
        }
        E::State => Routed::StateDigest,
        E::Clock => Routed::ClockRead,
        E::AdvanceClock => {
            let seconds = body.required_decimal("seconds")?;
            if seconds <= Decimal::ZERO || seconds > Decimal::from(CLOCK_ADVANCE_MAX_SECONDS) {
                return Err(ApiError::validation(format!(
                    "seconds must be above 0 and at most one year ({CLOCK_ADVANCE_MAX_SECONDS})"
                )));
            }
            let ms = (seconds * Decimal::from(1000)).trunc();
            Routed::ClockAdvance { ms: ms.to_string().parse().unwrap_or(1).max(1) }
        }
        E::Install => sandbox(SandboxOp::Install { iccid: param(0) }),
        E::Usage => sandbox(SandboxOp::Usage {
            iccid: param(0),
            mb: body.required_decimal("mb")?,
            country: body.required_string("country")?,
            operator: body.string("operator")?,
        }),
        E::SetFaults => sandbox(SandboxOp::SetFaults {
            upstream_pause_fails: body.bool("upstream_pause_fails")?,
            network_read_fails: body.bool("network_read_fails")?,
        }),
    })
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
