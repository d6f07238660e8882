//! The OpenAPI 3.1 document of the reseller API (`GET /api/v2/reseller/openapi.json`).
//!
//! The paths come from the endpoint table ([`Endpoint`], reseller and public endpoints
//! only, at their full paths), so every routed path and method is documented and nothing
//! else; the tests check both ways. Response schemas are derived from the reply types of
//! `esim_engine::reply` with `schemars`, as they serialize (money as JSON numbers,
//! timestamps as RFC 3339 strings, nullable fields as `["...", "null"]` types or
//! `anyOf` with null, `skip_serializing_if` fields not required), with the enums they
//! write inline named once (`EuiccState`, `EsimStatus`); request bodies from their types
//! in [`crate::bodies`], as they deserialize (each operation names its body type, which
//! registers its schema). Error statuses come from [`ErrorCode::http_status`], so a
//! documented status can never disagree with the code that produces it. A test drives the real [`crate::Service`] through every operation
//! and validates each answer against this document.

use crate::bodies::*;
use crate::routes::{Api, Endpoint, RESELLER_BASE};
use esim_engine::{ErrorCode, EventData, EventName};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// The document as pretty JSON text, built once.
pub fn document() -> String {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| serde_json::to_string_pretty(&build()).expect("a JSON value always serializes")).clone()
}

// ----- schemas -----

fn schema_ref(name: &str) -> Value {
    Schema::new_ref(format!("#/components/schemas/{name}")).to_value()
}

/// JSON Schema 2020-12 (OpenAPI 3.1's dialect), with the named schemas under
/// `components/schemas`.
pub(crate) fn component_settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().with(|settings| {
        settings.definitions_path = "/components/schemas".into();
        settings.meta_schema = None;
    })
}

/// The generator of the request body schemas: as the bodies deserialize (an optional
/// field is not required).
pub(crate) fn request_generator() -> SchemaGenerator {
    component_settings().for_deserialize().into_generator()
}

/// The generator of the response schemas and the event payloads: as they serialize (a
/// `skip_serializing_if` field is not required).
fn response_generator() -> SchemaGenerator {
    component_settings().for_serialize().into_generator()
}

/// Registers the response schemas with `generator`: the reply types of the engine
/// (`schemars`, as they serialize), the error body and this document, by the names the
/// operations use.
fn register_replies(generator: &mut SchemaGenerator) {
    use esim_engine::reply::*;
    generator.subschema_for::<ProvisionedEsim>();
    generator.subschema_for::<EsimDetail>();
    generator.subschema_for::<EsimPage>();
    generator.subschema_for::<DataToggled>();
    generator.subschema_for::<Terminated>();
    generator.subschema_for::<Throttled>();
    generator.subschema_for::<Funded>();
    generator.subschema_for::<DefundAccepted>();
    generator.subschema_for::<GroupList>();
    generator.subschema_for::<GroupFunded>();
    generator.subschema_for::<GroupDefundAccepted>();
    generator.subschema_for::<GroupMembers>();
    generator.subschema_for::<GroupMemberChange>();
    generator.subschema_for::<WalletBalance>();
    generator.subschema_for::<Rates>();
    generator.subschema_for::<AccountRecord>();
    generator.subschema_for::<WebhookCreated>();
    generator.subschema_for::<WebhookList>();
    generator.subschema_for::<Success>();
    generator.subschema_for::<WebhookTestResult>();
    generator.subschema_for::<EventPage>();
    generator.subschema_for::<EventEnvelope>();
    generator.subschema_for::<DeliveryAttemptPage>();
    generator.subschema_for::<ResendAccepted>();
    generator.subschema_for::<EsimQrCode>();
    generator.subschema_for::<ApiKeyList>();
    generator.subschema_for::<ApiKeyCreated>();
    generator.subschema_for::<ApiKeyRevoked>();
    generator.subschema_for::<AutoRefillSettings>();
    generator.subschema_for::<ErrorBody>();
    generator.subschema_for::<OpenApiDocument>();
}

/// This OpenAPI 3.1 document
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used: the document is built as JSON below
struct OpenApiDocument {
    /// 3.1.0
    openapi: String,
    /// Title, version and description of the API
    info: Map<String, Value>,
    /// The base URL of the paths
    servers: Vec<Map<String, Value>>,
    /// The API key, for every operation that does not say otherwise
    security: Vec<Map<String, Value>>,
    /// The groups of operations
    tags: Vec<Map<String, Value>>,
    /// The operations, by path
    paths: Map<String, Value>,
    /// What receivers get, by event
    webhooks: Map<String, Value>,
    /// The schemas and the security scheme
    components: Map<String, Value>,
}

/// The error body of every failure
#[derive(JsonSchema)]
#[schemars(rename = "Error")]
#[allow(dead_code)] // only its schema is used: the engine writes the body from an `ApiError`
pub(crate) struct ErrorBody {
    /// Human-readable text
    error: String,
    /// Machine code, e.g. VALIDATION_ERROR, INSUFFICIENT_BALANCE, ESIM_NOT_FOUND
    code: String,
    /// Detail
    message: String,
}

/// The one reply type of the three member changes, narrowed per answer: `status` fixed,
/// and the settlement fields required with `move_pending` and absent otherwise.
fn member_change(base: &Value, description: &str, status: &str) -> Value {
    let mut schema = base.clone();
    schema["description"] = description.into();
    let field = schema["properties"]["status"].as_object_mut().expect("a derived object describes status");
    assert!(field.remove("enum").is_some_and(|values| values.as_array().unwrap().contains(&status.into())));
    field.remove("description");
    field.insert("const".into(), status.into());
    let pending = ["settles_in_minutes", "estimated_return_usd"];
    if status == "move_pending" {
        let required = schema["required"].as_array_mut().expect("a derived object lists its required fields");
        required.extend(pending.iter().map(|&name| Value::from(name)));
    } else if let Some(properties) = schema["properties"].as_object_mut() {
        properties.retain(|name, _| !pending.contains(&name.as_str()));
    }
    schema
}

/// Every component schema: the replies, the error body, the document and the event
/// payloads (`responses`), and the request bodies (`requests`, as the operations
/// registered them).
fn schemas(mut all: Map<String, Value>, requests: Map<String, Value>) -> Value {
    let change = all.remove("GroupMemberChange").expect("derived above");
    all.insert(
        "GroupMemberAssigned".into(),
        member_change(&change, "The eSIM (holding no balance) joined the group at once", "assigned"),
    );
    all.insert("GroupMovePending".into(), member_change(
        &change,
        "The eSIM holds a balance: its data is paused, the balance returns to the reseller balance and the eSIM joins at settlement (not a failure)",
        "move_pending",
    ));
    all.insert(
        "GroupMemberRemoved".into(),
        member_change(&change, "The eSIM left the group and is standalone at $0", "removed"),
    );

    // The request bodies come from their types (`crate::bodies`).
    for (name, schema) in requests {
        if let Some(reply) = all.get(&name) {
            assert_eq!(reply, &schema, "{name} is derived for replies and requests alike");
        }
        all.insert(name, schema);
    }
    Value::Object(all)
}

// ----- operations -----

/// Registers a request body's type with the generator and answers its `$ref`.
pub(crate) type BodySchema = fn(&mut SchemaGenerator) -> Schema;

/// What the document says about one route.
pub(crate) struct Operation {
    pub(crate) id: &'static str,
    pub(crate) tag: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) description: &'static str,
    /// The schema-only types whose fields are its query parameters, in order.
    pub(crate) query: Vec<BodySchema>,
    /// The request body's schema (registered with the request generator, answering its
    /// `$ref`), and whether the body is required.
    pub(crate) body: Option<(BodySchema, bool)>,
    /// (status, schema name, description) of each success.
    pub(crate) success: Vec<(u16, &'static str, &'static str)>,
    /// Errors of this operation with their conditions (statuses from the codes).
    pub(crate) errors: Vec<(ErrorCode, &'static str)>,
}

impl Operation {
    /// The operation object of a document (any of the three): its `parameters`, the
    /// successes and `errors` by status, the body, and no credential when `public`.
    pub(crate) fn render(
        &self,
        parameters: Vec<Value>,
        errors: &[(ErrorCode, String)],
        public: bool,
        requests: &mut SchemaGenerator,
    ) -> Value {
        let mut responses = Map::new();
        for (status, schema, description) in &self.success {
            let content = json_content(schema);
            responses.insert(status.to_string(), json!({ "description": description, "content": content }));
        }
        responses.extend(error_responses(errors, requests));
        let mut value = json!({
            "operationId": self.id,
            "tags": [self.tag],
            "summary": self.summary,
            "parameters": parameters,
            "responses": responses,
        });
        if !self.description.is_empty() {
            value["description"] = json!(self.description);
        }
        if let Some((schema_of, required)) = self.body {
            let schema = schema_of(requests);
            value["requestBody"] =
                json!({ "required": required, "content": { "application/json": { "schema": schema } } });
        }
        if public {
            value["security"] = json!([]);
        }
        value
    }
    /// The operation of an operator API's own document (`GET /openapi.json`).
    pub(crate) fn document(id: &'static str) -> Operation {
        Operation::new(id, "Meta", "This OpenAPI document").describe("Public: needs no token.").ok(
            200,
            "OpenApiDocument",
            "The document",
        )
    }

    pub(crate) fn new(id: &'static str, tag: &'static str, summary: &'static str) -> Operation {
        Operation {
            id,
            tag,
            summary,
            description: "",
            query: Vec::new(),
            body: None,
            success: Vec::new(),
            errors: Vec::new(),
        }
    }
    pub(crate) fn describe(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }
    pub(crate) fn ok(mut self, status: u16, schema: &'static str, description: &'static str) -> Self {
        self.success.push((status, schema, description));
        self
    }
    /// The request body is a `T` (one of `crate::bodies`).
    pub(crate) fn body<T: JsonSchema>(mut self, required: bool) -> Self {
        self.body = Some((SchemaGenerator::subschema_for::<T>, required));
        self
    }
    /// `T`'s fields are query parameters of the operation (after any given before).
    pub(crate) fn query<T: JsonSchema>(mut self) -> Self {
        self.query.push(T::json_schema);
        self
    }
    /// `limit` and `offset`.
    pub(crate) fn paged(self) -> Self {
        self.query::<Paging>()
    }
    pub(crate) fn errors(mut self, errors: &[(ErrorCode, &'static str)]) -> Self {
        self.errors.extend_from_slice(errors);
        self
    }
}

// ----- parameters: schema-only types, one field per parameter -----
//
// A field's doc comment is the parameter's description. Every field is declared plain
// (neither `Option` nor `default`), so that schemars lists the fields in `required` in
// their declared order, the order of the parameters ([`parameters`]); whether a parameter
// is required is said by its place (a query parameter never is).

/// `limit` and `offset` of every list.
#[derive(JsonSchema)]
#[allow(dead_code)]
pub(crate) struct Paging {
    /// Page size; values above 100 are clamped to 100
    #[schemars(range(min = 1, max = 100), extend("default" = 50))]
    limit: u64,
    /// eSIMs to skip
    #[schemars(extend("default" = 0))]
    offset: u64,
}

/// The filter of `GET /esim/list`.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct EsimListQuery {
    /// Only eSIMs in this status
    #[schemars(with = "esim_engine::reply::schema::EsimStatus")]
    status: String,
}

/// The filters of `GET /rates`.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct RatesQuery {
    /// ISO2 or ISO3 code, slug or name (case-insensitive)
    country: String,
    /// Continent name or slug (case-insensitive)
    continent: String,
}

