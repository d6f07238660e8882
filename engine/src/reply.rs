//! Outputs of the engine: typed success bodies. The transport serializes them as they
//! are (field names are the spec's), so a test can match on a variant and a client
//! reads the same fields. The bodies of the reseller API derive their JSON Schema
//! (`schemars`), from which the transport's OpenAPI document takes its response schemas;
//! [`schema`] holds the schemas of the field types whose serde form is custom.
//!
//! The `///` doc comment of such a body or field is also its description in the OpenAPI
//! document (schemars reads doc comments; it joins their lines with newlines), so it is
//! one line written for the API user, in one place. Notes for Rust readers that must stay
//! out of the document are plain `//` comments.

use crate::codes;
use crate::rates::Country;
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::Serialize;

/// What a command answers: a success body or the spec's error body.
pub type Response = Result<Reply, crate::ApiError>;

/// Every success body, one variant per kind of answer. Serialized untagged: the JSON is
/// the body itself, and [`Reply::status`] gives its HTTP status (200 unless noted).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// `POST /esim/provision`, status 201.
    Provisioned(ProvisionedEsim),
    /// `GET /esim/list`.
    EsimPage(EsimPage),
    /// `GET /esim/{iccid}`.
    Esim(EsimDetail),
    /// `POST /esim/{iccid}/enable` and `/disable`.
    DataToggled(DataToggled),
    /// `POST /esim/{iccid}/terminate`.
    Terminated(Terminated),
    /// `POST /esim/{iccid}/throttle`.
    Throttled(Throttled),
    /// `POST /esim/{iccid}/fund`.
    Funded(Funded),
    /// `POST /esim/{iccid}/defund`, status 202: the return settles later.
    DefundAccepted(DefundAccepted),
    /// `GET /groups`.
    GroupList(GroupList),
    /// `GET /groups/{id}` and `PATCH /groups/{id}`.
    Group(GroupRecord),
    /// `POST /groups`, status 201.
    GroupCreated(GroupRecord),
    /// `POST /groups/{id}/fund`.
    GroupFunded(GroupFunded),
    /// `POST /groups/{id}/defund`: the return settles later (status 200, as the spec says).
    GroupDefundAccepted(GroupDefundAccepted),
    /// `GET /groups/{id}/esims`.
    GroupMembers(GroupMembers),
    /// `POST /groups/{id}/esims` when the eSIM joins at once (`assigned`).
    GroupMemberAdded(GroupMemberChange),
    /// `POST /groups/{id}/esims`, status 202: the eSIM's wallet balance is returned
    /// first and it joins at settlement (`move_pending`).
    GroupMovePending(GroupMemberChange),
    /// `DELETE /groups/{id}/esims/{iccid}` (`removed`).
    GroupMemberRemoved(GroupMemberChange),
    /// `GET /wallet/balance`.
    WalletBalance(WalletBalance),
    /// `GET /rates`.
    Rates(Rates),
    /// `GET /account`.
    Account(AccountRecord),
    /// `GET /webhooks`.
    WebhookList(WebhookList),
    /// `GET /webhooks/{id}` and `PUT /webhooks/{id}`.
    Webhook(WebhookRecord),
    /// `POST /webhooks`, status 201: the secret is shown this once.
    WebhookCreated(WebhookCreated),
    /// A rotated secret: the same shape as a creation's answer (the webhook, the new
    /// secret shown once, a note), status 200.
    WebhookSecretRotated(WebhookCreated),
    /// `{"success": true}`: `DELETE /webhooks/{id}` and other calls with nothing more to say.
    Success(Success),
    /// The test event was handed out as an effect; the shell answers the caller with
    /// the reply to the matching [`crate::Command::DeliveryOutcome`].
    WebhookTestDispatched {
        /// The delivery whose outcome completes the answer.
        delivery_id: u64,
    },
    /// `POST /webhooks/{id}/test`, once the delivery's outcome is known.
    WebhookTest(WebhookTestResult),
    /// `GET /events`.
    EventPage(EventPage),
    /// `GET /events/{id}`: the kept bytes, unchanged.
    Event(EventEnvelope),
    /// `GET /webhooks/{id}/deliveries`.
    DeliveryAttemptPage(DeliveryAttemptPage),
    /// `POST /events/{id}/resend`, status 202: the attempt shows in the delivery log.
    ResendAccepted(ResendAccepted),
    /// Admin `POST /admin/v1/accounts`, status 201.
    AccountCreated(AccountCreated),
    /// Admin `POST /admin/v1/accounts/{account_id}/topups`, status 201.
    ToppedUp(ToppedUp),
    /// Admin `POST /admin/v1/accounts/{account_id}/keys`, status 201.
    KeyCreated(KeyCreated),
    /// `GET /esim/{iccid}/qr-code` (decision 130).
    EsimQrCode(EsimQrCode),
    /// `GET /keys` (decision 128).
    ApiKeyList(ApiKeyList),
    /// `POST /keys`, status 201: the key is shown this once (decision 128).
    ApiKeyCreated(ApiKeyCreated),
    /// `DELETE /keys/{id}` (decision 128).
    ApiKeyRevoked(ApiKeyRevoked),
    /// `GET /auto-refill` and `PUT /auto-refill` (decision 129).
    AutoRefill(AutoRefillSettings),
    /// The other admin changes (freeze, auto-refill, limits, inventory, faults): the
    /// settings as they now are, a small object whose fields differ per call.
    AdminUpdated(serde_json::Value),
    /// Sandbox `POST /sandbox/v1/esims/{iccid}/install`.
    Installed(Installed),
    /// Sandbox `POST /sandbox/v1/esims/{iccid}/usage`.
    Usage(UsageResult),
    /// A stored response replayed for an `Idempotency-Key` (status and exact body bytes).
    Replayed {
        /// The HTTP status first answered.
        status: u16,
        /// The JSON body first answered (a success or an error body).
        body: String,
        /// A provisioning's QR code: the stored body holds an empty data URL in its
        /// place (a PNG is not kept for 24 hours), drawn again on the way out exactly
        /// as the first answer drew it.
        qr_code: Option<QrCodeDataUrl>,
        /// A webhook creation's signing secret, sealed: the stored body holds an empty
        /// `signing_secret`, which the shell fills with the opened secret
        /// ([`Reply::show_secret`]).
        #[serde(skip)]
        signing_secret: Option<crate::secret::SealedSecret>,
    },
}

