//! The OpenAPI 3.1 documents of the operator's two APIs: the admin API
//! (`GET /admin/v1/openapi.json`) and the sandbox API (`GET /sandbox/v1/openapi.json`),
//! public like the reseller's ([`crate::openapi`]) and built the same way. The paths come
//! from the endpoint table (the endpoints [`Endpoint::documented_in`] each API, relative
//! to the API's base), request bodies from their types in [`crate::bodies`], replies from
//! the engine's reply types; the answers that the engine and the service write as loose
//! JSON (a setting changed, the clock, the state digest, the account list) are described
//! by the types below, and a test drives the real [`crate::Service`] through every
//! operation and checks each answer strictly against its document, so a field added to
//! such an answer fails until it is documented. Error statuses come from
//! [`ErrorCode::http_status`]; the error body is the reseller document's.

use crate::openapi::{component_settings, request_generator, ErrorBody, Operation};
use crate::routes::{Api, Endpoint};
use bytes::Bytes;
use esim_engine::reply::schema::{Timestamp, Usd};
use esim_engine::ErrorCode;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// The served bytes of an API's document (the reseller's too), each built once per
/// process: [`crate::Service::new`] asks first, so a document that cannot be built
/// stops the start, not a request.
pub fn served(api: Api) -> Bytes {
    static SERVED: OnceLock<[Bytes; 3]> = OnceLock::new();
    let [reseller, admin, sandbox] = SERVED.get_or_init(|| {
        let text = |api| serde_json::to_string_pretty(&build(api)).expect("a JSON value always serializes");
        [crate::openapi::document(), text(Api::Admin), text(Api::Sandbox)].map(Bytes::from)
    });
    // `documented_in` never answers Public (a test of the endpoint table checks it).
    match api {
        Api::Reseller | Api::Public => reseller.clone(),
        Api::Admin => admin.clone(),
        Api::Sandbox => sandbox.clone(),
    }
}

/// The base path of an operator API's document (its `servers` URL).
pub fn base(api: Api) -> &'static str {
    match api {
        Api::Admin => "/admin/v1",
        Api::Sandbox => "/sandbox/v1",
        Api::Reseller | Api::Public => crate::routes::RESELLER_BASE,
    }
}

// ----- the reply types of the answers written as loose JSON -----

/// One page of the accounts, oldest first
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the service writes the page (Service::accounts_page)
struct AccountPage {
    /// The accounts of this page
    accounts: Vec<AccountListed>,
    /// Accounts in all
    total: u64,
    /// The page size asked
    limit: u64,
    /// Accounts skipped
    offset: u64,
}

/// An account as the operator's list shows it: never a key
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct AccountListed {
    /// The account's id (acc_ followed by 16 hex characters)
    account_id: String,
    /// The reseller's company, when given
    company_name: Option<String>,
    /// The reseller's contact address
    contact_email: String,
    /// When the account was made (service time)
    #[schemars(with = "Timestamp")]
    created_at: String,
    /// true while the operator has frozen the account
    frozen: bool,
    /// USD. The reseller balance
    #[schemars(with = "Usd")]
    balance_usd: String,
    /// eSIMs the account holds (terminated ones included)
    esims: u64,
    /// Groups the account holds
    groups: u64,
}

/// The account's freeze as it now is
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine writes the answer
struct AccountFrozen {
    /// The account's id
    account_id: String,
    /// true while the account is frozen: its changes answer ACCOUNT_SUSPENDED
    data_suspended: bool,
}

/// The account's auto-refill as it now is
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine writes the answer
struct AutoRefillSet {
    /// The account's id
    account_id: String,
    /// Whether the saved card is charged when real spend leaves the balance low
    enabled: bool,
    /// USD. What one charge adds to the reseller balance
    #[schemars(with = "Usd")]
    amount_usd: String,
    /// How the (simulated) saved card answers charges
    card: esim_engine::CardBehavior,
}

/// The account's limits as they now are
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine writes the answer
struct LimitsSet {
    /// The account's id
    account_id: String,
    /// Groups the account may have
    max_groups: u32,
    /// eSIMs a group of the account may hold
    max_group_size: u32,
}

/// The eSIM inventory as it now is
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine or the node writes the answer
struct InventorySet {
    /// eSIM profiles left to provision
    available: u64,
    /// A node serving several shards: profiles still in the shared pool
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<u64>,
    /// A node serving several shards: the profiles each shard holds, by shard
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<Vec<u64>>,
}

/// The engine's state digest: equal digests, equal states
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the service writes the answer
struct StateDigest {
    /// SHA-256 of the state, hex (of every shard's, on a sharded node)
    state_digest: String,
    /// The service time
    #[schemars(with = "Timestamp")]
    now: String,
    /// accepted, or refused: why changes are refused now (the journal cannot take them)
    writes: String,
    /// A sharded node: each shard's digest, time and writes
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<Vec<ShardState>>,
    /// The eSIM inventory (on a sharded node also in the pool and by shard)
    inventory: InventorySet,
}

