//! Outputs of the engine: typed success bodies. The transport serializes them as they
//! are (field names are the spec's), so a test can match on a variant and a client
//! reads the same fields. The bodies of the reseller API derive their JSON Schema
//! (`schemars`), from which the transport's OpenAPI document takes its response schemas;
//! [`schema`] holds the schemas of the field types whose serde form is custom.

use crate::codes;
use crate::rates::Country;
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::Serialize;

/// What a command answers: a success body or the spec's error body.
pub type Response = Result<Reply, crate::ApiError>;

#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Reply {
    Provisioned(ProvisionedEsim),
    EsimPage(EsimPage),
    Esim(EsimDetail),
    DataToggled(DataToggled),
    Terminated(Terminated),
    Throttled(Throttled),
    Funded(Funded),
    DefundAccepted(DefundAccepted),
    GroupList(GroupList),
    Group(GroupRecord),
    GroupCreated(GroupRecord),
    GroupFunded(GroupFunded),
    GroupDefundAccepted(GroupDefundAccepted),
    GroupMembers(GroupMembers),
    GroupMemberAdded(GroupMemberChange),
    GroupMovePending(GroupMemberChange),
    GroupMemberRemoved(GroupMemberChange),
    WalletBalance(WalletBalance),
    Rates(Rates),
    Account(AccountRecord),
    WebhookList(WebhookList),
    Webhook(WebhookRecord),
    WebhookCreated(WebhookCreated),
    /// A rotated secret: the same shape as a creation's answer (the webhook, the new
    /// secret shown once, a note), status 200.
    WebhookSecretRotated(WebhookCreated),
    Success(Success),
    /// The test event was handed out as an effect; the shell answers the caller with
    /// the reply to the matching [`crate::Command::DeliveryOutcome`].
    WebhookTestDispatched {
        delivery_id: u64,
    },
    WebhookTest(WebhookTestResult),
    EventPage(EventPage),
    Event(EventEnvelope),
    /// `GET /webhooks/{id}/deliveries`.
    DeliveryAttemptPage(DeliveryAttemptPage),
    /// `POST /events/{id}/resend`, status 202: the attempt shows in the delivery log.
    ResendAccepted(ResendAccepted),
    AccountCreated(AccountCreated),
    ToppedUp(ToppedUp),
    KeyCreated(KeyCreated),
    AdminUpdated(serde_json::Value),
    Installed(Installed),
    Usage(UsageResult),
    /// A stored response replayed for an `Idempotency-Key` (status and exact body bytes).
    Replayed {
        status: u16,
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
            | Reply::KeyCreated(_) => 201,
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
                body.replacen(&format!("\"qr_code\":\"{UNDRAWN_QR}\""), &format!("\"qr_code\":{drawn}"), 1).into_bytes()
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
            Reply::Replayed { qr_code: Some(qr_code), .. } => qr_code.render = render,
            _ => {}
        }
    }

    /// The QR code this reply draws, if any.
    fn qr_code(&self) -> Option<&QrCodeDataUrl> {
        match self {
            Reply::Provisioned(provisioned) => Some(&provisioned.qr_code),
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A newly provisioned eSIM with its installation details")]
pub struct ProvisionedEsim {
    #[schemars(description = "Identifier of the eSIM", extend("format" = "uuid"))]
    pub id: String,
    #[schemars(description = "ICCID (19 digits)")]
    pub iccid: String,
    #[schemars(description = "LPA activation code, for a QR code or manual entry")]
    pub lpa_string: String,
    #[schemars(
        description = "base64 PNG data URL (data:image/png;base64,...), usable as an image source",
        with = "String"
    )]
    pub qr_code: QrCodeDataUrl,
    #[schemars(description = "iOS 17.4+ one-tap install link", extend("format" = "uri"))]
    pub direct_install_url: String,
    #[schemars(description = "pending at provisioning", extend("enum" = ["pending", "active", "suspended", "terminated"]))]
    pub status: &'static str,
    #[schemars(description = "RELEASED at provisioning", extend("enum" = ["RELEASED", "DOWNLOADED", "INSTALLED", "ENABLED"]))]
    pub euicc_state: &'static str,
    #[schemars(description = "As given")]
    pub end_user_reference: Option<String>,
    #[schemars(description = "As given")]
    pub label: Option<String>,
    #[schemars(description = "USD. Provisioning fee deducted (1.75)", with = "schema::Usd")]
    pub cost: Decimal,
    #[schemars(description = "USD. Reseller balance after the fee", with = "schema::Usd")]
    pub balance_remaining: Decimal,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Provisioning time", with = "schema::Timestamp")]
    pub created_at: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(description = "Present when issued into a group", with = "String", extend("format" = "uuid"))]
    pub group_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "An eSIM (list item; also the core of the detail record)")]