/// The field of a webhook creation's answer that shows its signing secret.
const SECRET_FIELD: &str = "signing_secret";

/// What an undrawn QR code serializes to: an empty PNG data URL.
const UNDRAWN_QR: &str = "data:image/png;base64,";

impl Reply {
    /// HTTP status of the success.
    pub fn status(&self) -> u16 {
        match self {
            Reply::Provisioned(_)
            | Reply::GroupCreated(_)
            | Reply::WebhookCreated(_)
            | Reply::AccountCreated(_)
            | Reply::ToppedUp(_)
            | Reply::KeyCreated(_)
            | Reply::ApiKeyCreated(_) => 201,
            Reply::DefundAccepted(_) | Reply::GroupMovePending(_) | Reply::ResendAccepted(_) => 202,
            Reply::Replayed { status, .. } => *status,
            _ => 200,
        }
    }

    /// The exact body bytes: a replay gives back what was stored, anything else its JSON.
    pub fn body_bytes(&self) -> Vec<u8> {
        match self {
            Reply::Replayed { body, qr_code: Some(qr_code), .. } if qr_code.render => {
                let drawn = serde_json::to_string(qr_code).expect("a QR code serializes");
                splice_qr(body, &drawn).into_bytes()
            }
            Reply::Replayed { body, .. } => body.clone().into_bytes(),
            other => serde_json::to_vec(other).expect("replies always serialize"),
        }
    }

    /// The secret this reply shows once, which only the shell knows: a new API key, or
    /// a new (or replayed) webhook signing secret. The engine leaves those fields empty.
    pub fn show_secret(&mut self, secret: &str) {
        match self {
            Reply::AccountCreated(created) => created.api_key = secret.to_string(),
            Reply::KeyCreated(created) => created.api_key = secret.to_string(),
            Reply::ApiKeyCreated(created) => created.api_key = Some(secret.to_string()),
            Reply::WebhookCreated(created) | Reply::WebhookSecretRotated(created) => {
                created.signing_secret = secret.to_string()
            }
            Reply::Replayed { body, signing_secret: Some(_), .. } => {
                let shown = serde_json::to_string(secret).expect("a string serializes");
                *body = body.replacen(&format!("\"{SECRET_FIELD}\":\"\""), &format!("\"{SECRET_FIELD}\":{shown}"), 1);
            }
            _ => {}
        }
    }

    /// The sealed secret a reply must show, for the shell to open.
    pub fn sealed_secret(&self) -> Option<&crate::secret::SealedSecret> {
        match self {
            Reply::WebhookCreated(created) | Reply::WebhookSecretRotated(created) => Some(&created.sealed),
            Reply::Replayed { signing_secret, .. } => signing_secret.as_ref(),
            _ => None,
        }
    }