/// One shard's state digest
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct ShardState {
    /// The shard's number, from 0
    shard: u64,
    /// SHA-256 of the shard's state, hex
    state_digest: String,
    /// The shard's service time
    #[schemars(with = "Timestamp")]
    now: String,
    /// accepted, or refused: why the shard refuses changes now
    writes: String,
}

/// The faults of the simulated upstream as they now are
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine writes the answer
struct FaultsSet {
    /// true while pausing data upstream fails (defunds and moves answer UPSTREAM_ERROR)
    upstream_pause_fails: bool,
    /// true while live reads of the network fail (the cached state is shown)
    network_read_fails: bool,
}

/// The service clock
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the service writes the answer
struct ServiceClock {
    /// The service time
    #[schemars(with = "Timestamp")]
    now: String,
    /// virtual: time moves only through POST /clock/advance; wall: it follows the wall clock
    // As `crate::ClockMode` serializes (a test reads both back).
    #[schemars(with = "String", extend("enum" = ["wall", "virtual"]))]
    mode: String,
}

/// The finance report (format=json): per account and in total, money in, where it is now, where it went and the difference, over a period, with a per-day movements table
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the engine writes the report (finance::FinanceReport)
struct FinanceReport {
    /// The service time it was made at (RFC 3339)
    generated_at: String,
    /// What the rows are and what is summed, in plain words
    scope: String,
    /// The period: from (counted) and until (not counted), UTC days
    period: Map<String, Value>,
    /// One row per account
    accounts: Vec<Map<String, Value>>,
    /// Every account summed
    total: Map<String, Value>,
    /// The accounts' days with at least one movement in the period, oldest first
    days: Vec<Map<String, Value>>,
    /// true when every difference is exactly 0 and every account's history explains its balances now
    conserved: bool,
}

/// The component schemas of an API's replies (as they serialize) and of the error body.
fn reply_schemas(api: Api) -> Map<String, Value> {
    use esim_engine::reply::{AccountCreated, Installed, KeyCreated, Success, ToppedUp, UsageResult};
    let mut generator = component_settings().for_serialize().into_generator();
    if api == Api::Admin {
        generator.subschema_for::<AccountCreated>();
        generator.subschema_for::<AccountPage>();
        generator.subschema_for::<ToppedUp>();
        generator.subschema_for::<KeyCreated>();
        generator.subschema_for::<Success>();
        generator.subschema_for::<AccountFrozen>();
        generator.subschema_for::<AutoRefillSet>();
        generator.subschema_for::<LimitsSet>();
        generator.subschema_for::<InventorySet>();
        generator.subschema_for::<FinanceReport>();
        generator.subschema_for::<StateDigest>();
    } else {
        generator.subschema_for::<ServiceClock>();
        generator.subschema_for::<Installed>();
        generator.subschema_for::<UsageResult>();
        generator.subschema_for::<FaultsSet>();
        generator.subschema_for::<esim_engine::reply::PendingTimers>();
    }
    generator.subschema_for::<ErrorBody>();
    generator.subschema_for::<OperatorDocument>();
    generator.take_definitions(true)
}

/// This OpenAPI 3.1 document
#[derive(JsonSchema)]
#[schemars(rename = "OpenApiDocument")]
#[allow(dead_code)] // only its schema is used: the document is built as JSON below
struct OperatorDocument {
    /// 3.1.0
    openapi: String,
    /// Title, version and description of the API
    info: Map<String, Value>,
    /// The base URL of the paths
    servers: Vec<Map<String, Value>>,
    /// The admin token, for every operation that does not say otherwise
    security: Vec<Map<String, Value>>,
    /// The groups of operations
    tags: Vec<Map<String, Value>>,
    /// The operations, by path
    paths: Map<String, Value>,
    /// The schemas and the security scheme
    components: Map<String, Value>,
}

// ----- operations -----

/// What an operator API's document says of itself.
struct Described {
    title: &'static str,
    description: &'static str,
    tags: Value,
    /// The documented operation of an endpoint of this API; `None` for another.
    operation: fn(Endpoint) -> Option<Operation>,
}

fn described(api: Api) -> Described {
    match api {
        Api::Admin => Described {
            title: "Reseller eSIM Connectivity Service: admin API",
            description: crate::openapi_admin::DESCRIPTION,
            tags: crate::openapi_admin::tags(),
            operation: crate::openapi_admin::operation,
        },
        Api::Sandbox => Described {
            title: "Reseller eSIM Connectivity Service: sandbox API",
            description: crate::openapi_sandbox::DESCRIPTION,
            tags: crate::openapi_sandbox::tags(),
            operation: crate::openapi_sandbox::operation,
        },
        Api::Reseller | Api::Public => unreachable!("the reseller document is crate::openapi's"),
    }
}