pub struct EsimItem {
    #[schemars(description = "Identifier of the eSIM", extend("format" = "uuid"))]
    pub id: String,
    #[schemars(description = "ICCID (19 digits), the identifier used in paths")]
    pub iccid: String,
    #[schemars(description = "pending until first installed, active, suspended while data is disabled, terminated for good", extend("enum" = ["pending", "active", "suspended", "terminated"]))]
    pub status: &'static str,
    #[schemars(description = "Activation state of the profile on the device", extend("enum" = ["RELEASED", "DOWNLOADED", "INSTALLED", "ENABLED", null]))]
    pub euicc_state: Option<&'static str>,
    #[schemars(description = "The reseller's own customer or order reference")]
    pub end_user_reference: Option<String>,
    #[schemars(description = "Human label")]
    pub label: Option<String>,
    #[schemars(
        description = "USD. Remaining wallet credit rounded down to the cent (never above the exact credit); 0 for a group member",
        with = "schema::Usd"
    )]
    pub wallet_balance_usd: Decimal,
    #[schemars(
        description = "USD. Lifetime data usage charged, as reported by the upstream pipeline; null for a group member",
        with = "Option<schema::Usd>"
    )]
    pub total_data_charged_usd: Option<Decimal>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(description = "First installation and boot of the profile", with = "Option<schema::Timestamp>")]
    pub activated_at: Option<Millis>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(description = "Termination time", with = "Option<schema::Timestamp>")]
    pub terminated_at: Option<Millis>,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Provisioning time", with = "schema::Timestamp")]
    pub created_at: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(description = "Present while the eSIM is a member of a group", with = "String", extend("format" = "uuid"))]
    pub group_id: Option<String>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(
    description = "An eSIM with its activation string and switches; euicc_state is read live from the network (the cached state when the read fails)"
)]
pub struct EsimDetail {
    #[serde(flatten)]
    pub item: EsimItem,
    #[schemars(description = "LPA activation code")]
    pub lpa_string: String,
    #[schemars(description = "Whether data is enabled")]
    pub data_enabled: bool,
    #[schemars(with = "schema::ThrottleSpeed")]
    pub throttle: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        description = "USD. Present for a group member: data usage of the whole group (members share one wallet)",
        with = "schema::Usd"
    )]
    pub group_total_data_charged_usd: Option<Decimal>,
    /// Present while a balance return or a move is on its way (see docs/decisions.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(description = "Present while a balance return or a move into a group is on its way", with = "String", extend("enum" = ["defund_pending", "move_pending"]))]
    pub pending: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A page of the account's eSIMs, in provisioning order")]
