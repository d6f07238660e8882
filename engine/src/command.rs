//! Inputs of the engine. Commands are plain data (serde), so the journal can store them
//! and a replay can feed them back: the transport parses, the engine decides.

use crate::secret::{KeyDigest, SealedSecret};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// One input, applied at the `now` given to [`crate::Engine::handle`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A call of the reseller API, authenticated by its bearer key.
    Reseller(ResellerRequest),
    /// The operator side (admin API; the transport checks the admin token).
    Admin(AdminOp),
    /// The world: devices, the network and its faults (sandbox API).
    Sandbox(SandboxOp),
    /// What became of a webhook delivery the engine handed out as an effect.
    DeliveryOutcome {
        delivery_id: u64,
        result: DeliveryResult,
        /// How long the POST took on the shell's clock, for the delivery log (absent in
        /// journals written before the log existed).
        #[serde(default)]
        duration_ms: Option<u64>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResellerRequest {
    /// SHA-256 of the bearer key (the transport hashes it once; the key itself never
    /// reaches the engine or the journal).
    pub key_digest: KeyDigest,
    /// `Idempotency-Key` header of a POST: replays the stored response for 24 hours.
    pub idempotency_key: Option<String>,
    pub op: ResellerOp,
}

/// Every endpoint of the reseller API. Optional query values are `None` when absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResellerOp {
    Provision {
        end_user_reference: Option<String>,
        label: Option<String>,
        group_id: Option<String>,
    },
    ListEsims {
        status: Option<String>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    GetEsim {
        iccid: String,
    },
    Enable {
        iccid: String,
    },
    Disable {
        iccid: String,
    },
    Terminate {
        iccid: String,
    },
    Throttle {
        iccid: String,
        speed: String,
    },
    Fund {
        iccid: String,
        amount: Decimal,
    },
    Defund {
        iccid: String,
    },
    ListGroups,
    CreateGroup {
        name: String,
        low_balance_threshold_usd: Option<Decimal>,
        refill_amount_usd: Option<Decimal>,
    },
    GetGroup {
        group_id: String,
    },
    UpdateGroup {
        group_id: String,
        name: Option<String>,
        low_balance_threshold_usd: Option<Decimal>,
        refill_amount_usd: Option<Decimal>,
    },
    FundGroup {
        group_id: String,
        amount: Decimal,
    },
    DefundGroup {
        group_id: String,
    },
    ListGroupEsims {
        group_id: String,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    AddGroupEsim {
        group_id: String,
        iccid: String,
    },
    RemoveGroupEsim {
        group_id: String,
        iccid: String,
    },
    WalletBalance,
    Rates {
        country: Option<String>,
        continent: Option<String>,
    },
    Account,
    ListWebhooks,
    RotateWebhookSecret {
        webhook_id: String,
        /// Filled by the shell (sealed), like a creation's.
        signing_secret: crate::secret::SealedSecret,
    },
    ListEvents {
        filter: crate::event_log::EventFilter,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    GetEvent {
        event_id: String,
    },
    /// `POST /events/{id}/resend`: the kept envelope to one webhook, at once (decision 118).
    ResendEvent {
        event_id: String,
        webhook_id: String,
    },
    /// `GET /webhooks/{id}/deliveries`: its delivery log, newest first.
    ListDeliveries {
        webhook_id: String,
        /// Only the attempts of this event.
        event_id: Option<String>,
        limit: Option<u64>,
        offset: Option<u64>,
    },
    CreateWebhook {
        url: String,
        events: Vec<String>,
        /// The new signing secret, drawn and sealed by the shell (not part of what an
        /// `Idempotency-Key` compares: a retry draws a fresh one that is never used).
        signing_secret: SealedSecret,
    },
    GetWebhook {
        webhook_id: String,
    },
    UpdateWebhook {
        webhook_id: String,
        url: Option<String>,
        events: Option<Vec<String>>,
        active: Option<bool>,
    },
    DeleteWebhook {
        webhook_id: String,
    },
    TestWebhook {
        webhook_id: String,
    },
}

impl ResellerOp {
    /// Reads change nothing: they are neither journaled nor idempotency-stored.
    pub fn is_read(&self) -> bool {
        use ResellerOp::*;
        matches!(
            self,
            ListEsims { .. }
                | GetEsim { .. }
                | ListGroups
                | GetGroup { .. }
                | ListGroupEsims { .. }
                | WalletBalance
                | Rates { .. }
                | Account
                | ListWebhooks
                | GetWebhook { .. }
                | ListEvents { .. }
                | GetEvent { .. }
                | ListDeliveries { .. }
        )
    }

    /// A short stable name (logs, simulation statistics).
    pub fn kind(&self) -> &'static str {
        use ResellerOp::*;
        match self {
            Provision { .. } => "provision",
            ListEsims { .. } => "list_esims",
            GetEsim { .. } => "get_esim",
            Enable { .. } => "enable",
            Disable { .. } => "disable",
            Terminate { .. } => "terminate",
            Throttle { .. } => "throttle",
            Fund { .. } => "fund",
            Defund { .. } => "defund",
            ListGroups => "list_groups",
            CreateGroup { .. } => "create_group",
            GetGroup { .. } => "get_group",
            UpdateGroup { .. } => "update_group",
            FundGroup { .. } => "fund_group",
            DefundGroup { .. } => "defund_group",
            ListGroupEsims { .. } => "list_group_esims",
            AddGroupEsim { .. } => "add_group_esim",
            RemoveGroupEsim { .. } => "remove_group_esim",
            WalletBalance => "wallet_balance",
            Rates { .. } => "rates",
            Account => "account",
            ListWebhooks => "list_webhooks",
            ListEvents { .. } => "list_events",
            RotateWebhookSecret { .. } => "rotate_webhook_secret",
            GetEvent { .. } => "get_event",
            ResendEvent { .. } => "resend_event",
            ListDeliveries { .. } => "list_deliveries",
            CreateWebhook { .. } => "create_webhook",
            GetWebhook { .. } => "get_webhook",
            UpdateWebhook { .. } => "update_webhook",
            DeleteWebhook { .. } => "delete_webhook",
            TestWebhook { .. } => "test_webhook",
        }
    }
}

/// The simulated saved card of an account's auto-refill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CardBehavior {
    Ok,
    Declined,
    RequiresAction,
    Expired,
}

impl CardBehavior {
    pub const ALL: [CardBehavior; 4] =
        [CardBehavior::Ok, CardBehavior::Declined, CardBehavior::RequiresAction, CardBehavior::Expired];
}

/// The name of a card as the API and scripts write it (`requires_action`), from its serde
/// form: one spelling for the HTTP body, the journal and the simulation's scripts.
impl std::str::FromStr for CardBehavior {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(text.to_string()))
            .map_err(|_| "card must be one of ok, declined, requires_action, expired".to_string())
    }
}