/// The path parameters of the operator APIs (schema only: the router reads them).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct OperatorPathIds {
    /// The account's id (acc_ followed by 16 hex characters)
    account_id: String,
    /// The API key itself (rsk_ and 64 hex digits)
    api_key: String,
    /// ICCID of the eSIM (19 digits)
    iccid: String,
}

/// The path parameters of an operator pattern, described by [`OperatorPathIds`].
fn path_parameters(pattern: &str, generator: &mut SchemaGenerator) -> Vec<Value> {
    let ids = crate::openapi::fields(OperatorPathIds::json_schema(generator));
    pattern
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let (_, schema, description) = ids
                .iter()
                .find(|(id, _, _)| id == name)
                .unwrap_or_else(|| unreachable!("no description of the path parameter {name}"));
            json!({ "name": name, "in": "path", "required": true, "schema": schema, "description": description })
        })
        .collect()
}

/// The conditions every operator operation shares: the admin token (but for the
/// document itself), a body that is JSON, and writes the journal cannot take now.
fn shared_errors(endpoint: Endpoint, op: &Operation) -> Vec<(ErrorCode, String)> {
    let mut errors: Vec<(ErrorCode, String)> = op.errors.iter().map(|(code, why)| (*code, why.to_string())).collect();
    if endpoint.api() != Api::Public {
        errors.push((
            ErrorCode::InvalidAdminToken,
            "the Authorization header is missing or is not `Bearer <admin token>`".into(),
        ));
    }
    if op.body.is_some() {
        errors.push((
            ErrorCode::ValidationError,
            "the body is not a JSON object, or a field is refused (the message names it)".into(),
        ));
    }
    if endpoint.method() != "GET" {
        errors.push((
            ErrorCode::ServiceUnavailable,
            "the change cannot be made durable now; nothing changed, retry".into(),
        ));
    }
    errors
}

fn build_operation(endpoint: Endpoint, op: Operation, requests: &mut SchemaGenerator) -> Value {
    let mut parameters = path_parameters(endpoint.pattern(), requests);
    for schema_of in &op.query {
        parameters.extend(crate::openapi::parameters(schema_of(requests), "query", false));
    }
    op.render(parameters, &shared_errors(endpoint, &op), endpoint.api() == Api::Public, requests)
}

/// The report's other formats, beside its JSON (`?format=`).
fn report_formats(content: &mut Value, generator: &mut SchemaGenerator) {
    for (media_type, what) in [
        ("text/csv; charset=utf-8", "format=csv: the same figures as CSV"),
        ("text/markdown; charset=utf-8", "format=md: the same figures as Markdown"),
        ("text/html; charset=utf-8", "format=html: the same figures as a page"),
    ] {
        let mut text = generator.subschema_for::<String>();
        text.insert("description".into(), what.into());
        content[media_type] = json!({ "schema": text });
    }
}

/// The document of an operator API (`api` is Admin or Sandbox).
fn build(api: Api) -> Value {
    let about = described(api);
    let base = base(api);
    let mut paths = Map::new();
    let mut requests = request_generator();
    for &endpoint in Endpoint::ALL.iter().filter(|endpoint| endpoint.documented_in() == api) {
        let op = (about.operation)(endpoint).unwrap_or_else(|| unreachable!("{endpoint:?} is not described"));
        let full = endpoint.full_pattern();
        let relative = full.strip_prefix(base).expect("an operator route lives under its API's base");
        let item = paths.entry(relative.to_string()).or_insert_with(|| json!({}));
        let method = endpoint.method().to_ascii_lowercase();
        item[&method] = build_operation(endpoint, op, &mut requests);
        if endpoint == Endpoint::ConservationReport {
            report_formats(&mut item[&method]["responses"]["200"]["content"], &mut requests);
        }
    }
    let mut schemas = reply_schemas(api);
    for (name, schema) in requests.take_definitions(true) {
        if let Some(reply) = schemas.get(&name) {
            assert_eq!(reply, &schema, "{name} is derived for replies and requests alike");
        }
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": about.title, "version": "2.0", "description": about.description },
        "servers": [{ "url": base, "description": "Paths are relative to it" }],
        "security": [{ "adminToken": [] }],
        "tags": about.tags,
        "paths": paths,
        "components": {
            "securitySchemes": {
                "adminToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The admin token: `esim serve --admin-token`, or the one generated into the data dir's `admin-token` file",
                },
            },
            "schemas": schemas,
        },
    })
}

#[cfg(test)]
mod tests;