/// The filter of `GET /webhooks/{id}/deliveries`.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct DeliveriesQuery {
    /// Only the attempts of this event
    event_id: String,
}

/// The filters of `GET /events` (as [`esim_engine::event_log::EventFilter::parse`] reads them).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct EventsQuery {
    /// Only events of this type
    #[serde(rename = "type")]
    #[schemars(with = "esim_engine::reply::schema::SubscribableEvent")]
    event_type: String,
    /// Only events created after this time
    #[schemars(with = "esim_engine::reply::schema::Timestamp")]
    created_after: String,
    /// Only events created before this time
    #[schemars(with = "esim_engine::reply::schema::Timestamp")]
    created_before: String,
    /// Only events of this eSIM
    iccid: String,
    /// Only events naming this group
    group_id: String,
}

/// The ids in paths, by the resource they name ([`path_parameters`]).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct PathIds {
    /// ICCID of the eSIM (19 digits)
    iccid: String,
    /// Group id
    #[schemars(extend("format" = "uuid"))]
    group: String,
    /// API key id (key_...)
    key: String,
    /// Event id (evt_...)
    event: String,
    /// Webhook id (wh_...)
    webhook: String,
}

/// The header of a retry-safe change.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct IdempotencyHeader {
    /// Makes the call safe to retry: the first final response is stored for 24 hours and replayed byte for byte to a repeat with the same key and request
    #[serde(rename = "Idempotency-Key")]
    #[schemars(length(min = 1, max = 255))]
    key: String,
}

/// The header of a `RATE_LIMITED` answer.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct RateLimitedHeaders {
    /// With RATE_LIMITED: whole seconds until the window resets
    #[serde(rename = "Retry-After")]
    #[schemars(range(min = 1))]
    retry_after: u64,
}

/// The headers of every delivery ([`crate::webhook_headers::delivery_headers`]).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct DeliveryHeaders {
    /// Lowercase hex HMAC-SHA256 of the raw body keyed with the signing secret (the whole whsec_... text); compare in constant time
    #[serde(rename = "X-Service-Signature")]
    #[schemars(pattern(r"^[0-9a-f]{64}$"))]
    signature: String,
    /// The envelope's id
    #[serde(rename = "X-Service-Event-Id")]
    #[schemars(pattern("^evt_"))]
    event_id: String,
    /// Service time of this attempt, RFC 3339 UTC with milliseconds
    #[serde(rename = "X-Service-Timestamp")]
    #[schemars(with = "esim_engine::reply::schema::Timestamp")]
    timestamp: String,
    /// 1 for the first POST of this event to this webhook, then 2, 3 … on retries
    #[serde(rename = "X-Service-Delivery-Attempt")]
    #[schemars(range(min = 1))]
    attempt: u32,
    /// Standard Webhooks: the event id (kept on retries)
    #[serde(rename = "webhook-id")]
    #[schemars(pattern("^evt_"))]
    webhook_id: String,
    /// Standard Webhooks: Unix seconds of this attempt on the wall clock (also in the sandbox), signed
    #[serde(rename = "webhook-timestamp")]
    webhook_timestamp: u64,
    /// Standard Webhooks: v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}"> keyed with the base64-decoded secret after whsec_; during the 24 hours after a secret rotation two signatures, space-separated, the new secret's first
    #[serde(rename = "webhook-signature")]
    #[schemars(pattern(r"^v1,[A-Za-z0-9+/]+=*( v1,[A-Za-z0-9+/]+=*)?$"))]
    webhook_signature: String,
}

/// The fields of a schema-only type (`schema`, an object) in declared order: each
/// field's name, its schema, and its description taken out of it.
pub(crate) fn fields(schema: Schema) -> Vec<(String, Value, Value)> {
    let schema = schema.to_value();
    let names = schema["required"].as_array().expect("every field of a parameter type is listed in required");
    names
        .iter()
        .map(|name| {
            let name = name.as_str().expect("field names are text");
            let mut field = schema["properties"][name].clone();
            let description = field.as_object_mut().and_then(|f| f.remove("description")).unwrap_or_default();
            (name.to_string(), field, description)
        })
        .collect()
}

/// The parameters of a schema-only type's fields, in `location`.
pub(crate) fn parameters(schema: Schema, location: &str, required: bool) -> Vec<Value> {
    let parameter = |(name, schema, description)| json!({ "name": name, "in": location, "required": required, "schema": schema, "description": description });
    fields(schema).into_iter().map(parameter).collect()
}

/// The documented operation of an endpoint; `None` for the admin and sandbox APIs,
/// which this document (of the reseller API) leaves out.
fn operation(endpoint: Endpoint) -> Option<Operation> {
    if endpoint.documented_in() != Api::Reseller {
        return None;
    }
    let resources = [
        esim_operation,
        esim_wallet_operation,
        group_operation,
        group_member_operation,
        account_operation,
        webhook_operation,
        event_operation,
    ];
    let described = resources.iter().find_map(|describe| describe(endpoint));
    Some(described.unwrap_or_else(|| unreachable!("{endpoint:?} is described by no resource")))
}

// Conditions that several operations share.
const NO_ESIM: (ErrorCode, &str) = (ErrorCode::EsimNotFound, "the ICCID is unknown or belongs to another account");
const NO_GROUP: (ErrorCode, &str) = (ErrorCode::GroupNotFound, "the group is unknown or belongs to another account");
const NO_WEBHOOK: (ErrorCode, &str) = (ErrorCode::NotFound, "the webhook id is unknown");
const TERMINATED: (ErrorCode, &str) = (ErrorCode::EsimAlreadyTerminated, "the eSIM is terminated");
const FROZEN: (ErrorCode, &str) = (ErrorCode::AccountSuspended, "the operator has frozen the account");
const RETURN_PENDING: (ErrorCode, &str) =
    (ErrorCode::DefundPending, "a balance return of this eSIM is in progress; retry after it settles");
const MOVING: (ErrorCode, &str) = (ErrorCode::MovePending, "a move of this eSIM into a group is in progress");
const UPSTREAM: (ErrorCode, &str) = (ErrorCode::UpstreamError, "data could not be paused upstream; nothing moved");
const AMOUNT: (ErrorCode, &str) =
    (ErrorCode::ValidationError, "amount missing (sent as amount_usd, the admin API's name, the message says: did you mean `amount`?), not a number, outside 0.01 to 10000 or with more than 2 decimals");

/// `/esim/...`; `None` for another endpoint.
fn esim_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::ProvisionEsim => Operation::new("provisionEsim", "eSIMs", "Provision an eSIM")
            .describe("Deducts the 1.75 USD fee from the reseller balance. A standalone eSIM starts with a $0 wallet; with group_id it is issued into that group. Emits esim.provisioned.")
            .ok(201, "ProvisionedEsim", "The new eSIM with its installation details")
            .body::<ProvisionRequest>(false)
            .errors(&[
                (ValidationError, "a malformed body, or end_user_reference or label longer than 256 characters"),
                (InsufficientBalance, "the reseller balance is below the 1.75 fee"),
                FROZEN,
                (GroupNotFound, "group_id is unknown or belongs to another account"),
                (GroupFull, "the group of group_id holds the maximum number of eSIMs"),
                (NoEsimsAvailable, "the eSIM inventory is depleted"),
            ]),
        E::ListEsims => Operation::new("listEsims", "eSIMs", "List eSIMs")
            .describe("The account's eSIMs in provisioning order (stable paging).")
            .ok(200, "EsimPage", "A page of eSIMs")
            .query::<EsimListQuery>()
            .paged()
            .errors(&[(ValidationError, "status is not one of the statuses, limit is 0, or limit or offset is not a non-negative integer")]),
        E::GetEsim => Operation::new("getEsim", "eSIMs", "Get an eSIM")
            .describe("The detail record; euicc_state is read live from the network, falling back to the cached state.")
            .ok(200, "EsimDetail", "The eSIM")
            .errors(&[NO_ESIM]),
        E::EsimQrCode => Operation::new("getEsimQrCode", "eSIMs", "Get the eSIM's QR code")
            .describe("The installation details the provisioning answer showed, again: the LPA string, its QR code as a PNG data URL and the one-tap install link (beyond the spec; what the dashboard shows).")
            .ok(200, "EsimQrCode", "The QR code")
            .errors(&[NO_ESIM]),
        E::EnableEsim => Operation::new("enableEsim", "eSIMs", "Enable data")
            .describe("Needs a reseller balance above 0. Emits esim.data_resumed when data was off.")
            .ok(200, "DataToggled", "Data is enabled")
            .errors(&[
                TERMINATED,
                (InsufficientBalance, "the reseller balance is not above 0"),
                FROZEN,
                NO_ESIM,
                RETURN_PENDING,
                MOVING,
            ]),
        E::DisableEsim => Operation::new("disableEsim", "eSIMs", "Disable data")
            .describe("The eSIM stays provisioned. Emits esim.data_suspended when data was on.")
            .ok(200, "DataToggled", "Data is disabled")
            .errors(&[TERMINATED, NO_ESIM]),
        E::TerminateEsim => Operation::new("terminateEsim", "eSIMs", "Terminate an eSIM")
            .describe("Permanent: data stops and the remaining wallet balance is forfeited. Emits esim.terminated.")
            .ok(200, "Terminated", "The eSIM is terminated")
            .errors(&[(EsimAlreadyTerminated, "the eSIM is already terminated"), NO_ESIM]),
        E::ThrottleEsim => Operation::new("throttleEsim", "eSIMs", "Throttle speed")
            .ok(200, "Throttled", "The speed limit is applied")
            .body::<ThrottleRequest>(true)
            .errors(&[(ValidationError, "speed is missing or not an accepted value"), TERMINATED, NO_ESIM]),
        _ => return None,
    })
}

/// `/esim/{iccid}/fund` and `/defund`: the eSIM wallet; `None` for another endpoint.
fn esim_wallet_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::FundEsim => Operation::new("fundEsim", "eSIMs", "Fund the eSIM wallet")
            .describe("Moves the amount from the reseller balance into the eSIM wallet; data can be used at once. Usage reporting pauses for about 15 minutes after every fund.")
            .ok(200, "Funded", "The wallet is funded")
            .body::<FundRequest>(true)
            .errors(&[
                AMOUNT,
                TERMINATED,
                (InsufficientBalance, "the reseller balance is below the amount"),
                FROZEN,
                NO_ESIM,
                (EsimInGroup, "the eSIM is a group member; fund the group instead"),
                RETURN_PENDING,
                MOVING,
            ]),
        E::DefundEsim => Operation::new("defundEsim", "eSIMs", "Return the unused eSIM balance")
            .describe("Data is paused at once; the displayed balance reaches the reseller balance after about 15 minutes. The eSIM stays installed and can be funded again after settlement.")
            .ok(202, "DefundAccepted", "The return is under way")
            .errors(&[
                TERMINATED,
                (NoBalanceToReturn, "the wallet holds nothing to return"),
                (WalletNotReady, "the eSIM has no wallet yet (never funded)"),
                NO_ESIM,
                (DefundAlreadyPending, "a balance return is already in progress"),
                MOVING,
                (EsimInGroup, "the eSIM is a group member; defund the group instead"),
                UPSTREAM,
            ]),
        _ => return None,
    })
}