    /// Whether a QR code in this reply is drawn when it is serialized (see
    /// [`QrCodeDataUrl::render`]).
    pub fn set_render_qr(&mut self, render: bool) {
        match self {
            Reply::Provisioned(provisioned) => provisioned.qr_code.render = render,
            Reply::EsimQrCode(qr) => qr.qr_code.render = render,
            Reply::Replayed { qr_code: Some(qr_code), .. } => qr_code.render = render,
            _ => {}
        }
    }

    /// The text of the QR code this reply shows, if any (a shell that draws it outside
    /// the task applying commands serializes the reply undrawn, then [`draw_qr`]).
    pub fn qr_text(&self) -> Option<&str> {
        self.qr_code().map(|qr_code| qr_code.text.as_str())
    }

    /// The QR code this reply draws, if any.
    fn qr_code(&self) -> Option<&QrCodeDataUrl> {
        match self {
            Reply::Provisioned(provisioned) => Some(&provisioned.qr_code),
            Reply::EsimQrCode(qr) => Some(&qr.qr_code),
            Reply::Replayed { qr_code, .. } => qr_code.as_ref(),
            _ => None,
        }
    }

    /// Status and body as an idempotency entry stores them: the QR code left undrawn,
    /// and its text to draw it again; a signing secret left empty, and kept sealed.
    pub(crate) fn stored_form(
        response: &Response,
    ) -> (u16, Vec<u8>, Option<String>, Option<crate::secret::SealedSecret>) {
        let mut undrawn = response.clone();
        let (qr_text, sealed) = match &mut undrawn {
            Ok(reply) => {
                reply.set_render_qr(false);
                debug_assert!(!matches!(reply, Reply::WebhookCreated(c) if !c.signing_secret.is_empty()));
                (reply.qr_code().map(|qr_code| qr_code.text.clone()), reply.sealed_secret().cloned())
            }
            Err(_) => (None, None),
        };
        let (status, body) = render(&undrawn);
        (status, body, qr_text, sealed)
    }
}

/// Status and body bytes of any response (what HTTP sends, and what idempotency stores).
pub fn render(response: &Response) -> (u16, Vec<u8>) {
    match response {
        Ok(reply) => (reply.status(), reply.body_bytes()),
        Err(error) => (error.status(), serde_json::to_vec(error).expect("errors always serialize")),
    }
}

/// Puts a drawn QR code (a JSON string) in place of the undrawn one in a body.
fn splice_qr(body: &str, drawn_json: &str) -> String {
    body.replacen(&format!("\"qr_code\":\"{UNDRAWN_QR}\""), &format!("\"qr_code\":{drawn_json}"), 1)
}

/// Draws the QR code of `text` into a body serialized with it undrawn (see
/// [`Reply::qr_text`]): the same bytes the reply would have had drawn in place.
pub fn draw_qr(body: &[u8], text: &str) -> Result<Vec<u8>, codes::CodeError> {
    let url = codes::qr_png_data_url(text)?;
    let drawn = serde_json::to_string(&url).expect("a string serializes");
    Ok(splice_qr(&String::from_utf8_lossy(body), &drawn).into_bytes())
}

/// The `qr_code` field: rendered to a PNG data URL only when serialized, because
/// drawing a QR code costs about a millisecond and most engine callers never show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QrCodeDataUrl {
    /// The text the QR code encodes (the LPA string).
    pub text: String,
    /// False only in the simulation, which renders millions of responses and never
    /// looks at the picture: the field then carries an empty PNG data URL.
    pub render: bool,
}

impl QrCodeDataUrl {
    /// The QR code of `text` (an LPA string), drawn when serialized.
    pub fn new(text: String) -> Self {
        QrCodeDataUrl { text, render: true }
    }
}

impl Serialize for QrCodeDataUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.render {
            return serializer.serialize_str(UNDRAWN_QR);
        }
        let url = codes::qr_png_data_url(&self.text).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&url)
    }
}

/// A newly provisioned eSIM with its installation details
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ProvisionedEsim {
    /// Identifier of the eSIM
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
    /// ICCID (19 digits)
    pub iccid: String,
    /// LPA activation code, for a QR code or manual entry
    pub lpa_string: String,
    /// base64 PNG data URL (data:image/png;base64,...), usable as an image source
    #[schemars(with = "String")]
    pub qr_code: QrCodeDataUrl,
    /// iOS 17.4+ one-tap install link
    #[schemars(extend("format" = "uri"))]
    pub direct_install_url: String,
    /// pending at provisioning
    #[schemars(with = "schema::EsimStatus")]
    pub status: &'static str,
    /// RELEASED at provisioning
    #[schemars(with = "schema::EuiccState")]
    pub euicc_state: &'static str,
    /// As given
    pub end_user_reference: Option<String>,
    /// As given
    pub label: Option<String>,
    /// USD. Provisioning fee deducted (1.75)
    #[schemars(with = "schema::Usd")]
    pub cost: Decimal,
    /// USD. Reseller balance after the fee
    #[schemars(with = "schema::Usd")]
    pub balance_remaining: Decimal,
    /// Provisioning time
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
    /// Present when issued into a group
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub group_id: Option<String>,
}