pub struct EsimPage {
    #[schemars(description = "The page")]
    pub esims: Vec<EsimItem>,
    #[schemars(description = "Number of matching eSIMs")]
    pub total: u64,
    #[schemars(description = "Page size applied (default 50, at most 100)")]
    pub limit: u64,
    #[schemars(description = "Position of the first eSIM of the page")]
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
        let names: Vec<&str> = crate::event::EventName::SUBSCRIBABLE.iter().map(|e| e.as_str()).collect();
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A page of the account's events of the last 30 days, newest first")]
pub struct EventPage {
    #[schemars(description = "The page: each event as it was delivered")]
    pub events: Vec<EventEnvelope>,
    #[schemars(description = "Number of matching events")]
    pub total: u64,
    #[schemars(description = "Page size applied (default 50, at most 100)")]
    pub limit: u64,
    #[schemars(description = "Position of the first event of the page")]
    pub offset: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A page of a webhook's finished delivery attempts of the last 30 days, newest first")]
pub struct DeliveryAttemptPage {
    #[schemars(description = "The page: one entry per attempt")]
    pub attempts: Vec<DeliveryAttemptRecord>,
    #[schemars(description = "Number of matching attempts")]
    pub total: u64,
    #[schemars(description = "Page size applied (default 50, at most 100)")]
    pub limit: u64,
    #[schemars(description = "Position of the first attempt of the page")]
    pub offset: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "One delivery attempt and how it ended")]
pub struct DeliveryAttemptRecord {
    #[schemars(description = "The delivery (one event to this webhook): its retries share it; a resend is a new one")]
    pub delivery_id: String,
    #[schemars(description = "The event's id (webhook-id and X-Service-Event-Id): the same on retries and resends")]
    pub event_id: String,
    #[schemars(description = "The event's name")]
    pub event_type: &'static str,
    #[schemars(description = "1 for the first attempt of the delivery, then its retries", range(min = 1))]
    pub attempt: u32,
    #[schemars(
        description = "A resend asked with POST /events/{id}/resend: one attempt, not counted in failure_count"
    )]
    pub manual: bool,
    #[serde(with = "rfc3339")]
    #[schemars(description = "When the attempt was sent (service time)", with = "schema::Timestamp")]
    pub attempted_at: Millis,
    #[schemars(description = "True when the receiver answered 2xx")]
    pub success: bool,
    #[schemars(description = "The receiver's HTTP status; null when it gave none", range(max = 999))]
    pub status: Option<u16>,
    #[schemars(description = "Why there was no HTTP answer (timeout, refused connection); null when there was one")]
    pub error: Option<String>,
    #[schemars(description = "How long the POST took, in milliseconds")]
    pub duration_ms: Option<u64>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(
        description = "When the next attempt of this delivery is due; null when none is",
        with = "Option<schema::Timestamp>"
    )]
    pub next_retry_at: Option<Millis>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The event is on its way to the webhook; the attempt shows in its delivery log")]
pub struct ResendAccepted {
    #[schemars(description = "The new delivery's id")]
    pub delivery_id: String,
    #[schemars(description = "The event resent (its id is unchanged)")]
    pub event_id: String,
    #[schemars(description = "The event's name")]
    pub event_type: &'static str,
    #[schemars(description = "The webhook it goes to")]
    pub webhook_id: String,
    #[serde(with = "rfc3339")]
    #[schemars(description = "When it was handed to the sender (service time)", with = "schema::Timestamp")]
    pub queued_at: Millis,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "Data switched on or off")]
