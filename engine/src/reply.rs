//! Outputs of the engine: typed success bodies. The transport serializes them as they
//! are (field names are the spec's), so a test can match on a variant and a client
//! reads the same fields.

use crate::codes;
use crate::rates::Country;
use crate::time::{rfc3339, Millis};
use rust_decimal::Decimal;
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
    Success(Success),
    /// The test event was handed out as an effect; the shell answers the caller with
    /// the reply to the matching [`crate::Command::DeliveryOutcome`].
    WebhookTestDispatched {
        delivery_id: u64,
    },
    WebhookTest(WebhookTestResult),
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
            Reply::DefundAccepted(_) | Reply::GroupMovePending(_) => 202,
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
            Reply::WebhookCreated(created) => created.signing_secret = secret.to_string(),
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
            Reply::WebhookCreated(created) => Some(&created.sealed),
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

#[derive(Clone, Debug, Serialize)]
pub struct ProvisionedEsim {
    pub id: String,
    pub iccid: String,
    pub lpa_string: String,
    pub qr_code: QrCodeDataUrl,
    pub direct_install_url: String,
    pub status: &'static str,
    pub euicc_state: &'static str,
    pub end_user_reference: Option<String>,
    pub label: Option<String>,
    pub cost: Decimal,
    pub balance_remaining: Decimal,
    #[serde(with = "rfc3339")]
    pub created_at: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EsimItem {
    pub id: String,
    pub iccid: String,
    pub status: &'static str,
    pub euicc_state: Option<&'static str>,
    pub end_user_reference: Option<String>,
    pub label: Option<String>,
    pub wallet_balance_usd: Decimal,
    pub total_data_charged_usd: Option<Decimal>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    pub activated_at: Option<Millis>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    pub terminated_at: Option<Millis>,
    #[serde(with = "rfc3339")]
    pub created_at: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EsimDetail {
    #[serde(flatten)]
    pub item: EsimItem,
    pub lpa_string: String,
    pub data_enabled: bool,
    pub throttle: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_total_data_charged_usd: Option<Decimal>,
    /// Present while a balance return or a move is on its way (see docs/decisions.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EsimPage {
    pub esims: Vec<EsimItem>,
    pub total: u64,
    pub limit: u64,
    pub offset: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DataToggled {
    pub success: bool,
    pub iccid: String,
    pub data_enabled: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Terminated {
    pub success: bool,
    pub iccid: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct Throttled {
    pub success: bool,
    pub iccid: String,
    pub throttle: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Funded {
    pub success: bool,
    pub iccid: String,
    pub funded_usd: Decimal,
    pub wallet_balance_usd: Decimal,
    pub account_balance_remaining: Decimal,
}

#[derive(Clone, Debug, Serialize)]
pub struct DefundAccepted {
    pub success: bool,
    pub iccid: String,
    pub status: &'static str,
    pub estimated_return_usd: Decimal,
    pub settles_in_minutes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupRecord {
    pub id: String,
    pub name: String,
    pub balance_usd: Decimal,
    pub low_balance_threshold_usd: Decimal,
    pub refill_amount_usd: Decimal,
    pub esim_count: u64,
    pub total_data_charged_usd: Decimal,
    pub status: &'static str,
    #[serde(with = "rfc3339")]
    pub created_at: Millis,
    #[serde(with = "rfc3339")]
    pub updated_at: Millis,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupList {
    pub groups: Vec<GroupRecord>,
    pub total: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupFunded {
    pub success: bool,
    pub group_id: String,
    pub funded_usd: Decimal,
    pub balance_usd: Decimal,
    pub account_balance_remaining: Decimal,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupDefundAccepted {
    pub success: bool,
    pub group_id: String,
    pub status: &'static str,
    pub estimated_return_usd: Decimal,
    pub settles_in_minutes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupMembers {
    pub group_id: String,
    pub esims: Vec<EsimItem>,
    pub total: u64,
    pub limit: u64,
    pub offset: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupMemberChange {
    pub success: bool,
    pub group_id: String,
    pub iccid: String,
    /// `assigned`, `move_pending` or `removed`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settles_in_minutes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_return_usd: Option<Decimal>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WalletBalance {
    pub balance_usd: Decimal,
    pub lifetime_topup_usd: Decimal,
    pub lifetime_usage_usd: Decimal,
    pub data_suspended: bool,
    pub currency: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct Rates {
    pub total_countries: u64,
    pub discount: &'static str,
    pub countries: Vec<&'static Country>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EsimCount {
    pub active: u64,
    pub total: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AutoRefillError {
    pub code: String,
    pub message: String,
    #[serde(with = "rfc3339")]
    pub at: Millis,
}

#[derive(Clone, Debug, Serialize)]
pub struct AccountRecord {
    pub id: String,
    pub company_name: Option<String>,
    pub contact_email: String,
    pub balance_usd: Decimal,
    pub esim_count: EsimCount,
    /// `active`, or `suspended` while the operator has frozen the account.
    pub account_status: &'static str,
    pub data_suspended: bool,
    #[serde(with = "rfc3339")]
    pub created_at: Millis,
    pub auto_refill_enabled: bool,
    pub auto_refill_last_error: Option<AutoRefillError>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WebhookRecord {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub active: bool,
    pub failure_count: u32,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    pub last_triggered_at: Option<Millis>,
    #[serde(serialize_with = "rfc3339::option::serialize")]
    pub last_failure_at: Option<Millis>,
    #[serde(with = "rfc3339")]
    pub created_at: Millis,
}

#[derive(Clone, Debug, Serialize)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookRecord,
    /// Filled by the shell, which drew the secret ([`Reply::show_secret`]).
    pub signing_secret: String,
    /// The secret as the engine holds it, sealed.
    #[serde(skip)]
    pub sealed: crate::secret::SealedSecret,
    pub note: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookRecord>,
    pub available_events: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Success {
    pub success: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct WebhookTestResult {
    pub success: bool,
    /// The receiver's HTTP status; 0 when it gave none (timeout, refused connection).
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
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