/// An eSIM (list item; also the core of the detail record)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EsimItem {
    /// Identifier of the eSIM
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
    /// ICCID (19 digits), the identifier used in paths
    pub iccid: String,
    /// pending until first installed, active, suspended while data is disabled, terminated for good
    #[schemars(with = "schema::EsimStatus")]
    pub status: &'static str,
    /// Activation state of the profile on the device
    #[schemars(with = "Option<schema::EuiccState>")]
    pub euicc_state: Option<&'static str>,
    /// The reseller's own customer or order reference
    pub end_user_reference: Option<String>,
    /// Human label
    pub label: Option<String>,
    /// USD. Remaining wallet credit rounded down to the cent (never above the exact credit); 0 for a group member
    #[schemars(with = "schema::Usd")]
    pub wallet_balance_usd: Decimal,
    /// USD. Lifetime data usage charged, as reported by the upstream pipeline; null for a group member
    #[schemars(with = "Option<schema::Usd>")]
    pub total_data_charged_usd: Option<Decimal>,
    /// First installation and boot of the profile
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub activated_at: Option<Millis>,
    /// Termination time
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub terminated_at: Option<Millis>,
    /// Provisioning time
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
    /// Present while the eSIM is a member of a group
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub group_id: Option<String>,
}

/// An eSIM with its activation string and switches; euicc_state is read live from the network (the cached state when the read fails)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EsimDetail {
    /// The list item's fields, inline (flattened).
    #[serde(flatten)]
    pub item: EsimItem,
    /// LPA activation code
    pub lpa_string: String,
    /// Whether data is enabled
    pub data_enabled: bool,
    /// The speed limit in force
    #[schemars(with = "schema::ThrottleSpeed")]
    pub throttle: String,
    /// USD. Present for a group member: data usage of the whole group (members share one wallet)
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::Usd")]
    pub group_total_data_charged_usd: Option<Decimal>,
    /// Present while a balance return or a move into a group is on its way
    // When each is set and cleared: docs/decisions.md (decisions 9 and 30).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("enum" = ["defund_pending", "move_pending"]))]
    pub pending: Option<&'static str>,
}

/// A page of the account's eSIMs, in provisioning order
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EsimPage {
    /// The page
    pub esims: Vec<EsimItem>,
    /// Number of matching eSIMs
    pub total: u64,
    /// Page size applied (default 50, at most 100)
    pub limit: u64,
    /// Position of the first eSIM of the page
    pub offset: u64,
}

/// An event exactly as delivered to receivers: `{id, event, created_at, data}`, its
/// bytes kept as they were sent (`GET /events/{id}` answers them unchanged).
#[derive(Clone, Debug)]
pub struct EventEnvelope(Box<serde_json::value::RawValue>);

impl EventEnvelope {
    /// The kept envelope text (JSON written by [`crate::event::Event::envelope_bytes`]).
    pub(crate) fn from_json(text: String) -> EventEnvelope {
        EventEnvelope(serde_json::value::RawValue::from_string(text).expect("kept envelopes are JSON"))
    }

    /// The envelope's JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }
}

impl Serialize for EventEnvelope {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl JsonSchema for EventEnvelope {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EventEnvelope".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = crate::event_name::EventName::SUBSCRIBABLE.iter().map(|e| e.as_str()).collect();
        schemars::json_schema!({
            "type": "object",
            "description": "An event exactly as it was delivered to webhooks (the same bytes)",
            "required": ["id", "event", "created_at", "data"],
            "properties": {
                "id": { "type": "string", "description": "Event id (evt_...): receivers de-duplicate retries by it" },
                "event": { "type": "string", "enum": names },
                "created_at": { "type": "string", "format": "date-time" },
                "data": { "type": "object", "description": "The event's fields (decision 17)" }
            }
        })
    }
}

/// A page of the account's events of the last 30 days, newest first
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EventPage {
    /// The page: each event as it was delivered
    pub events: Vec<EventEnvelope>,
    /// Number of matching events
    pub total: u64,
    /// Page size applied (default 50, at most 100)
    pub limit: u64,
    /// Position of the first event of the page
    pub offset: u64,
}