pub struct DataToggled {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    #[schemars(description = "true after enable, false after disable")]
    pub data_enabled: bool,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The eSIM is terminated")]
pub struct Terminated {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    #[schemars(extend("const" = "terminated"))]
    pub status: &'static str,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The speed limit applied")]
pub struct Throttled {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    #[schemars(with = "schema::ThrottleSpeed")]
    pub throttle: String,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The eSIM wallet was funded")]
pub struct Funded {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    #[schemars(description = "USD. Amount taken from the reseller balance", with = "schema::Usd")]
    pub funded_usd: Decimal,
    #[schemars(
        description = "USD. Wallet credit rounded down to the cent (20 may read back as 19.99)",
        with = "schema::Usd"
    )]
    pub wallet_balance_usd: Decimal,
    #[schemars(description = "USD. Reseller balance after the fund", with = "schema::Usd")]
    pub account_balance_remaining: Decimal,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(
    description = "The eSIM balance return is under way: data is paused, the credit reaches the reseller balance at settlement"
)]
pub struct DefundAccepted {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    #[schemars(extend("const" = "defund_pending"))]
    pub status: &'static str,
    #[schemars(description = "USD. The displayed wallet balance, returned at settlement", with = "schema::Usd")]
    pub estimated_return_usd: Decimal,
    #[schemars(description = "Minutes until settlement (about 15)")]
    pub settles_in_minutes: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Group", description = "A shared-balance group")]
pub struct GroupRecord {
    #[schemars(description = "Identifier of the group (the group_id of requests and events)", extend("format" = "uuid"))]
    pub id: String,
    #[schemars(description = "Name, unique on the account")]
    pub name: String,
    #[schemars(description = "USD. Group balance rounded down to the cent", with = "schema::Usd")]
    pub balance_usd: Decimal,
    #[schemars(description = "USD. group.balance_low fires when the balance drops below it", with = "schema::Usd")]
    pub low_balance_threshold_usd: Decimal,
    #[schemars(description = "USD. Sent as suggested_amount_usd in group.balance_low", with = "schema::Usd")]
    pub refill_amount_usd: Decimal,
    #[schemars(description = "Members")]
    pub esim_count: u64,
    #[schemars(description = "USD. Reported data usage of the group", with = "schema::Usd")]
    pub total_data_charged_usd: Decimal,
    #[schemars(description = "defund_pending while a group balance return is on its way", extend("enum" = ["active", "defund_pending"]))]
    pub status: &'static str,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Creation time", with = "schema::Timestamp")]
    pub created_at: Millis,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Last change", with = "schema::Timestamp")]
    pub updated_at: Millis,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The account's groups, newest first")]
pub struct GroupList {
    #[schemars(description = "Groups")]
    pub groups: Vec<GroupRecord>,
    #[schemars(description = "Number of groups")]
    pub total: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The group was funded")]
pub struct GroupFunded {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The group", extend("format" = "uuid"))]
    pub group_id: String,
    #[schemars(description = "USD. Amount taken from the reseller balance", with = "schema::Usd")]
    pub funded_usd: Decimal,
    #[schemars(description = "USD. Group balance rounded down to the cent", with = "schema::Usd")]
    pub balance_usd: Decimal,
    #[schemars(description = "USD. Reseller balance after the fund", with = "schema::Usd")]
    pub account_balance_remaining: Decimal,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The group balance return is under way: every member's data is paused until settlement")]
pub struct GroupDefundAccepted {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The group", extend("format" = "uuid"))]
    pub group_id: String,
    #[schemars(extend("const" = "defund_pending"))]
    pub status: &'static str,
    #[schemars(description = "USD. The displayed group balance, returned at settlement", with = "schema::Usd")]
    pub estimated_return_usd: Decimal,
    #[schemars(description = "Minutes until settlement (about 15)")]
    pub settles_in_minutes: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A page of the group's members, in provisioning order")]
pub struct GroupMembers {
    #[schemars(description = "The group", extend("format" = "uuid"))]
    pub group_id: String,
    #[schemars(description = "The page")]
    pub esims: Vec<EsimItem>,
    #[schemars(description = "Number of matching eSIMs")]
    pub total: u64,
    #[schemars(description = "Page size applied (default 50, at most 100)")]
    pub limit: u64,
    #[schemars(description = "Position of the first eSIM of the page")]
    pub offset: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A change of a group's members: assigned at once, move_pending (202) or removed")]
pub struct GroupMemberChange {
    #[schemars(description = "Always true")]
    pub success: bool,
    #[schemars(description = "The group", extend("format" = "uuid"))]
    pub group_id: String,
    #[schemars(description = "The eSIM")]
    pub iccid: String,
    /// `assigned`, `move_pending` or `removed`.
    #[schemars(description = "assigned, move_pending or removed", extend("enum" = ["assigned", "move_pending", "removed"]))]
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        description = "With move_pending: minutes until the balance is returned and the eSIM joins",
        with = "u64"
    )]
    pub settles_in_minutes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(
        description = "USD. With move_pending: balance returned to the reseller balance at settlement",
        with = "schema::Usd"
    )]
    pub estimated_return_usd: Option<Decimal>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The reseller balance")]
pub struct WalletBalance {
    #[schemars(description = "USD. Current reseller balance", with = "schema::Usd")]
    pub balance_usd: Decimal,
    #[schemars(description = "USD. All top-ups", with = "schema::Usd")]
    pub lifetime_topup_usd: Decimal,
    #[schemars(description = "USD. Provisioning fees plus every fund call", with = "schema::Usd")]
    pub lifetime_usage_usd: Decimal,
    #[schemars(description = "True only while the operator has frozen the account")]
    pub data_suspended: bool,
    #[schemars(extend("const" = "USD"))]
    pub currency: &'static str,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "Data rates, 10% below retail")]
pub struct Rates {
    #[schemars(description = "Number of countries listed")]
    pub total_countries: u64,
    #[schemars(description = "Text describing the discount")]
    pub discount: &'static str,
    #[schemars(description = "Countries, sorted by name")]
    pub countries: Vec<&'static Country>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "eSIMs of the account")]
pub struct EsimCount {
    #[schemars(description = "eSIMs in status active")]
    pub active: u64,
    #[schemars(description = "All eSIMs")]
    pub total: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "A failed auto-refill charge")]
pub struct AutoRefillError {
    #[schemars(description = "Why the charge failed", extend("enum" = ["card_declined", "authentication_required", "expired_card", "daily_limit_reached"]))]
    pub code: String,
    #[schemars(description = "Detail")]
    pub message: String,
    #[serde(with = "rfc3339")]
    #[schemars(description = "When it failed", with = "schema::Timestamp")]
    pub at: Millis,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Account", description = "The reseller account")]
pub struct AccountRecord {
    #[schemars(description = "Account identifier (acc_ followed by 16 hex characters)")]
    pub id: String,
    #[schemars(description = "Company name")]
    pub company_name: Option<String>,
    #[schemars(description = "Contact address")]
    pub contact_email: String,
    #[schemars(description = "USD. Current reseller balance", with = "schema::Usd")]
    pub balance_usd: Decimal,
    #[schemars(description = "eSIMs of the account")]
    pub esim_count: EsimCount,
    /// `active`, or `suspended` while the operator has frozen the account.
    #[schemars(description = "suspended while the operator has frozen the account", extend("enum" = ["active", "suspended"]))]
    pub account_status: &'static str,
    #[schemars(description = "True while the operator has frozen the account")]
    pub data_suspended: bool,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Creation time", with = "schema::Timestamp")]
    pub created_at: Millis,
    #[schemars(description = "Whether auto-refill is on")]
    pub auto_refill_enabled: bool,
    #[schemars(description = "The last failed auto-refill charge, or null")]
    pub auto_refill_last_error: Option<AutoRefillError>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(rename = "Webhook", description = "A webhook endpoint")]
pub struct WebhookRecord {
    #[schemars(description = "Identifier (wh_ followed by 16 hex characters)")]
    pub id: String,
    #[schemars(description = "HTTPS URL receiving the POSTs", extend("format" = "uri"))]
    pub url: String,
    #[schemars(description = "Subscribed event names, or [\"*\"] for all")]
    pub events: Vec<String>,
    #[schemars(description = "Deliveries are made only to active webhooks")]
    pub active: bool,
    #[schemars(description = "Consecutive delivery failures; the webhook turns inactive at 10")]
    pub failure_count: u32,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(description = "Last delivery attempt", with = "Option<schema::Timestamp>")]
    pub last_triggered_at: Option<Millis>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    #[schemars(description = "Last failed delivery attempt", with = "Option<schema::Timestamp>")]
    pub last_failure_at: Option<Millis>,
    #[serde(with = "rfc3339")]
    #[schemars(description = "Registration time", with = "schema::Timestamp")]
    pub created_at: Millis,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(
    rename = "WebhookWithSecret",
    description = "A newly registered webhook endpoint with its signing secret (shown only once)"
)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookRecord,
    /// Filled by the shell, which drew the secret ([`Reply::show_secret`]).
    #[schemars(
        description = "HMAC-SHA256 secret (whsec_ followed by the base64 of 32 random bytes); X-Service-Signature is the lowercase hex HMAC of the raw body keyed with the whole secret; webhook-signature follows Standard Webhooks (key: the base64-decoded part after whsec_)"
    )]
    pub signing_secret: String,
    /// The secret as the engine holds it, sealed.
    #[serde(skip)]
    pub sealed: crate::secret::SealedSecret,
    #[schemars(description = "Reminder to store the secret")]
    pub note: &'static str,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "The account's webhooks and the subscribable event names")]
pub struct WebhookList {
    #[schemars(description = "Webhook endpoints")]
    pub webhooks: Vec<WebhookRecord>,
    #[schemars(description = "Every subscribable event name")]
    pub available_events: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "Done")]
pub struct Success {
    #[schemars(description = "Always true")]
    pub success: bool,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(description = "Outcome of the test delivery")]
pub struct WebhookTestResult {
    #[schemars(description = "True when the receiver answered 2xx")]
    pub success: bool,
    /// The receiver's HTTP status; 0 when it gave none (timeout, refused connection).
    #[schemars(description = "HTTP status of the receiver; 0 when it gave none", range(max = 999))]
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(description = "Present when there was no HTTP answer (timeout, refused connection)", with = "String")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AccountCreated {
    pub account_id: String,
    /// Filled by the shell, which drew the key ([`Reply::show_secret`]).
    pub api_key: String,
    pub account: AccountRecord,
}

#[derive(Clone, Debug, Serialize)]
pub struct ToppedUp {
    pub topup_id: String,
    pub amount_usd: Decimal,
    pub balance_usd: Decimal,
}

#[derive(Clone, Debug, Serialize)]
pub struct KeyCreated {
    /// Filled by the shell, which drew the key ([`Reply::show_secret`]).
    pub api_key: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Installed {
    pub success: bool,
    pub iccid: String,
    pub status: &'static str,
    pub euicc_state: &'static str,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    pub activated_at: Option<Millis>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UsageResult {
    pub used_mb: Decimal,
    pub charged_usd: Decimal,
    pub data_stopped: bool,
    /// Why no (more) data flows, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// JSON Schemas of the field types whose serde form is not their Rust type's: money as
/// an exact JSON number, times as RFC 3339 text, throttle speeds as their names.
pub mod schema {
    use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
    use std::borrow::Cow;

    /// A USD amount (a `Decimal`): a JSON number with its exact digits, never a string.
    pub struct Usd;

    impl JsonSchema for Usd {
        fn inline_schema() -> bool {
            true
        }
        fn schema_name() -> Cow<'static, str> {
            "Usd".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "number" })
        }
    }