/// `/groups/...`; `None` for another endpoint.
fn group_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::ListGroups => {
            Operation::new("listGroups", "Groups", "List groups").ok(200, "GroupList", "The groups, newest first")
        }
        E::CreateGroup => Operation::new("createGroup", "Groups", "Create a group")
            .describe("A new group starts with a $0 balance. Groups cannot be deleted; rename one to reuse it.")
            .ok(201, "Group", "The new group")
            .body::<GroupCreateRequest>(true)
            .errors(&[
                (ValidationError, "name missing or not 1 to 100 characters, or an amount out of bounds"),
                (GroupNameTaken, "a group of the account already has this name"),
                (GroupLimitReached, "the account already has the maximum number of groups"),
            ]),
        E::GetGroup => {
            Operation::new("getGroup", "Groups", "Get a group").ok(200, "Group", "The group").errors(&[NO_GROUP])
        }
        E::UpdateGroup => Operation::new("updateGroup", "Groups", "Rename a group or change its thresholds")
            .ok(200, "Group", "The updated group")
            .body::<GroupUpdateRequest>(true)
            .errors(&[
                (ValidationError, "no field given, name not 1 to 100 characters, or an amount out of bounds"),
                NO_GROUP,
                (GroupNameTaken, "another group of the account has this name"),
            ]),
        E::FundGroup => Operation::new("fundGroup", "Groups", "Fund a group")
            .describe("Moves the amount from the reseller balance into the group balance and re-arms group.balance_low. Emits group.funded.")
            .ok(200, "GroupFunded", "The group is funded")
            .body::<GroupFundRequest>(true)
            .errors(&[
                AMOUNT,
                (InsufficientBalance, "the reseller balance is below the amount"),
                FROZEN,
                NO_GROUP,
                (GroupDefundPending, "a group balance return is in progress"),
            ]),
        E::DefundGroup => Operation::new("defundGroup", "Groups", "Return the group balance")
            .describe("Every member's data pauses; the displayed balance reaches the reseller balance after about 15 minutes (group.defunded). Members resume once the group is funded again.")
            .ok(200, "GroupDefundAccepted", "The return is under way")
            .errors(&[
                (NoBalanceToReturn, "the group holds nothing to return"),
                NO_GROUP,
                (GroupDefundPending, "a group balance return is already in progress"),
                UPSTREAM,
            ]),
        _ => return None,
    })
}

/// `/groups/{id}/esims...`: the members of a group; `None` for another endpoint.
fn group_member_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::ListGroupEsims => Operation::new("listGroupEsims", "Groups", "List the members of a group")
            .ok(200, "GroupMembers", "A page of members")
            .paged()
            .errors(&[(ValidationError, "limit is 0, or limit or offset is not a non-negative integer"), NO_GROUP]),
        E::AddGroupEsim => Operation::new("addGroupEsim", "Groups", "Move an eSIM into a group")
            .describe("An eSIM without balance joins at once (200). An eSIM holding a balance answers 202 move_pending: its data pauses, the balance returns to the reseller balance and it joins when upstream reporting settles. Emits esim.group_assigned when it joins.")
            .ok(200, "GroupMemberAssigned", "The eSIM is a member")
            .ok(202, "GroupMovePending", "The move is under way")
            .body::<GroupAddEsimRequest>(true)
            .errors(&[
                (ValidationError, "iccid is missing"),
                TERMINATED,
                NO_GROUP,
                NO_ESIM,
                (EsimAlreadyInGroup, "the eSIM is already a member of a group"),
                (MovePending, "a move of this eSIM is already in progress"),
                RETURN_PENDING,
                (GroupFull, "the group holds the maximum number of eSIMs"),
                UPSTREAM,
            ]),
        E::RemoveGroupEsim => {
            Operation::new("removeGroupEsim", "Groups", "Remove an eSIM from a group")
                .describe("The eSIM becomes standalone with a $0 wallet; no money moves. Emits esim.group_removed.")
                .ok(200, "GroupMemberRemoved", "The eSIM is standalone")
                .errors(&[NO_GROUP, (EsimNotFound, "the ICCID is unknown or not a member of this group")])
        }
        _ => return None,
    })
}

/// The account, its balance, rates, API keys and auto-refill, and this document; `None` for another endpoint.
fn account_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::WalletBalance => {
            Operation::new("getWalletBalance", "Account", "Get the reseller balance").ok(200, "WalletBalance", "The balance")
        }
        E::Rates => Operation::new("getRates", "Account", "Get data rates")
            .describe("Per-country, per-operator reseller rates, 10% below retail.")
            .ok(200, "Rates", "The rates")
            .query::<RatesQuery>(),
        E::Account => Operation::new("getAccount", "Account", "Get the account").ok(200, "Account", "The account"),
        E::ListApiKeys => Operation::new("listApiKeys", "Account", "List API keys")
            .describe("The account's active API keys, oldest first (then by id), by id, prefix (the first 12 characters) and creation time; never a key. current marks the key of this request.")
            .ok(200, "ApiKeyList", "The active keys"),
        E::CreateApiKey => Operation::new("createApiKey", "Account", "Create an API key")
            .describe("A new key for this account, shown only in this answer (an Idempotency-Key replay answers api_key null: only the key's digest is kept). At most 20 active keys.")
            .ok(201, "ApiKeyCreated", "The new key")
            .errors(&[(ApiKeyLimitReached, "the account already has 20 active API keys"), FROZEN]),
        E::RevokeApiKey => Operation::new("revokeApiKey", "Account", "Revoke an API key")
            .describe("The key answers 401 INVALID_API_KEY from now on. The key of this request may be revoked; the account's last active key may not. A frozen account may revoke keys.")
            .ok(200, "ApiKeyRevoked", "The key is revoked")
            .errors(&[
                (NotFound, "no active key of this account has that id"),
                (LastApiKey, "the key is the account's last active key"),
            ]),
        E::GetAutoRefill => Operation::new("getAutoRefill", "Account", "Get the auto-refill settings")
            .describe("Auto-refill charges the saved card when real spend (a provisioning fee, or a low group the balance cannot cover) leaves the reseller balance low; at most 10 charges in 24 hours, and a failed charge switches it off.")
            .ok(200, "AutoRefillSettings", "The settings"),
        E::UpdateAutoRefill => Operation::new("updateAutoRefill", "Account", "Change the auto-refill settings")
            .describe("Turns auto-refill on or off and sets the amount of a charge; absent fields keep their value.")
            .ok(200, "AutoRefillSettings", "The settings as they now are")
            .body::<AutoRefillUpdateRequest>(true)
            .errors(&[
                (ValidationError, "no field given, enabled not a boolean, or amount_usd outside 10 to 1000000 or with more than 2 decimals"),
                (AccountSuspended, "enabled is true and the operator has frozen the account"),
            ]),
        E::OpenApi => Operation::new("getOpenApiDocument", "Meta", "This OpenAPI document")
            .describe("Public: needs no API key.")
            .ok(200, "OpenApiDocument", "The document"),
        _ => return None,
    })
}

/// `/webhooks/...`; `None` for another endpoint.
fn webhook_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::ListWebhooks => Operation::new("listWebhooks", "Webhooks", "List webhooks")
            .ok(200, "WebhookList", "The webhooks and the subscribable events"),
        E::CreateWebhook => Operation::new("createWebhook", "Webhooks", "Register a webhook")
            .describe("The signing secret is returned only here.")
            .ok(201, "WebhookWithSecret", "The webhook with its signing secret")
            .body::<WebhookCreateRequest>(true)
            .errors(&[
                (ValidationError, "url not an absolute https:// URL of a public host, or events empty or naming an unknown event"),
                (WebhookLimitReached, "the account already has 5 webhooks"),
            ]),
        E::GetWebhook => {
            Operation::new("getWebhook", "Webhooks", "Get a webhook").ok(200, "Webhook", "The webhook").errors(&[NO_WEBHOOK])
        }
        E::UpdateWebhook => Operation::new("updateWebhook", "Webhooks", "Update a webhook")
            .describe("Setting active to true resets failure_count to 0.")
            .ok(200, "Webhook", "The updated webhook")
            .body::<WebhookUpdateRequest>(false)
            .errors(&[(ValidationError, "an invalid url or events, or a field of the wrong type"), NO_WEBHOOK]),
        E::DeleteWebhook => Operation::new("deleteWebhook", "Webhooks", "Delete a webhook")
            .ok(200, "Success", "The webhook is deleted")
            .errors(&[NO_WEBHOOK]),
        E::TestWebhook => Operation::new("testWebhook", "Webhooks", "Send a test event")
            .describe("Sends one event of type test to this webhook (no subscription needed, no retry, not counted in failure_count) and answers with the receiver's status.")
            .ok(200, "WebhookTestResult", "What the receiver answered")
            .errors(&[NO_WEBHOOK, FROZEN]),
        E::RotateWebhookSecret => Operation::new("rotateWebhookSecret", "Webhooks", "Rotate the signing secret")
            .describe("Returns a new signing secret, shown only here. For 24 hours deliveries carry two signatures in webhook-signature (the new and the previous secret); X-Service-Signature uses the new secret at once.")
            .ok(200, "WebhookWithSecret", "The webhook with its new signing secret")
            .errors(&[NO_WEBHOOK, FROZEN]),
        E::ListDeliveries => Operation::new("listWebhookDeliveries", "Webhooks", "List delivery attempts")
            .describe("The webhook's finished delivery attempts of the last 30 days (at most the last 200), newest first: automatic deliveries and their retries, test events and manual resends, each with its HTTP status or error, duration and the time of the next retry.")
            .ok(200, "DeliveryAttemptPage", "A page of delivery attempts")
            .query::<DeliveriesQuery>()
            .paged()
            .errors(&[(ValidationError, "limit is 0, or limit or offset is not a non-negative integer"), NO_WEBHOOK]),
        _ => return None,
    })
}