/// A page of a webhook's finished delivery attempts of the last 30 days, newest first
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeliveryAttemptPage {
    /// The page: one entry per attempt
    pub attempts: Vec<DeliveryAttemptRecord>,
    /// Number of matching attempts
    pub total: u64,
    /// Page size applied (default 50, at most 100)
    pub limit: u64,
    /// Position of the first attempt of the page
    pub offset: u64,
}

/// One delivery attempt and how it ended
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeliveryAttemptRecord {
    /// The delivery (one event to this webhook): its retries share it; a resend is a new one
    pub delivery_id: String,
    /// The event's id (webhook-id and X-Service-Event-Id): the same on retries and resends
    pub event_id: String,
    /// The event's name
    pub event_type: &'static str,
    /// 1 for the first attempt of the delivery, then its retries
    #[schemars(range(min = 1))]
    pub attempt: u32,
    /// A resend asked with POST /events/{id}/resend: one attempt, not counted in failure_count
    pub manual: bool,
    /// When the attempt was sent (service time)
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub attempted_at: Millis,
    /// True when the receiver answered 2xx
    pub success: bool,
    /// The receiver's HTTP status; null when it gave none
    #[schemars(range(max = 999))]
    pub status: Option<u16>,
    /// Why there was no HTTP answer (timeout, refused connection); null when there was one
    pub error: Option<String>,
    /// How long the POST took, in milliseconds
    pub duration_ms: Option<u64>,
    /// When the next attempt of this delivery is due; null when none is
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub next_retry_at: Option<Millis>,
}

/// The event is on its way to the webhook; the attempt shows in its delivery log
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ResendAccepted {
    /// The new delivery's id
    pub delivery_id: String,
    /// The event resent (its id is unchanged)
    pub event_id: String,
    /// The event's name
    pub event_type: &'static str,
    /// The webhook it goes to
    pub webhook_id: String,
    /// When it was handed to the sender (service time)
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub queued_at: Millis,
}

/// Data switched on or off
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DataToggled {
    /// Always true
    pub success: bool,
    /// The eSIM
    pub iccid: String,
    /// true after enable, false after disable
    pub data_enabled: bool,
}

/// The eSIM is terminated
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Terminated {
    /// Always true
    pub success: bool,
    /// The eSIM
    pub iccid: String,
    /// Always terminated: the eSIM can never be used again
    #[schemars(extend("const" = "terminated"))]
    pub status: &'static str,
}

/// The speed limit applied
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Throttled {
    /// Always true
    pub success: bool,
    /// The eSIM
    pub iccid: String,
    /// The speed limit in force
    #[schemars(with = "schema::ThrottleSpeed")]
    pub throttle: String,
}

/// The eSIM wallet was funded
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Funded {
    /// Always true
    pub success: bool,
    /// The eSIM
    pub iccid: String,
    /// USD. Amount taken from the reseller balance
    #[schemars(with = "schema::Usd")]
    pub funded_usd: Decimal,
    /// USD. Wallet credit rounded down to the cent (20 may read back as 19.99)
    #[schemars(with = "schema::Usd")]
    pub wallet_balance_usd: Decimal,
    /// USD. Reseller balance after the fund
    #[schemars(with = "schema::Usd")]
    pub account_balance_remaining: Decimal,
}

/// The eSIM balance return is under way: data is paused, the credit reaches the reseller balance at settlement
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DefundAccepted {
    /// Always true
    pub success: bool,
    /// The eSIM
    pub iccid: String,
    /// Always defund_pending: the return settles later
    #[schemars(extend("const" = "defund_pending"))]
    pub status: &'static str,
    /// USD. The displayed wallet balance, returned at settlement
    #[schemars(with = "schema::Usd")]
    pub estimated_return_usd: Decimal,
    /// Minutes until settlement (about 15)
    pub settles_in_minutes: u64,
}

/// A shared-balance group
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Group")]
pub struct GroupRecord {
    /// Identifier of the group (the group_id of requests and events)
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
    /// Name, unique on the account
    pub name: String,
    /// USD. Group balance rounded down to the cent
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// USD. group.balance_low fires when the balance drops below it
    #[schemars(with = "schema::Usd")]
    pub low_balance_threshold_usd: Decimal,
    /// USD. Sent as suggested_amount_usd in group.balance_low
    #[schemars(with = "schema::Usd")]
    pub refill_amount_usd: Decimal,
    /// Members
    pub esim_count: u64,
    /// USD. Reported data usage of the group
    #[schemars(with = "schema::Usd")]
    pub total_data_charged_usd: Decimal,
    /// defund_pending while a group balance return is on its way
    #[schemars(extend("enum" = ["active", "defund_pending"]))]
    pub status: &'static str,
    /// Creation time
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
    /// Last change
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub updated_at: Millis,
}