    /// A service time (`Millis`): RFC 3339 UTC with milliseconds.
    pub struct Timestamp;

    impl JsonSchema for Timestamp {
        fn inline_schema() -> bool {
            true
        }
        fn schema_name() -> Cow<'static, str> {
            "Timestamp".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({ "type": "string", "format": "date-time" })
        }
    }

    /// A throttle speed: one of [`ThrottleSpeed::names`].
    pub struct ThrottleSpeed;

    impl ThrottleSpeed {
        /// The accepted speeds: NO_LIMIT, 100 to 3000 Kbps in steps of 100, then 3500,
        /// 4000, 4500 and 5000 (what `esim::is_valid_speed` accepts; a test checks it).
        pub fn names() -> Vec<String> {
            let steps = (1..=30).map(|n| n * 100).chain([3_500, 4_000, 4_500, 5_000]);
            std::iter::once("NO_LIMIT".to_string()).chain(steps.map(|kbps| format!("SPEED_{kbps}_KBPS"))).collect()
        }
    }

    impl JsonSchema for ThrottleSpeed {
        fn schema_name() -> Cow<'static, str> {
            "ThrottleSpeed".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "type": "string",
                "enum": ThrottleSpeed::names(),
                "description": "Speed limit: NO_LIMIT (full speed), SPEED_100_KBPS to SPEED_3000_KBPS in 100 Kbps steps, SPEED_3500_KBPS, SPEED_4000_KBPS, SPEED_4500_KBPS or SPEED_5000_KBPS",
            })
        }
    }
}