impl std::fmt::Display for CardBehavior {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => f.write_str(&name),
            _ => Err(std::fmt::Error),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AdminOp {
    /// `api_key_digest`: the digest of the account's first key, drawn by the shell.
    CreateAccount {
        contact_email: String,
        company_name: Option<String>,
        api_key_digest: KeyDigest,
    },
    TopUp {
        account_id: String,
        amount_usd: Decimal,
    },
    CreateKey {
        account_id: String,
        api_key_digest: KeyDigest,
    },
    RevokeKey {
        api_key_digest: KeyDigest,
    },
    Freeze {
        account_id: String,
        frozen: bool,
    },
    /// A partial update: absent fields keep their value (at least one must be given).
    SetAutoRefill {
        account_id: String,
        enabled: Option<bool>,
        amount_usd: Option<Decimal>,
        card: Option<CardBehavior>,
    },
    SetLimits {
        account_id: String,
        max_groups: Option<u32>,
        max_group_size: Option<u32>,
    },
    SetInventory {
        available: u64,
    },
    /// The `--allow-insecure-webhooks` setting of a start, when it differs from the
    /// state's (no HTTP route): journaled, so a replay validates each webhook URL under
    /// the setting it was registered with.
    SetInsecureWebhooks {
        allowed: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SandboxOp {
    Install { iccid: String },
    Usage { iccid: String, mb: Decimal, country: String, operator: Option<String> },
    SetFaults { upstream_pause_fails: Option<bool>, network_read_fails: Option<bool> },
}

/// How a webhook POST ended, as the shell saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryResult {
    /// The receiver answered with this HTTP status (2xx is success).
    Status(u16),
    /// No answer within the delivery timeout.
    Timeout,
    /// No connection (refused, DNS, TLS): the text says which.
    Failed(String),
}

impl DeliveryResult {
    pub fn is_success(&self) -> bool {
        matches!(self, DeliveryResult::Status(200..=299))
    }
}