/// The account's groups, newest first
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupList {
    /// Groups
    pub groups: Vec<GroupRecord>,
    /// Number of groups
    pub total: u64,
}

/// The group was funded
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupFunded {
    /// Always true
    pub success: bool,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// USD. Amount taken from the reseller balance
    #[schemars(with = "schema::Usd")]
    pub funded_usd: Decimal,
    /// USD. Group balance rounded down to the cent
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// USD. Reseller balance after the fund
    #[schemars(with = "schema::Usd")]
    pub account_balance_remaining: Decimal,
}

/// The group balance return is under way: every member's data is paused until settlement
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupDefundAccepted {
    /// Always true
    pub success: bool,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// Always defund_pending: the return settles later
    #[schemars(extend("const" = "defund_pending"))]
    pub status: &'static str,
    /// USD. The displayed group balance, returned at settlement
    #[schemars(with = "schema::Usd")]
    pub estimated_return_usd: Decimal,
    /// Minutes until settlement (about 15)
    pub settles_in_minutes: u64,
}

/// A page of the group's members, in provisioning order
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupMembers {
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The page
    pub esims: Vec<EsimItem>,
    /// Number of matching eSIMs
    pub total: u64,
    /// Page size applied (default 50, at most 100)
    pub limit: u64,
    /// Position of the first eSIM of the page
    pub offset: u64,
}

/// A change of a group's members: assigned at once, move_pending (202) or removed
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GroupMemberChange {
    /// Always true
    pub success: bool,
    /// The group
    #[schemars(extend("format" = "uuid"))]
    pub group_id: String,
    /// The eSIM
    pub iccid: String,
    /// assigned, move_pending or removed
    #[schemars(extend("enum" = ["assigned", "move_pending", "removed"]))]
    pub status: &'static str,
    /// With move_pending: minutes until the balance is returned and the eSIM joins
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub settles_in_minutes: Option<u64>,
    /// USD. With move_pending: balance returned to the reseller balance at settlement
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::Usd")]
    pub estimated_return_usd: Option<Decimal>,
}

/// The reseller balance
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WalletBalance {
    /// USD. Current reseller balance
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// USD. All top-ups
    #[schemars(with = "schema::Usd")]
    pub lifetime_topup_usd: Decimal,
    /// USD. Provisioning fees plus every fund call
    #[schemars(with = "schema::Usd")]
    pub lifetime_usage_usd: Decimal,
    /// True only while the operator has frozen the account
    pub data_suspended: bool,
    /// Always USD, the currency of every amount of the API
    #[schemars(extend("const" = "USD"))]
    pub currency: &'static str,
}

/// Data rates, 10% below retail
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Rates {
    /// Number of countries listed
    pub total_countries: u64,
    /// Text describing the discount
    pub discount: &'static str,
    /// Countries, sorted by name
    pub countries: Vec<&'static Country>,
}

/// eSIMs of the account
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EsimCount {
    /// eSIMs in status active
    pub active: u64,
    /// All eSIMs
    pub total: u64,
}

/// A failed auto-refill charge
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AutoRefillError {
    /// Why the charge failed
    #[schemars(extend("enum" = ["card_declined", "authentication_required", "expired_card", "daily_limit_reached"]))]
    pub code: String,
    /// Detail
    pub message: String,
    /// When it failed
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub at: Millis,
}

/// The reseller account
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Account")]
pub struct AccountRecord {
    /// Account identifier (acc_ followed by 16 hex characters)
    pub id: String,
    /// Company name
    pub company_name: Option<String>,
    /// Contact address
    pub contact_email: String,
    /// USD. Current reseller balance
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
    /// eSIMs of the account
    pub esim_count: EsimCount,
    /// suspended while the operator has frozen the account
    #[schemars(extend("enum" = ["active", "suspended"]))]
    pub account_status: &'static str,
    /// True while the operator has frozen the account
    pub data_suspended: bool,
    /// Creation time
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
    /// Whether auto-refill is on
    pub auto_refill_enabled: bool,
    /// The last failed auto-refill charge, or null
    pub auto_refill_last_error: Option<AutoRefillError>,
}