/// `/events/...`; `None` for another endpoint.
fn event_operation(endpoint: Endpoint) -> Option<Operation> {
    use Endpoint as E;
    use ErrorCode::*;
    Some(match endpoint {
        E::ListEvents => Operation::new("listEvents", "Events", "List events")
            .describe("The account's events of the last 30 days, newest first, each exactly as it was delivered to webhooks (whether or not a webhook was subscribed). Test events are not listed.")
            .ok(200, "EventPage", "A page of events")
            .query::<EventsQuery>()
            .paged()
            .errors(&[(ValidationError, "type is not an event name, a time is not RFC 3339, limit is 0, or limit or offset is not a non-negative integer")]),
        E::GetEvent => Operation::new("getEvent", "Events", "Get an event")
            .describe("The event exactly as it was delivered (the same bytes), for 30 days after it was created.")
            .ok(200, "EventEnvelope", "The event")
            .errors(&[(NotFound, "the event id is unknown, expired, or of another account")]),
        E::ResendEvent => Operation::new("resendEvent", "Events", "Resend an event to a webhook")
            .describe("Sends the event again, byte for byte and with the same id, to one of the account's webhooks (active or not, subscribed or not), at once and once: a manual resend is not retried and does not count in failure_count. The attempt shows in the webhook's delivery log.")
            .ok(202, "ResendAccepted", "The event is on its way")
            .body::<EventResendRequest>(true)
            .errors(&[
                (ValidationError, "webhook_id is missing or not a string"),
                (NotFound, "the event id is unknown, expired or of another account, or the webhook id is unknown"),
                FROZEN,
            ]),
        _ => return None,
    })
}

/// The path parameters of `pattern`: each a field of [`PathIds`], by the resource it names.
fn path_parameters(pattern: &str, generator: &mut SchemaGenerator) -> Vec<Value> {
    let ids = fields(PathIds::json_schema(generator));
    pattern
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let field = match name {
                "iccid" => "iccid",
                "id" if pattern.starts_with("/groups") => "group",
                "id" if pattern.starts_with("/keys") => "key",
                "id" if pattern.starts_with("/events") => "event",
                "id" => "webhook",
                other => unreachable!("no description of the path parameter {other}"),
            };
            let (_, schema, description) = ids.iter().find(|(id, _, _)| id == field).expect("a field of PathIds");
            json!({ "name": name, "in": "path", "required": true, "schema": schema, "description": description })
        })
        .collect()
}

fn json_content(schema: &str) -> Value {
    json!({ "application/json": { "schema": schema_ref(schema) } })
}

/// The error responses of an operation, one per status, each listing its codes.
fn error_responses(errors: &[(ErrorCode, String)], generator: &mut SchemaGenerator) -> Map<String, Value> {
    let rate_limited: Map<String, Value> = fields(RateLimitedHeaders::json_schema(generator))
        .into_iter()
        .map(|(name, schema, description)| (name, json!({ "description": description, "schema": schema })))
        .collect();
    let mut by_status: std::collections::BTreeMap<u16, Vec<(ErrorCode, String)>> = Default::default();
    for (code, condition) in errors {
        let list = by_status.entry(code.http_status()).or_default();
        match list.iter_mut().find(|(known, _)| known == code) {
            Some((_, known_condition)) => *known_condition = format!("{known_condition}; or {condition}"),
            None => list.push((*code, condition.clone())),
        }
    }
    by_status
        .into_iter()
        .map(|(status, codes)| {
            let description = codes
                .iter()
                .map(|(code, condition)| format!("{}: {condition}", code.as_str()))
                .collect::<Vec<_>>()
                .join(". ");
            let examples: Map<String, Value> = codes
                .iter()
                .map(|(code, condition)| {
                    let body = json!({ "error": code.title(), "code": code.as_str(), "message": condition });
                    (code.as_str().to_string(), json!({ "summary": condition, "value": body }))
                })
                .collect();
            let mut response = json!({
                "description": description,
                "content": { "application/json": { "schema": schema_ref("Error"), "examples": examples } },
            });
            if codes.iter().any(|(code, _)| *code == ErrorCode::RateLimited) {
                response["headers"] = Value::Object(rate_limited.clone());
            }
            (status.to_string(), response)
        })
        .collect()
}

fn build_operation(endpoint: Endpoint, op: Operation, requests: &mut SchemaGenerator) -> Value {
    let keyed = endpoint.api() == Api::Reseller;
    let write = endpoint.method() != "GET";
    let mut parameters = path_parameters(endpoint.pattern(), requests);
    for schema_of in &op.query {
        parameters.extend(self::parameters(schema_of(requests), "query", false));
    }
    let mut errors: Vec<(ErrorCode, String)> =
        op.errors.iter().map(|(code, condition)| (*code, condition.to_string())).collect();
    if keyed {
        errors.push((ErrorCode::InvalidApiKey, "the API key is missing, invalid or revoked".into()));
        errors.push((ErrorCode::RateLimited, "more than 100 requests in the key's one-minute window".into()));
    }
    if keyed && write {
        parameters.extend(self::parameters(IdempotencyHeader::json_schema(requests), "header", false));
        errors.push((ErrorCode::ValidationError, "Idempotency-Key is not 1 to 255 characters".into()));
        errors.push((ErrorCode::IdempotencyKeyReused, "the Idempotency-Key was used with a different request".into()));
        errors.push((
            ErrorCode::ServiceUnavailable,
            "the change cannot be made durable now; nothing changed, retry".into(),
        ));
    }
    op.render(parameters, &errors, !keyed, requests)
}

// ----- webhooks (the `webhooks` section: what receivers get) -----

/// Every event a receiver can get: the subscribable ones and `test`.
fn delivered_events() -> impl Iterator<Item = EventName> {
    EventName::SUBSCRIBABLE.into_iter().chain([EventName::Test])
}

/// The component name of an event's envelope (`EsimProvisionedEvent`).
fn envelope_schema_name(name: EventName) -> String {
    format!("{name:?}Event")
}

/// What the spec says fires an event (the `summary` of its webhook operation).
fn event_summary(name: EventName) -> &'static str {
    use EventName::*;
    match name {
        EsimProvisioned => "An eSIM was provisioned",
        EsimActivated => "A profile was installed for the first time",
        EsimTerminated => "An eSIM was terminated",
        EsimDataSuspended => "Data was disabled",
        EsimDataResumed => "Data was enabled again",
        EsimBalanceLow => "An eSIM wallet fell below $5 (as reported, once per crossing)",
        EsimBalanceDepleted => "An eSIM wallet reached $0: data stops",
        EsimDefunded => "An eSIM balance return settled",
        BalanceLow => "The reseller balance fell below $5 (first crossing)",
        BalanceDepleted => "The reseller balance reached $0",
        BalanceToppedUp => "The reseller balance was topped up (manually or by auto-refill)",
        BalanceAutoRefillSucceeded => "An auto-refill charge succeeded (beside balance.topped_up)",
        BalanceAutoRefillFailed => "An auto-refill charge failed; auto-refill is turned off",
        GroupBalanceLow => "A group balance fell below its threshold (once per crossing)",
        GroupFunded => "A group was funded",
        GroupBalanceDepleted => "A group balance reached $0: members' data stops",
        GroupDefunded => "A group balance return settled",
        EsimGroupAssigned => "An eSIM joined a group (at once, or when its move settled)",
        EsimGroupRemoved => "An eSIM left a group (removed, or terminated)",
        Test => "The probe of POST /webhooks/{id}/test (needs no subscription, never retried)",
    }
}

/// The body POSTed for an event: `{id, event, created_at, data}`, the exact bytes that
/// are signed. Schema-only: [`event_envelope`] narrows `event` and `data` per event.
#[derive(JsonSchema)]
#[allow(dead_code)]
struct WebhookEnvelope {
    /// Event id: receivers de-duplicate retries by it (also webhook-id)
    #[schemars(pattern("^evt_"))]
    id: String,
    /// The event's name
    event: String,
    /// When it happened (service time)
    #[schemars(with = "esim_engine::reply::schema::Timestamp")]
    created_at: String,
    /// The event's fields
    data: Map<String, Value>,
}

/// The envelope of one event as delivered: [`WebhookEnvelope`] with its name as `event`
/// and its payload's schema ([`EventData::schema_of`], registered with `generator`) as `data`.
fn event_envelope(name: EventName, generator: &mut SchemaGenerator) -> Value {
    let mut envelope = WebhookEnvelope::json_schema(generator).to_value();
    envelope["description"] = format!("The body POSTed for {}: the exact bytes that are signed", name.as_str()).into();
    let event = envelope["properties"]["event"].as_object_mut().expect("a derived object describes event");
    event.remove("description");
    event.insert("const".into(), name.as_str().into());
    envelope["properties"]["data"] = EventData::schema_of(name, generator).to_value();
    envelope
}

/// The `webhooks` section: one POST per event, as it reaches the receiver.
fn webhooks(generator: &mut SchemaGenerator) -> Map<String, Value> {
    let headers = parameters(DeliveryHeaders::json_schema(generator), "header", true);
    delivered_events()
        .map(|name| {
            let operation = json!({
                "operationId": format!("{}Webhook", lower_camel(name)),
                "tags": ["Webhooks"],
                "summary": event_summary(name),
                "description": "POSTed to every active webhook subscribed to the event (or to *). Acknowledge with a 2xx within 10 seconds; anything else is a failure, retried after 30 s and then doubling waits (capped at 6 h, for 3 days); 10 consecutive failures, or one 410, disable the webhook.",
                "security": [],
                "parameters": headers,
                "requestBody": { "required": true, "content": json_content(&envelope_schema_name(name)) },
                "responses": {
                    "2XX": { "description": "Received" },
                    "410": { "description": "Gone: the webhook is disabled at once, its waiting retries dropped" },
                    "default": { "description": "A failure (as is no answer within 10 seconds): retried, counted in failure_count" },
                },
            });
            (name.as_str().to_string(), json!({ "post": operation }))
        })
        .collect()
}

/// `EsimProvisioned` as `esimProvisioned`.
fn lower_camel(name: EventName) -> String {
    let debug = format!("{name:?}");
    let mut chars = debug.chars();
    chars.next().map(|first| first.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
}

// ----- links (so stateful API testers reach the operations that take a created id) -----

/// Where a created id comes from and which operations take it (not the event list: its
/// first event is absent from an empty page, which testers report as an unusable link): every operation whose
/// path starts with `prefix` and has no other path parameter gets a link, so a new
/// operation on a resource is linked without being listed here.
struct LinkSource {
    /// The creating operation: path, method and its success statuses.
    path: &'static str,
    method: &'static str,
    statuses: &'static [&'static str],
    /// The path parameter it fills and the runtime expression that gives it.
    parameter: &'static str,
    expression: &'static str,
    prefix: &'static str,
}

const LINK_SOURCES: [LinkSource; 4] = [
    LinkSource {
        path: "/esim/provision",
        method: "post",
        statuses: &["201"],
        parameter: "iccid",
        expression: "$response.body#/iccid",
        prefix: "/esim/{iccid}",
    },
    LinkSource {
        path: "/groups",
        method: "post",
        statuses: &["201"],
        parameter: "id",
        expression: "$response.body#/id",
        prefix: "/groups/{id}",
    },
    LinkSource {
        path: "/webhooks",
        method: "post",
        statuses: &["201"],
        parameter: "id",
        expression: "$response.body#/id",
        prefix: "/webhooks/{id}",
    },
    LinkSource {
        path: "/keys",
        method: "post",
        statuses: &["201"],
        parameter: "id",
        expression: "$response.body#/id",
        prefix: "/keys/{id}",
    },
];