/// A webhook endpoint
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Webhook")]
pub struct WebhookRecord {
    /// Identifier (wh_ followed by 16 hex characters)
    pub id: String,
    /// HTTPS URL receiving the POSTs
    #[schemars(extend("format" = "uri"))]
    pub url: String,
    /// Subscribed event names, or ["*"] for all
    pub events: Vec<String>,
    /// Deliveries are made only to active webhooks
    pub active: bool,
    /// Consecutive delivery failures; the webhook turns inactive at 10
    pub failure_count: u32,
    /// Last delivery attempt
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub last_triggered_at: Option<Millis>,
    /// Last failed delivery attempt
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub last_failure_at: Option<Millis>,
    /// Registration time
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
}

/// A newly registered webhook endpoint with its signing secret (shown only once)
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "WebhookWithSecret")]
pub struct WebhookCreated {
    /// The webhook's fields, inline (flattened).
    #[serde(flatten)]
    pub webhook: WebhookRecord,
    /// HMAC-SHA256 secret (whsec_ followed by the base64 of 32 random bytes); X-Service-Signature is the lowercase hex HMAC of the raw body keyed with the whole secret; webhook-signature follows Standard Webhooks (key: the base64-decoded part after whsec_)
    // Filled by the shell, which drew the secret (`Reply::show_secret`); the engine leaves it
    // empty. A second `///` line would join the description of the OpenAPI document.
    pub signing_secret: String,
    /// The secret as the engine holds it, sealed.
    #[serde(skip)]
    pub sealed: crate::secret::SealedSecret,
    /// Reminder to store the secret
    pub note: &'static str,
}

/// The account's webhooks and the subscribable event names
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WebhookList {
    /// Webhook endpoints
    pub webhooks: Vec<WebhookRecord>,
    /// Every subscribable event name
    pub available_events: Vec<&'static str>,
}

/// Done
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Success {
    /// Always true
    pub success: bool,
}

/// Outcome of the test delivery
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WebhookTestResult {
    /// True when the receiver answered 2xx
    pub success: bool,
    /// HTTP status of the receiver; 0 when it gave none
    #[schemars(range(max = 999))]
    pub status: u16,
    /// Present when there was no HTTP answer (timeout, refused connection)
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error: Option<String>,
}

/// A new reseller account (status 201); its API key is shown only here
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AccountCreated {
    /// The account's id (`acc_` followed by 16 hex characters)
    pub account_id: String,
    /// The account's first API key (`rsk_` and 64 hex digits), shown only here
    // Filled by the shell, which drew the key ([`Reply::show_secret`]).
    #[schemars(length(min = 68, max = 68), regex(pattern = r"^rsk_[0-9a-f]{64}$"))]
    pub api_key: String,
    /// The account as the reseller's `GET /account` shows it
    pub account: AccountRecord,
}

/// A manual top-up of the reseller balance (status 201)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ToppedUp {
    /// The top-up's id
    pub topup_id: String,
    /// USD credited
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// USD. The reseller balance after the top-up
    #[schemars(with = "schema::Usd")]
    pub balance_usd: Decimal,
}

/// A new API key of an existing account (status 201), shown only here
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct KeyCreated {
    /// The key (`rsk_` and 64 hex digits): keep it now, it is never shown again
    // Filled by the shell, which drew the key ([`Reply::show_secret`]).
    #[schemars(length(min = 68, max = 68), regex(pattern = r"^rsk_[0-9a-f]{64}$"))]
    pub api_key: String,
}

/// The eSIM's installation details again, with its QR code (decision 130)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct EsimQrCode {
    /// ICCID (19 digits)
    pub iccid: String,
    /// LPA activation code, for a QR code or manual entry
    pub lpa_string: String,
    /// base64 PNG data URL (data:image/png;base64,...) of the LPA string, as provisioning showed it
    #[schemars(with = "String")]
    pub qr_code: QrCodeDataUrl,
    /// iOS 17.4+ one-tap install link
    #[schemars(extend("format" = "uri"))]
    pub direct_install_url: String,
}

/// The account's active API keys, oldest first (keys made in the same millisecond by id; decision 128)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApiKeyList {
    /// One entry per key that authenticates; revoked keys are not listed
    pub keys: Vec<ApiKeyRecord>,
}

/// An API key as the key list shows it: never the key itself
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApiKeyRecord {
    /// The key's id (`key_` and 32 hex digits): what DELETE /keys/{id} takes
    pub id: String,
    /// The key's first 12 characters (`rsk_` and 8 hex digits); null for keys made before the key list existed
    pub prefix: Option<String>,
    /// When the key was made; null for keys made before the key list existed
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub created_at: Option<Millis>,
    /// True for the key that made this request
    pub current: bool,
}