/// Adds the `links` of [`LINK_SOURCES`] to the responses of `paths`, and one from a
/// group member change to the removal of that member (group id and ICCID of the request).
fn add_links(paths: &mut Map<String, Value>) {
    let targets: Vec<(String, String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object().into_iter().flatten().map(move |(method, op)| {
                (path.clone(), method.clone(), op["operationId"].as_str().unwrap_or("").to_string())
            })
        })
        .collect();
    for source in &LINK_SOURCES {
        let mut links = Map::new();
        for (path, _, operation_id) in &targets {
            let rest = path.strip_prefix(source.prefix);
            let only_this = path_parameters_of(path) == [source.parameter];
            if rest.is_some_and(|rest| rest.is_empty() || rest.starts_with('/')) && only_this {
                links.insert(
                    operation_id.clone(),
                    json!({
                        "operationId": operation_id,
                        "parameters": { source.parameter: source.expression },
                        "description": format!("The {} of this answer", source.parameter),
                    }),
                );
            }
        }
        for status in source.statuses {
            paths[source.path][source.method]["responses"][*status]["links"] = Value::Object(links.clone());
        }
    }
    let remove = json!({
        "removeGroupEsim": {
            "operationId": "removeGroupEsim",
            "parameters": { "id": "$request.path.id", "iccid": "$response.body#/iccid" },
            "description": "Remove the eSIM just added",
        },
    });
    for status in ["200", "202"] {
        paths["/groups/{id}/esims"]["post"]["responses"][status]["links"] = remove.clone();
    }
}

fn path_parameters_of(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}')).collect()
}