/// A new API key (status 201): the key is shown only here
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApiKeyCreated {
    /// The key's id, as the key list shows it
    pub id: String,
    /// The key (`rsk_` and 64 hex digits): keep it now, it is never shown again. Null in an Idempotency-Key replay, which cannot show it again: only its digest was kept
    #[schemars(length(min = 68, max = 68), regex(pattern = r"^rsk_[0-9a-f]{64}$"))]
    pub api_key: Option<String>,
    /// The key's first 12 characters
    pub prefix: String,
    /// When the key was made
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub created_at: Millis,
}

/// A revoked API key: it answers 401 INVALID_API_KEY from now on
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ApiKeyRevoked {
    /// The key's id
    pub id: String,
    /// Always true
    pub revoked: bool,
}

/// The account's auto-refill: the saved card charged when real spend leaves the balance low (decision 34)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AutoRefillSettings {
    /// Whether the saved card is charged; it switches itself off after a failed charge or the daily limit
    pub enabled: bool,
    /// USD. What one charge adds to the reseller balance
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Decimal,
    /// How the (simulated) saved card answers charges; the operator sets it
    pub card: crate::state::CardBehavior,
    /// Charges started in the last 24 hours
    pub charges_last_24h: u64,
    /// Charges allowed in 24 hours before auto-refill switches itself off
    pub max_charges_per_24h: u64,
    /// USD. The charge on its way; null when none is
    #[schemars(with = "Option<schema::Usd>")]
    pub charge_in_flight_usd: Option<Decimal>,
    /// The last failed charge; null when none failed
    pub last_error: Option<AutoRefillError>,
}

/// A device installed the profile (sandbox API)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Installed {
    /// Always true
    pub success: bool,
    /// ICCID (19 digits)
    pub iccid: String,
    /// The eSIM's status after the install: active, or suspended while its data is disabled
    #[schemars(with = "String")]
    pub status: &'static str,
    /// The profile's state as the network now reports it
    #[schemars(with = "String")]
    pub euicc_state: &'static str,
    /// First installation of the profile (this one, or an earlier one)
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(with = "Option<schema::Timestamp>")]
    pub activated_at: Option<Millis>,
}

/// What a simulated data session used and cost (sandbox API)
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct UsageResult {
    /// Megabytes actually used: less than asked when the credit ran out
    #[schemars(with = "schema::Usd")]
    pub used_mb: Decimal,
    /// USD charged to the wallet (the eSIM's or its group's), at the network's rate
    #[schemars(with = "schema::Usd")]
    pub charged_usd: Decimal,
    /// True when data stopped (or never started): reason says why
    pub data_stopped: bool,
    /// Why no (more) data flows, when it does not
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub reason: Option<&'static str>,
}

/// What the service is still waiting for, soonest first (sandbox API, `GET /sandbox/v1/pending`): the timers that move money or send events; housekeeping timers (stored idempotent answers, revoked key records) are left out
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PendingTimers {
    /// Service time of the answer
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub now: Millis,
    /// Number of pending timers of the kinds listed
    pub total: u64,
    /// Page size applied (default 50, at most 100)
    pub limit: u64,
    /// The soonest `limit` of them, by due time (ties in the order they were set)
    pub timers: Vec<PendingTimer>,
}

/// One pending timer: its kind, when it falls due and what it concerns
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct PendingTimer {
    /// usage_report: data charged to a wallet is reported by the next sync cycle after its reporting pause; esim_return: a defund or a move into a group settles; group_return: a group defund settles; card_charge: an auto-refill card charge settles; webhook_retry: a failed delivery is tried again; group_low_event: a held-back group.balance_low goes out
    #[schemars(extend("enum" = ["usage_report", "esim_return", "group_return", "card_charge", "webhook_retry", "group_low_event"]))]
    pub kind: &'static str,
    /// When it falls due (service time)
    #[serde(with = "rfc3339")]
    #[schemars(with = "schema::Timestamp")]
    pub due_at: Millis,
    /// Whole seconds from now until it falls due (rounded up; 0 when due)
    pub due_in_seconds: i64,
    /// The account it concerns
    pub account_id: String,
    /// The eSIM it concerns (usage_report of an eSIM wallet, esim_return)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iccid: Option<String>,
    /// The group it concerns (usage_report of a group wallet, group_return, group_low_event)
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub group_id: Option<String>,
    /// The webhook a retry goes to
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<String>,
    /// The event a retry carries
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    /// The attempt a retry will be (2 for the first retry)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// USD. The money that moves when it falls due: data not yet reported, a return on its way, a card charge
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::Usd")]
    pub amount_usd: Option<Decimal>,
}

/// The JSON Schemas of field types (in their own leaf module; here under their old path too).
pub use crate::schema;