fn build() -> Value {
    let mut paths = Map::new();
    let mut requests = request_generator();
    for &endpoint in Endpoint::ALL {
        let Some(op) = operation(endpoint) else { continue };
        // Relative to the server's URL (the spec's base), as client generators expect.
        let item = paths.entry(endpoint.pattern().to_string()).or_insert_with(|| json!({}));
        item[endpoint.method().to_ascii_lowercase()] = build_operation(endpoint, op, &mut requests);
    }
    add_links(&mut paths);
    let mut responses = response_generator();
    register_replies(&mut responses);
    let envelopes: Vec<(String, Value)> =
        delivered_events().map(|name| (envelope_schema_name(name), event_envelope(name, &mut responses))).collect();
    let webhooks = webhooks(&mut responses);
    let Value::Object(mut schemas) = schemas(responses.take_definitions(true), requests.take_definitions(true)) else {
        unreachable!("the schemas are an object")
    };
    schemas.extend(envelopes);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Reseller eSIM Connectivity Service",
            "version": "2.0",
            "description": "Provision eSIM profiles with pay-as-you-go data, fund per-eSIM wallets or shared-balance groups, and receive signed webhook notifications. Money amounts are USD JSON numbers; timestamps are RFC 3339 UTC with milliseconds. Every call but this document needs `Authorization: Bearer <API key>` and is limited to 100 requests per minute per key, and 2000 per minute for all keys of an account together, 100 per key held when an account holds more than 20 (429 RATE_LIMITED with Retry-After). Errors carry the Error body.",
        },
        "servers": [{ "url": RESELLER_BASE, "description": "The reseller API; paths are relative to it" }],
        "security": [{ "bearer": [] }],
        "tags": [
            { "name": "eSIMs", "description": "Provisioning, reads, data switch, throttle, terminate, fund and defund" },
            { "name": "Groups", "description": "Shared-balance groups and their members" },
            { "name": "Account", "description": "Reseller balance, rates and account" },
            { "name": "Webhooks", "description": "Signed event notifications" },
            { "name": "Meta", "description": "This document" },
        ],
        "paths": paths,
        "webhooks": webhooks,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "API key: `rsk_` followed by 64 hex characters (68 characters in all)",
                },
            },
            "schemas": schemas,
        },
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::routes::{find, Match};
    use crate::service::{ClockMode, Outcome, Service};
    use bytes::Bytes;
    use esim_engine::{DeliveryResult, Engine, EngineConfig, Millis};
    use std::collections::BTreeSet;

    fn parsed() -> Value {
        serde_json::from_str(&document()).expect("the document is JSON")
    }

    #[test]
    fn the_document_is_openapi_3_1_json() {
        let doc = parsed();
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["info"]["title"], "Reseller eSIM Connectivity Service");
        assert_eq!(doc["info"]["version"], "2.0");
        assert_eq!(doc["servers"].as_array().map(Vec::len), Some(1));
        assert_eq!(doc["servers"][0]["url"], RESELLER_BASE);
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(doc["security"], json!([{ "bearer": [] }]));
        assert_eq!(doc["paths"]["/openapi.json"]["get"]["security"], json!([]));
        // Amounts that validation refuses past two decimals say so.
        let schemas = &doc["components"]["schemas"];
        assert_eq!(schemas["FundRequest"]["properties"]["amount"]["multipleOf"], json!(0.01));
        assert_eq!(schemas["GroupFundRequest"]["properties"]["amount"]["multipleOf"], json!(0.01));
        assert!(document().contains("\n  \"openapi\""), "pretty-printed");
    }

    /// A nullable enum is one named enum in `anyOf` with null (one class in a generated
    /// client, not one per field), and the named enums write the engine's values.
    #[test]
    fn enums_are_named_once_and_nullable_ones_refer_to_them() {
        let doc = parsed();
        let mut values = Vec::new();
        walk(&doc["components"]["schemas"], String::new(), &mut values);
        for (at, value) in &values {
            let inline = value.get("enum").and_then(Value::as_array);
            assert!(!inline.is_some_and(|options| options.contains(&Value::Null)), "{at}: an inline nullable enum");
        }
        let schemas = &doc["components"]["schemas"];
        let nullable = json!([{ "$ref": "#/components/schemas/EuiccState" }, { "type": "null" }]);
        assert_eq!(schemas["EsimItem"]["properties"]["euicc_state"]["anyOf"], nullable);
        assert_eq!(schemas["EsimDetail"]["properties"]["euicc_state"]["anyOf"], nullable);
        assert_eq!(schemas["ProvisionedEsim"]["properties"]["euicc_state"]["$ref"], "#/components/schemas/EuiccState");
        assert_eq!(schemas["EsimItem"]["properties"]["status"]["$ref"], "#/components/schemas/EsimStatus");
        use esim_engine::state::{EsimStatus as Status, EuiccState as Euicc};
        // Exhaustive: a new engine state fails to compile here until it is named above.
        let euicc = |state: Euicc| match state {
            Euicc::Released | Euicc::Downloaded | Euicc::Installed | Euicc::Enabled => json!(state.as_str()),
        };
        let engine = [Euicc::Released, Euicc::Downloaded, Euicc::Installed, Euicc::Enabled].map(euicc);
        assert_eq!(schemas["EuiccState"]["enum"], json!(engine));
        let statuses: Vec<&str> = Status::ALL.iter().map(|status| status.as_str()).collect();
        assert_eq!(schemas["EsimStatus"]["enum"], json!(statuses));
    }

    #[test]
    fn documented_paths_and_methods_are_exactly_the_reseller_and_public_routes() {
        let doc = parsed();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object().unwrap().keys().map(move |method| (method.to_uppercase(), path.clone()))
            })
            .collect();
        let routed: BTreeSet<(String, String)> = Endpoint::ALL
            .iter()
            .filter(|endpoint| endpoint.documented_in() == Api::Reseller)
            .map(|endpoint| (endpoint.method().to_string(), endpoint.pattern().to_string()))
            .collect();
        assert_eq!(documented, routed);
        assert_eq!(routed.len(), 39);
        assert!(
            documented.iter().all(|(_, path)| !path.starts_with(RESELLER_BASE) && !path.starts_with("/admin/")),
            "relative paths, no admin or sandbox path"
        );
    }

    /// Every JSON value under `value` with its key path.
    pub(crate) fn walk<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
        match value {
            Value::Object(map) => map.iter().for_each(|(key, child)| walk(child, format!("{at}/{key}"), out)),
            Value::Array(items) => {
                items.iter().enumerate().for_each(|(i, child)| walk(child, format!("{at}/{i}"), out))
            }
            _ => {}
        }
        out.push((at, value));
    }

    #[test]
    fn every_reference_points_at_an_existing_schema_and_every_schema_is_used() {
        let doc = parsed();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut values = Vec::new();
        walk(&doc, String::new(), &mut values);
        let mut referenced = BTreeSet::new();
        for (at, value) in &values {
            if let Some(target) = value.get("$ref") {
                let target = target.as_str().unwrap_or_else(|| panic!("$ref at {at} is not a string"));
                let name = target
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("$ref at {at} is not a component schema: {target}"));
                assert!(schemas.contains_key(name), "dangling $ref at {at}: {target}");
                referenced.insert(name.to_string());
            }
        }
        assert!(referenced.len() > 30);
        let unused: Vec<&String> = schemas.keys().filter(|name| !referenced.contains(*name)).collect();
        assert!(unused.is_empty(), "unreferenced schemas: {unused:?}");
    }

    #[test]
    fn operations_are_complete_and_consistent() {
        let doc = parsed();
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let name = format!("{method} {path}");
                assert!(ids.insert(op["operationId"].as_str().unwrap().to_string()), "duplicate operationId: {name}");
                assert!(op["summary"].is_string(), "{name}");
                // Every {name} of the path is a required path parameter, and nothing else is.
                let in_path: BTreeSet<&str> =
                    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect();
                let params = op["parameters"].as_array().unwrap();
                let declared: BTreeSet<&str> =
                    params.iter().filter(|p| p["in"] == "path").map(|p| p["name"].as_str().unwrap()).collect();
                assert_eq!(in_path, declared, "{name}");
                let responses = op["responses"].as_object().unwrap();
                assert!(responses.keys().any(|s| s.starts_with('2')), "{name} has no success");
                let public = path.ends_with("/openapi.json");
                for (status, response) in responses {
                    assert!(response["description"].is_string(), "{name} {status}");
                    if !status.starts_with('2') {
                        assert_eq!(
                            response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                            "{name} {status}"
                        );
                        for code in response["content"]["application/json"]["examples"].as_object().unwrap().keys() {
                            let code: ErrorCode = serde_json::from_value(json!(code)).unwrap();
                            assert_eq!(code.http_status().to_string(), *status, "{name}: {code:?}");
                        }
                    }
                }
                if public {
                    assert_eq!(op["security"], json!([]));
                    continue;
                }
                assert!(responses["401"]["content"]["application/json"]["examples"]["INVALID_API_KEY"].is_object());
                assert!(responses["429"]["content"]["application/json"]["examples"]["RATE_LIMITED"].is_object());
                assert!(responses["429"]["headers"]["Retry-After"].is_object(), "{name}");
                let idempotent = params.iter().any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key");
                assert_eq!(idempotent, method != "get", "{name}");
            }
        }
        // The throttle enum is exactly what the engine accepts.
        let speeds = esim_engine::reply::schema::ThrottleSpeed::names();
        assert_eq!(speeds.len(), 35);
        assert!(speeds.iter().all(|s| esim_engine::esim::is_valid_speed(s)));
        assert!(!esim_engine::esim::is_valid_speed("SPEED_3100_KBPS"));
    }

    // ----- the document against the real service -----

    /// A small JSON Schema check (the subset this document uses); strict about
    /// undeclared properties, so a field added to a reply must be documented.
    pub(crate) fn check(doc: &Value, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            let name = target.trim_start_matches("#/components/schemas/");
            return check(doc, &doc["components"]["schemas"][name], value, at, problems);
        }
        for (combinator, options) in schema.as_object().into_iter().flatten() {
            let Some(options) =
                options.as_array().filter(|_| matches!(combinator.as_str(), "anyOf" | "oneOf" | "allOf"))
            else {
                continue;
            };
            let fits: Vec<Vec<String>> = options
                .iter()
                .map(|option| {
                    let mut found = Vec::new();
                    check(doc, option, value, at, &mut found);
                    found
                })
                .collect();
            let matching = fits.iter().filter(|found| found.is_empty()).count();
            match combinator.as_str() {
                "anyOf" if matching == 0 => problems.push(format!("{at}: {value} fits none of anyOf: {fits:?}")),
                "oneOf" if matching != 1 => problems.push(format!("{at}: {value} fits {matching} of oneOf")),
                "allOf" => problems.extend(fits.into_iter().flatten()),
                _ => {}
            }
        }
        if let Some(types) = schema.get("type") {
            let types: Vec<&str> = match types {
                Value::String(one) => vec![one.as_str()],
                other => other.as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect(),
            };
            let fits = |kind: &str| match kind {
                "object" => value.is_object(),
                "array" => value.is_array(),
                "string" => value.is_string(),
                "number" => value.is_number(),
                "integer" => value.is_u64() || value.is_i64(),
                "boolean" => value.is_boolean(),
                "null" => value.is_null(),
                other => panic!("unknown type {other}"),
            };
            if !types.iter().any(|kind| fits(kind)) {
                problems.push(format!("{at}: {value} is not {types:?}"));
                return;
            }
        }
        if let Some(expected) = schema.get("const") {
            if value != expected {
                problems.push(format!("{at}: {value} is not {expected}"));
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            if !options.contains(value) {
                problems.push(format!("{at}: {value} is not one of the enum"));
            }
        }
        if let (Some(format), Some(text)) = (schema.get("format").and_then(Value::as_str), value.as_str()) {
            let ok = match format {
                "date-time" => Millis::parse_rfc3339(text).is_some() && text.ends_with('Z'),
                "uuid" => text.len() == 36 && [8, 13, 18, 23].iter().all(|&i| &text[i..=i] == "-"),
                "uri" => text.starts_with("https://"),
                _ => true,
            };
            if !ok {
                problems.push(format!("{at}: {text:?} is not a {format}"));
            }
        }
        if let (Some(number), Some(min)) = (value.as_f64(), schema.get("minimum").and_then(Value::as_f64)) {
            if number < min {
                problems.push(format!("{at}: {number} is below {min}"));
            }
        }
        if let (Some(number), Some(max)) = (value.as_f64(), schema.get("maximum").and_then(Value::as_f64)) {
            if number > max {
                problems.push(format!("{at}: {number} is above {max}"));
            }
        }
        if let Some(fields) = value.as_object() {
            for name in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                if !fields.contains_key(name.as_str().unwrap()) {
                    problems.push(format!("{at}: required field {name} is missing"));
                }
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, field) in fields {
                    match properties.get(name) {
                        Some(field_schema) => check(doc, field_schema, field, &format!("{at}.{name}"), problems),
                        None => problems.push(format!("{at}: undocumented field {name}")),
                    }
                }
            }
        }
        if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
            for (i, item) in items.iter().enumerate() {
                check(doc, schema, item, &format!("{at}[{i}]"), problems);
            }
        }
    }

    struct Client {
        service: Service,
        doc: Value,
        /// (METHOD, full path, status) of every answer checked.
        seen: BTreeSet<(String, String, u16)>,
        /// What the receiver of a webhook test answers.
        delivery: DeliveryResult,
    }

    impl Client {
        fn new() -> Client {
            let engine = Engine::new(EngineConfig { seed: 11, ..EngineConfig::default() }, Millis::VIRTUAL_EPOCH);
            let service = Service::new(engine, "admin".into(), ClockMode::Virtual, crate::secrets::Secrets::seeded(1));
            Client { service, doc: parsed(), seen: BTreeSet::new(), delivery: DeliveryResult::Status(200) }
        }

        fn send(
            &mut self,
            method: &str,
            uri: &str,
            token: Option<&str>,
            headers: &[(&str, &str)],
            body: Option<Value>,
        ) -> http::Response<Bytes> {
            let mut builder = http::Request::builder().method(method).uri(uri);
            if let Some(token) = token {
                builder = builder.header("authorization", format!("Bearer {token}"));
            }
            for (name, value) in headers {
                builder = builder.header(*name, *value);
            }
            let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
            let request = builder.header("content-type", "application/json").body(body).unwrap();
            match self.service.handle(Millis::VIRTUAL_EPOCH, &request) {
                Outcome::Respond(response) => response,
                Outcome::AwaitDelivery(id) => {
                    self.service.delivery_outcome(Millis::VIRTUAL_EPOCH, id, self.delivery.clone(), None)
                }
            }
        }

        fn admin(&mut self, method: &str, path: &str, body: Value) -> Value {
            let response = self.send(method, path, Some("admin"), &[], Some(body));
            assert!(response.status().is_success(), "{method} {path}: {}", response.status());
            serde_json::from_slice(response.body()).unwrap()
        }

        /// A reseller call, checked against the document; answers status and body.
        fn call_with(
            &mut self,
            method: &str,
            path: &str,
            key: Option<&str>,
            headers: &[(&str, &str)],
            body: Option<Value>,
        ) -> (u16, Value) {
            let uri = format!("{RESELLER_BASE}{path}");
            let response = self.send(method, &uri, key, headers, body);
            let status = response.status().as_u16();
            let value: Value = serde_json::from_slice(response.body()).unwrap();
            let bare = uri.split('?').next().unwrap();
            let Match::Found(endpoint, _) = find(method, bare) else { panic!("{method} {bare} is not routed") };
            let full = endpoint.pattern().to_string();
            let documented = &self.doc["paths"][&full][method.to_ascii_lowercase()]["responses"][status.to_string()];
            assert!(documented.is_object(), "{method} {full} answered an undocumented {status}: {value}");
            let content = &documented["content"]["application/json"];
            let mut problems = Vec::new();
            check(&self.doc, &content["schema"], &value, "body", &mut problems);
            assert!(problems.is_empty(), "{method} {full} {status}: {problems:#?}\n{value:#}");
            if status >= 400 {
                let code = value["code"].as_str().unwrap();
                assert!(content["examples"][code].is_object(), "{method} {full}: {status} {code} is not documented");
                if code == "RATE_LIMITED" {
                    assert!(response.headers().contains_key("retry-after"));
                    assert!(documented["headers"]["Retry-After"].is_object());
                }
            }
            self.seen.insert((method.to_string(), full, status));
            (status, value)
        }

        fn call(&mut self, method: &str, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
            self.call_with(method, path, Some(key), &[], body)
        }

        fn expect(&mut self, method: &str, path: &str, key: &str, body: Option<Value>, status: u16) -> Value {
            let (got, value) = self.call(method, path, key, body);
            assert_eq!(got, status, "{method} {path}: {value}");
            value
        }

        fn expect_code(&mut self, method: &str, path: &str, key: &str, body: Option<Value>, code: &str) {
            let (_, value) = self.call(method, path, key, body);
            assert_eq!(value["code"], code, "{method} {path}");
        }

        fn account(&mut self, top_up: u32) -> String {
            let created = self.admin("POST", "/admin/v1/accounts", json!({ "contact_email": "ops@example.com" }));
            let account_id = created["account_id"].as_str().unwrap().to_string();
            if top_up > 0 {
                self.admin("POST", &format!("/admin/v1/accounts/{account_id}/topups"), json!({ "amount_usd": top_up }));
            }
            created["api_key"].as_str().unwrap().to_string()
        }

        fn provision(&mut self, key: &str, body: Option<Value>) -> String {
            let value = self.expect("POST", "/esim/provision", key, body, 201);
            value["iccid"].as_str().unwrap().to_string()
        }
    }

    #[test]
    fn every_answer_of_the_service_matches_the_document() {
        let mut c = Client::new();
        assert_eq!(c.call_with("GET", "/openapi.json", None, &[], None).0, 200);
        c.expect_code("GET", "/account", "rsk_wrong", None, "INVALID_API_KEY");

        // Account, rates, wallet.
        let broke = c.account(0);
        c.expect_code("POST", "/esim/provision", &broke, None, "INSUFFICIENT_BALANCE");
        c.expect_code("POST", "/esim/provision", &broke, Some(json!({ "label": "x".repeat(300) })), "VALIDATION_ERROR");
        let key = c.account(200);
        c.expect("GET", "/account", &key, None, 200);
        c.expect("GET", "/wallet/balance", &key, None, 200);
        c.expect("GET", "/rates", &key, None, 200);
        let rates = c.expect("GET", "/rates?country=FR&continent=europe", &key, None, 200);
        assert_eq!(rates["total_countries"], 1);

        // eSIMs.
        let first = c.provision(&key, Some(json!({ "end_user_reference": "order-1", "label": "Phone" })));
        let headers = [("idempotency-key", "provision-2")];
        let (status, once) = c.call_with("POST", "/esim/provision", Some(&key), &headers, None);
        let (_, again) = c.call_with("POST", "/esim/provision", Some(&key), &headers, None);
        assert_eq!((status, &once), (201, &again));
        let (_, reused) = c.call_with("POST", "/esim/provision", Some(&key), &headers, Some(json!({ "label": "b" })));
        assert_eq!(reused["code"], "IDEMPOTENCY_KEY_REUSED");
        let second = once["iccid"].as_str().unwrap().to_string();
        c.expect("GET", "/esim/list", &key, None, 200);
        c.expect("GET", "/esim/list?status=pending&limit=1&offset=1", &key, None, 200);
        c.expect_code("GET", "/esim/list?status=lost", &key, None, "VALIDATION_ERROR");
        c.expect("GET", &format!("/esim/{first}"), &key, None, 200);
        let qr = c.expect("GET", &format!("/esim/{first}/qr-code"), &key, None, 200);
        assert!(qr["qr_code"].as_str().is_some_and(|url| url.len() > 100), "a drawn PNG: {qr}");
        c.expect_code("GET", "/esim/8944000000000000000/qr-code", &key, None, "ESIM_NOT_FOUND");
        c.expect_code("GET", "/esim/8944000000000000000", &key, None, "ESIM_NOT_FOUND");
        c.expect("POST", &format!("/esim/{first}/disable"), &key, None, 200);
        c.expect("POST", &format!("/esim/{first}/enable"), &key, None, 200);
        c.expect("POST", &format!("/esim/{first}/throttle"), &key, Some(json!({ "speed": "SPEED_500_KBPS" })), 200);
        c.expect_code(
            "POST",
            &format!("/esim/{first}/throttle"),
            &key,
            Some(json!({ "speed": "FAST" })),
            "VALIDATION_ERROR",
        );
        c.expect("POST", &format!("/esim/{first}/fund"), &key, Some(json!({ "amount": 20 })), 200);
        c.expect_code("POST", &format!("/esim/{first}/fund"), &key, Some(json!({ "amount": 0 })), "VALIDATION_ERROR");
        c.expect_code("POST", &format!("/esim/{second}/defund"), &key, None, "WALLET_NOT_READY");
        c.admin("POST", &format!("/sandbox/v1/esims/{first}/install"), json!({}));
        c.admin("POST", &format!("/sandbox/v1/esims/{first}/usage"), json!({ "mb": 10, "country": "FR" }));
        c.admin("POST", "/sandbox/v1/clock/advance", json!({ "seconds": 1200 }));
        let detail = c.expect("GET", &format!("/esim/{first}"), &key, None, 200);
        assert!(detail["activated_at"].is_string() && detail["throttle"] == "SPEED_500_KBPS");
        c.admin("PUT", "/sandbox/v1/faults", json!({ "upstream_pause_fails": true }));
        c.expect_code("POST", &format!("/esim/{first}/defund"), &key, None, "UPSTREAM_ERROR");
        c.admin("PUT", "/sandbox/v1/faults", json!({ "upstream_pause_fails": false }));
        c.expect("POST", &format!("/esim/{first}/defund"), &key, None, 202);
        assert_eq!(c.expect("GET", &format!("/esim/{first}"), &key, None, 200)["pending"], "defund_pending");
        c.expect_code("POST", &format!("/esim/{first}/fund"), &key, Some(json!({ "amount": 5 })), "DEFUND_PENDING");
        c.expect_code("POST", &format!("/esim/{first}/defund"), &key, None, "DEFUND_ALREADY_PENDING");

        // Groups.
        let group = c.expect("POST", "/groups", &key, Some(json!({ "name": "Fleet" })), 201);
        let gid = group["id"].as_str().unwrap().to_string();
        c.expect_code("POST", "/groups", &key, Some(json!({ "name": "Fleet" })), "GROUP_NAME_TAKEN");
        c.expect_code("POST", "/groups", &key, Some(json!({})), "VALIDATION_ERROR");
        c.expect("GET", "/groups", &key, None, 200);
        c.expect("GET", &format!("/groups/{gid}"), &key, None, 200);
        c.expect_code("GET", "/groups/00000000-0000-4000-8000-000000000000", &key, None, "GROUP_NOT_FOUND");
        c.expect(
            "PATCH",
            &format!("/groups/{gid}"),
            &key,
            Some(json!({ "name": "Fleet A", "low_balance_threshold_usd": 5 })),
            200,
        );
        c.expect_code("PATCH", &format!("/groups/{gid}"), &key, Some(json!({})), "VALIDATION_ERROR");
        c.expect("POST", &format!("/groups/{gid}/fund"), &key, Some(json!({ "amount": 30 })), 200);
        let assigned = c.expect("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({ "iccid": second })), 200);
        assert_eq!(assigned["status"], "assigned");
        c.expect_code(
            "POST",
            &format!("/groups/{gid}/esims"),
            &key,
            Some(json!({ "iccid": second })),
            "ESIM_ALREADY_IN_GROUP",
        );
        c.expect_code("POST", &format!("/esim/{second}/fund"), &key, Some(json!({ "amount": 5 })), "ESIM_IN_GROUP");
        let third = c.provision(&key, None);
        c.expect("POST", &format!("/esim/{third}/fund"), &key, Some(json!({ "amount": 9 })), 200);
        let moving = c.expect("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({ "iccid": third })), 202);
        assert_eq!(moving["status"], "move_pending");
        c.expect_code("POST", &format!("/esim/{third}/enable"), &key, None, "MOVE_PENDING");
        let member = c.provision(&key, Some(json!({ "group_id": gid })));
        c.admin("POST", &format!("/sandbox/v1/esims/{member}/install"), json!({}));
        c.admin("POST", &format!("/sandbox/v1/esims/{member}/usage"), json!({ "mb": 5, "country": "FR" }));
        c.expect("GET", &format!("/groups/{gid}/esims"), &key, None, 200);
        c.expect("GET", &format!("/groups/{gid}/esims?limit=2&offset=1"), &key, None, 200);
        c.admin("POST", "/sandbox/v1/clock/advance", json!({ "seconds": 1200 }));
        let detail = c.expect("GET", &format!("/esim/{member}"), &key, None, 200);
        assert!(detail["group_id"].is_string() && detail["group_total_data_charged_usd"].is_number());
        assert!(detail["total_data_charged_usd"].is_null());
        c.expect("DELETE", &format!("/groups/{gid}/esims/{second}"), &key, None, 200);
        c.expect_code("DELETE", &format!("/groups/{gid}/esims/{second}"), &key, None, "ESIM_NOT_FOUND");
        c.expect("POST", &format!("/groups/{gid}/defund"), &key, None, 200);
        c.expect_code("POST", &format!("/groups/{gid}/defund"), &key, None, "GROUP_DEFUND_PENDING");
        c.expect_code(
            "POST",
            &format!("/groups/{gid}/fund"),
            &key,
            Some(json!({ "amount": 5 })),
            "GROUP_DEFUND_PENDING",
        );
        c.admin("POST", "/sandbox/v1/clock/advance", json!({ "seconds": 1200 }));
        c.expect("GET", "/groups", &key, None, 200);
        c.expect("GET", "/esim/list?limit=100", &key, None, 200);

        // Terminate.
        c.expect("POST", &format!("/esim/{first}/terminate"), &key, None, 200);
        c.expect_code("POST", &format!("/esim/{first}/terminate"), &key, None, "ESIM_ALREADY_TERMINATED");
        c.expect("GET", &format!("/esim/{first}"), &key, None, 200);

        // Webhooks.
        let events = json!({ "url": "https://hooks.example.com/esim", "events": ["*"] });
        let webhook = c.expect("POST", "/webhooks", &key, Some(events), 201);
        let wid = webhook["id"].as_str().unwrap().to_string();
        c.expect_code(
            "POST",
            "/webhooks",
            &key,
            Some(json!({ "url": "http://x", "events": ["*"] })),
            "VALIDATION_ERROR",
        );
        c.expect("GET", "/webhooks", &key, None, 200);
        c.expect("GET", &format!("/webhooks/{wid}"), &key, None, 200);
        c.expect_code("GET", "/webhooks/wh_0000000000000000", &key, None, "NOT_FOUND");
        let update = json!({ "active": true, "events": ["esim.provisioned", "group.balance_low"] });
        c.expect("PUT", &format!("/webhooks/{wid}"), &key, Some(update), 200);
        c.expect("POST", &format!("/webhooks/{wid}/test"), &key, None, 200);
        let rotated = c.expect("POST", &format!("/webhooks/{wid}/rotate-secret"), &key, None, 200);
        assert!(rotated["signing_secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "{rotated}");
        c.expect_code("POST", "/webhooks/wh_0000000000000000/rotate-secret", &key, None, "NOT_FOUND");
        c.delivery = DeliveryResult::Timeout;
        let timeout = c.expect("POST", &format!("/webhooks/{wid}/test"), &key, None, 200);
        assert_eq!((timeout["status"].clone(), timeout["error"].is_string()), (json!(0), true));
        let log = c.expect("GET", &format!("/webhooks/{wid}/deliveries?limit=5"), &key, None, 200);
        assert_eq!(log["total"], json!(2), "the two test calls: {log}");
        c.expect_code("GET", &format!("/webhooks/{wid}/deliveries?limit=0"), &key, None, "VALIDATION_ERROR");
        c.expect_code("GET", "/webhooks/wh_0000000000000000/deliveries", &key, None, "NOT_FOUND");
        let page = c.expect("GET", "/events?limit=1", &key, None, 200);
        let newest = page["events"][0]["id"].as_str().expect("an event was emitted").to_string();
        let resend = json!({ "webhook_id": wid });
        c.expect("POST", &format!("/events/{newest}/resend"), &key, Some(resend.clone()), 202);
        c.expect_code("POST", "/events/evt_000000000000000000000000/resend", &key, Some(resend), "NOT_FOUND");
        c.expect_code("POST", &format!("/events/{newest}/resend"), &key, Some(json!({})), "VALIDATION_ERROR");
        c.expect("DELETE", &format!("/webhooks/{wid}"), &key, None, 200);
        c.expect_code("DELETE", &format!("/webhooks/{wid}"), &key, None, "NOT_FOUND");
        c.provision(&key, None);
        c.expect("GET", "/account", &key, None, 200);

        // Events.
        let page = c.expect("GET", "/events?type=esim.provisioned&limit=2", &key, None, 200);
        let newest = page["events"][0]["id"].as_str().expect("an event was emitted").to_string();
        c.expect("GET", &format!("/events/{newest}"), &key, None, 200);
        c.expect_code("GET", "/events/evt_000000000000000000000000", &key, None, "NOT_FOUND");
        c.expect_code("GET", "/events?type=nope", &key, None, "VALIDATION_ERROR");
        c.expect_code("GET", "/events?created_after=2026-02-31T00:00:00Z", &key, None, "VALIDATION_ERROR");

        // API keys and auto-refill (decisions 128, 129), on a fresh account.
        let owner = c.account(0);
        let keys = c.expect("GET", "/keys", &owner, None, 200);
        assert_eq!((keys["keys"].as_array().map(Vec::len), &keys["keys"][0]["current"]), (Some(1), &json!(true)));
        let own_id = keys["keys"][0]["id"].as_str().unwrap().to_string();
        c.expect_code("DELETE", &format!("/keys/{own_id}"), &owner, None, "LAST_API_KEY");
        let made = c.expect("POST", "/keys", &owner, None, 201);
        let (made_key, made_id) = (made["api_key"].as_str().unwrap(), made["id"].as_str().unwrap().to_string());
        assert_eq!(made["prefix"].as_str(), Some(&made_key[..12]));
        let made_key = made_key.to_string();
        let listed = c.expect("GET", "/keys", &made_key, None, 200);
        let current: Vec<_> =
            listed["keys"].as_array().unwrap().iter().filter(|k| k["current"] == json!(true)).collect();
        assert_eq!((current.len(), &current[0]["id"]), (1, &json!(made_id)), "{listed}");
        c.expect("DELETE", &format!("/keys/{made_id}"), &owner, None, 200);
        c.expect_code("GET", "/account", &made_key, None, "INVALID_API_KEY");
        c.expect_code("DELETE", &format!("/keys/{made_id}"), &owner, None, "NOT_FOUND");
        c.expect_code("DELETE", "/keys/key_nope", &owner, None, "NOT_FOUND");
        let refill = c.expect("GET", "/auto-refill", &owner, None, 200);
        assert_eq!(refill["enabled"], json!(false));
        let refill = c.expect("PUT", "/auto-refill", &owner, Some(json!({ "enabled": true, "amount_usd": 25 })), 200);
        assert_eq!((&refill["enabled"], &refill["amount_usd"]), (&json!(true), &json!(25)));
        c.expect_code("PUT", "/auto-refill", &owner, Some(json!({})), "VALIDATION_ERROR");
        c.expect_code("PUT", "/auto-refill", &owner, Some(json!({ "amount_usd": 5 })), "VALIDATION_ERROR");

        // The rate limit, on a fresh key.
        let busy = c.account(0);
        let limited = (0..101).map(|_| c.call("GET", "/wallet/balance", &busy, None).0).last();
        assert_eq!(limited, Some(429));

        // Every documented success was answered at least once.
        let mut missing = Vec::new();
        for (path, item) in c.doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for status in op["responses"].as_object().unwrap().keys().filter(|s| s.starts_with('2')) {
                    let key = (method.to_uppercase(), path.clone(), status.parse().unwrap());
                    if !c.seen.contains(&key) {
                        missing.push(key);
                    }
                }
            }
        }
        assert!(missing.is_empty(), "successes never exercised: {missing:?}");
    }

    /// Every event kind, driven through the real service, reaches a `*` webhook in a body
    /// that fits its `webhooks` entry (strictly: an undocumented field fails), with
    /// exactly the documented headers; and `GET /events/{id}` answers the same bytes.
    #[test]
    fn every_delivered_event_matches_its_webhook_entry() {
        let mut c = Client::new();
        let created = c.admin("POST", "/admin/v1/accounts", json!({ "contact_email": "hooks@example.com" }));
        let (account, key) =
            (created["account_id"].as_str().unwrap().to_string(), created["api_key"].as_str().unwrap().to_string());
        let admin = |c: &mut Client, method: &str, path: &str, body: Value| c.admin(method, path, body);
        let topup = format!("/admin/v1/accounts/{account}/topups");
        let refill = format!("/admin/v1/accounts/{account}/auto-refill");
        let advance = |c: &mut Client, seconds: u64| {
            c.admin("POST", "/sandbox/v1/clock/advance", json!({ "seconds": seconds }));
        };
        let hook = json!({ "url": "https://hooks.example.com/all", "events": ["*"] });
        let webhook = c.expect("POST", "/webhooks", &key, Some(hook), 201);
        let (wid, secret) =
            (webhook["id"].as_str().unwrap().to_string(), webhook["signing_secret"].as_str().unwrap().to_string());

        // The reseller balance: topped up, low, depleted.
        admin(&mut c, "POST", &topup, json!({ "amount_usd": 12 }));
        let s1 = c.provision(&key, Some(json!({ "end_user_reference": "order-9", "label": "Phone" })));
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{s1}/install"), json!({}));
        c.expect("POST", &format!("/esim/{s1}/disable"), &key, None, 200);
        c.expect("POST", &format!("/esim/{s1}/enable"), &key, None, 200);
        c.expect("POST", &format!("/esim/{s1}/fund"), &key, Some(json!({ "amount": 5.25 })), 200);
        c.expect("POST", &format!("/esim/{s1}/fund"), &key, Some(json!({ "amount": 0.5 })), 200);
        c.expect("POST", &format!("/esim/{s1}/fund"), &key, Some(json!({ "amount": 4.5 })), 200);
        // An eSIM wallet: low, then depleted (as reported, after the reporting pause).
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{s1}/usage"), json!({ "mb": 1500, "country": "DE" }));
        advance(&mut c, 1200);
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{s1}/usage"), json!({ "mb": 5000, "country": "DE" }));
        advance(&mut c, 1200);

        // Auto-refill: succeeded (with an auto_refill top-up), then failed.
        admin(&mut c, "PUT", &refill, json!({ "enabled": true, "amount_usd": 20, "card": "ok" }));
        admin(&mut c, "POST", &topup, json!({ "amount_usd": 10 }));
        let s2 = c.provision(&key, None);
        let s3 = c.provision(&key, None);
        let s4 = c.provision(&key, None);
        advance(&mut c, 120);
        admin(&mut c, "PUT", &refill, json!({ "enabled": true, "amount_usd": 20, "card": "expired" }));
        c.expect("POST", &format!("/esim/{s2}/fund"), &key, Some(json!({ "amount": 19.5 })), 200);
        c.provision(&key, None);
        advance(&mut c, 120);
        admin(&mut c, "POST", &topup, json!({ "amount_usd": 200 }));
        // An eSIM balance return.
        advance(&mut c, 1200);
        c.expect("POST", &format!("/esim/{s2}/defund"), &key, None, 202);
        advance(&mut c, 1200);

        // A group: funded, low, depleted, defunded; members assigned (at once and after a
        // move) and removed.
        let group = c.expect("POST", "/groups", &key, Some(json!({ "name": "Fleet" })), 201);
        let gid = group["id"].as_str().unwrap().to_string();
        c.expect("POST", &format!("/groups/{gid}/fund"), &key, Some(json!({ "amount": 20 })), 200);
        let member = c.provision(&key, Some(json!({ "group_id": gid, "label": "Member" })));
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{member}/install"), json!({}));
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{member}/usage"), json!({ "mb": 2500, "country": "DE" }));
        admin(&mut c, "POST", &format!("/sandbox/v1/esims/{member}/usage"), json!({ "mb": 5000, "country": "DE" }));
        c.expect("POST", &format!("/groups/{gid}/fund"), &key, Some(json!({ "amount": 20 })), 200);
        c.expect("POST", &format!("/groups/{gid}/defund"), &key, None, 200);
        c.expect("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({ "iccid": s3 })), 200);
        c.expect("POST", &format!("/esim/{s4}/fund"), &key, Some(json!({ "amount": 5 })), 200);
        c.expect("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({ "iccid": s4 })), 202);
        advance(&mut c, 1200);
        c.expect("DELETE", &format!("/groups/{gid}/esims/{s3}"), &key, None, 200);
        c.expect("POST", &format!("/esim/{s1}/terminate"), &key, None, 200);
        c.expect("POST", &format!("/webhooks/{wid}/test"), &key, None, 200);

        let mut seen = BTreeSet::new();
        let mut deliveries = 0;
        while let Some(esim_engine::Effect::Deliver(delivery)) = c.service.poll_effect() {
            deliveries += 1;
            let name = delivery.event.as_str();
            let entry = &c.doc["webhooks"][name]["post"];
            assert!(entry.is_object(), "{name} has no webhooks entry");
            let body: Value = serde_json::from_str(&delivery.body).unwrap();
            let schema = &entry["requestBody"]["content"]["application/json"]["schema"];
            let mut problems = Vec::new();
            check(&c.doc, schema, &body, "body", &mut problems);
            assert!(problems.is_empty(), "{name}: {problems:#?}\n{body:#}");
            // The headers sent are exactly the documented ones, each fitting its schema.
            let parameters = entry["parameters"].as_array().unwrap();
            let headers = crate::webhook_headers::delivery_headers(&delivery, &secret, None, 1_767_225_600);
            let sent: BTreeSet<&str> = headers.iter().map(|(header, _)| *header).collect();
            let documented: BTreeSet<&str> = parameters.iter().map(|p| p["name"].as_str().unwrap()).collect();
            assert_eq!(sent, documented, "{name}");
            for (header, value) in &headers {
                let parameter = parameters.iter().find(|p| p["name"] == *header).unwrap();
                assert_eq!((parameter["in"].as_str(), parameter["required"].as_bool()), (Some("header"), Some(true)));
                let value = match parameter["schema"]["type"].as_str() {
                    Some("integer") => json!(value.parse::<i64>().unwrap_or(-1)),
                    _ => json!(value),
                };
                check(&c.doc, &parameter["schema"], &value, header, &mut problems);
            }
            assert!(problems.is_empty(), "{name}: {problems:#?}");
            // The events API keeps the very bytes (test probes are not kept).
            if delivery.event != EventName::Test {
                let uri = format!("{RESELLER_BASE}/events/{}", delivery.event_id);
                let kept = c.send("GET", &uri, Some(&key), &[], None);
                assert_eq!(kept.body().as_ref(), delivery.body.as_bytes(), "{name}");
            }
            seen.insert(name);
        }
        let every: BTreeSet<&str> = delivered_events().map(EventName::as_str).collect();
        assert_eq!(seen, every, "every event kind was delivered ({deliveries} deliveries)");
        assert_eq!(c.doc["webhooks"].as_object().unwrap().len(), every.len(), "one entry per event, no other");
    }

    /// Links name existing operations, fill exactly their path parameters from a required
    /// field of the answer (or the request), and reach every operation that takes an
    /// eSIM, group or webhook id from the operation that creates it.
    #[test]
    fn links_lead_from_each_creation_to_every_operation_on_the_new_resource() {
        let doc = parsed();
        let schemas = &doc["components"]["schemas"];
        let mut operations = std::collections::BTreeMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for op in item.as_object().unwrap().values() {
                operations.insert(op["operationId"].as_str().unwrap().to_string(), path.clone());
            }
        }
        let mut linked = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                for (status, response) in op["responses"].as_object().unwrap() {
                    for (name, link) in response["links"].as_object().into_iter().flatten() {
                        let at = format!("{method} {path} {status} link {name}");
                        let target = link["operationId"].as_str().unwrap();
                        let target_path = operations.get(target).unwrap_or_else(|| panic!("{at}: no {target}"));
                        let parameters = link["parameters"].as_object().unwrap();
                        let filled: BTreeSet<&str> = parameters.keys().map(String::as_str).collect();
                        assert_eq!(filled, path_parameters_of(target_path).into_iter().collect(), "{at}");
                        for expression in parameters.values().map(|e| e.as_str().unwrap()) {
                            if let Some(pointer) = expression.strip_prefix("$response.body#/") {
                                let reply = response["content"]["application/json"]["schema"]["$ref"].as_str().unwrap();
                                let reply = &schemas[reply.trim_start_matches("#/components/schemas/")];
                                let required = reply["required"].as_array().unwrap();
                                assert!(required.contains(&json!(pointer)), "{at}: {pointer} is not a required field");
                            } else {
                                let field = expression
                                    .strip_prefix("$request.path.")
                                    .or(expression.strip_prefix("$request.body#/"));
                                assert!(
                                    field
                                        .is_some_and(|field| path.contains(&format!("{{{field}}}"))
                                            || op["requestBody"].is_object()),
                                    "{at}: {expression}"
                                );
                            }
                        }
                        linked.insert(target.to_string());
                    }
                }
            }
        }
        let takes_one_id =
            operations.iter().filter(|(_, path)| path_parameters_of(path).len() == 1 && !path.starts_with("/events/"));
        for (operation, path) in takes_one_id {
            assert!(linked.contains(operation), "{operation} ({path}) is reached by no link");
        }
        assert!(linked.contains("removeGroupEsim"), "{linked:?}");
    }
}
