//! Inputs of the engine. Commands are plain data (serde), so the journal can store them
//! and a replay can feed them back: the transport parses, the engine decides.
//!
//! Text fields hold what the caller sent, unchecked: the engine validates them and
//! answers the spec's error body (never a panic), so a journal replays every decision,
//! refusals included. Money is `Decimal` USD, exactly as parsed; identifiers are the
//! API's text forms (`iccid`, a group's uuid, `wh_...`, `evt_...`, `acc_...`).

use crate::secret::{KeyDigest, SealedSecret};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

pub use crate::state::{CardBehavior, DeliveryResult};

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
        /// The `delivery_id` of the [`crate::Delivery`] the shell POSTed; an unknown or
        /// already settled one is a no-op (a stale report after a restart).
        delivery_id: u64,
        /// How the POST ended: decides success, retry or the failure count.
        result: DeliveryResult,
        /// How long the POST took on the shell's clock, for the delivery log (absent in
        /// journals written before the log existed).
        #[serde(default)]
        duration_ms: Option<u64>,
    },
}

/// A reseller API call: who made it (by key digest), its idempotency key and the
/// endpoint with its parsed parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResellerRequest {
    /// SHA-256 of the bearer key (the transport hashes it once; the key itself never
    /// reaches the engine or the journal).
    pub key_digest: KeyDigest,
    /// `Idempotency-Key` header of a POST: replays the stored response for 24 hours.
    pub idempotency_key: Option<String>,
    /// The endpoint called and its parameters.
    pub op: ResellerOp,
}

/// Every endpoint of the reseller API. Optional query values are `None` when absent.
///
/// Paths are relative to the base `/api/v2/reseller`. `{iccid}` is the eSIM's ICCID,
/// `{id}` a group's uuid, a webhook's `wh_...` or an event's `evt_...` id. Page sizes
/// (`limit`) default to 50 and are at most 100; `offset` defaults to 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResellerOp {
    /// `POST /esim/provision`: issues a new eSIM for the 1.75 USD fee, standalone or
    /// into a group.
    Provision {
        /// The reseller's own customer or order reference (at most 256 characters);
        /// surfaced in webhook payloads.
        end_user_reference: Option<String>,
        /// A human label (at most 256 characters); surfaced in webhook payloads.
        label: Option<String>,
        /// The group to issue the eSIM into (its uuid); `None` for a standalone eSIM.
        group_id: Option<String>,
    },
    /// `GET /esim/list`: a page of the account's eSIMs, in provisioning order.
    ListEsims {
        /// Only eSIMs in this status (`pending`, `active`, `suspended`, `terminated`).
        status: Option<String>,
        /// Page size.
        limit: Option<u64>,
        /// Position of the first eSIM of the page.
        offset: Option<u64>,
    },
    /// `GET /esim/{iccid}`: one eSIM, with its live `euicc_state`.
    GetEsim {
        /// The eSIM.
        iccid: String,
    },
    /// `GET /esim/{iccid}/qr-code` (beyond the spec, decision 130): the eSIM's QR code
    /// again, as the provisioning answer showed it.
    EsimQrCode {
        /// The eSIM.
        iccid: String,
    },
    /// `POST /esim/{iccid}/enable`: switches data on (402 when the reseller balance is
    /// not above 0).
    Enable {
        /// The eSIM.
        iccid: String,
    },
    /// `POST /esim/{iccid}/disable`: switches data off; the eSIM is `suspended`.
    Disable {
        /// The eSIM.
        iccid: String,
    },
    /// `POST /esim/{iccid}/terminate`: ends the eSIM for good.
    Terminate {
        /// The eSIM.
        iccid: String,
    },
    /// `POST /esim/{iccid}/throttle`: sets the speed limit.
    Throttle {
        /// The eSIM.
        iccid: String,
        /// `NO_LIMIT` or `SPEED_<n>_KBPS` (see [`crate::schema::ThrottleSpeed`]);
        /// anything else answers 400 VALIDATION_ERROR.
        speed: String,
    },
    /// `POST /esim/{iccid}/fund`: moves USD from the reseller balance to the eSIM's
    /// wallet (which then pauses usage reporting for about 15 minutes).
    Fund {
        /// The eSIM.
        iccid: String,
        /// USD taken from the reseller balance: 0.01 to 10000, at most 2 decimals.
        amount: Decimal,
    },
    /// `POST /esim/{iccid}/defund`: returns the wallet's displayed balance to the
    /// reseller balance; data pauses at once and the return settles in about 15 minutes.
    Defund {
        /// The eSIM.
        iccid: String,
    },
    /// `GET /groups`: the account's groups, newest first.
    ListGroups,
    /// `POST /groups`: a new group with a 0 balance.
    CreateGroup {
        /// Unique on the account (compared after trimming), 1 to 100 characters.
        name: String,
        /// USD below which `group.balance_low` fires; `None` for the default, 10.
        low_balance_threshold_usd: Option<Decimal>,
        /// USD suggested in `group.balance_low` (`suggested_amount_usd`) and charged to
        /// the card by auto-refill when the account cannot cover it; `None` for 25.
        refill_amount_usd: Option<Decimal>,
    },
    /// `GET /groups/{id}`: one group.
    GetGroup {
        /// The group's uuid.
        group_id: String,
    },
    /// `PATCH /groups/{id}`: changes the given fields (at least one); `None` keeps a
    /// field. Renaming is how a group is reused, since groups cannot be deleted.
    UpdateGroup {
        /// The group's uuid.
        group_id: String,
        /// New name, unique on the account.
        name: Option<String>,
        /// New low-balance threshold, USD.
        low_balance_threshold_usd: Option<Decimal>,
        /// New refill amount, USD.
        refill_amount_usd: Option<Decimal>,
    },
    /// `POST /groups/{id}/fund`: moves USD from the reseller balance to the group's
    /// balance (a transfer, never an auto-refill trigger).
    FundGroup {
        /// The group's uuid.
        group_id: String,
        /// USD taken from the reseller balance: 0.01 to 10000, at most 2 decimals
        /// (decision 4).
        amount: Decimal,
    },
    /// `POST /groups/{id}/defund`: returns the group's displayed balance; every member's
    /// data pauses until the return settles.
    DefundGroup {
        /// The group's uuid.
        group_id: String,
    },
    /// `GET /groups/{id}/esims`: a page of the group's members.
    ListGroupEsims {
        /// The group's uuid.
        group_id: String,
        /// Page size.
        limit: Option<u64>,
        /// Position of the first member of the page.
        offset: Option<u64>,
    },
    /// `POST /groups/{id}/esims`: moves an eSIM into the group, at once or (with a
    /// wallet balance to return first) as a pending move answered 202.
    AddGroupEsim {
        /// The group's uuid.
        group_id: String,
        /// The eSIM to move in.
        iccid: String,
    },
    /// `DELETE /groups/{id}/esims/{iccid}`: makes a member a standalone eSIM again.
    RemoveGroupEsim {
        /// The group's uuid.
        group_id: String,
        /// The member to remove.
        iccid: String,
    },
    /// `GET /wallet/balance`: the reseller balance and its lifetime totals.
    WalletBalance,
    /// `GET /rates`: the data rates, optionally filtered.
    Rates {
        /// Only this country: ISO2 code, slug or name.
        country: Option<String>,
        /// Only this continent.
        continent: Option<String>,
    },
    /// `GET /account`: the reseller account.
    Account,
    /// `GET /webhooks`: the account's webhooks and the subscribable event names.
    ListWebhooks,
    /// `POST /webhooks/{id}/rotate-secret`: replaces the webhook's signing secret; the
    /// answer shows the new one once.
    RotateWebhookSecret {
        /// The webhook (`wh_...`).
        webhook_id: String,
        /// Filled by the shell (sealed), like a creation's.
        signing_secret: crate::secret::SealedSecret,
    },
    /// `GET /events`: a page of the account's events of the last 30 days, newest first.
    ListEvents {
        /// Which events: by name, time, eSIM or group (all of them when empty).
        filter: crate::event_log::EventFilter,
        /// Page size.
        limit: Option<u64>,
        /// Position of the first event of the page.
        offset: Option<u64>,
    },
    /// `GET /events/{id}`: one kept event, as it was delivered.
    GetEvent {
        /// The event (`evt_...`).
        event_id: String,
    },
    /// `POST /events/{id}/resend`: the kept envelope to one webhook, at once (decision 118).
    ResendEvent {
        /// The event (`evt_...`).
        event_id: String,
        /// The webhook to send it to (`wh_...`).
        webhook_id: String,
    },
    /// `GET /webhooks/{id}/deliveries`: its delivery log, newest first.
    ListDeliveries {
        /// The webhook (`wh_...`).
        webhook_id: String,
        /// Only the attempts of this event.
        event_id: Option<String>,
        /// Page size.
        limit: Option<u64>,
        /// Position of the first attempt of the page.
        offset: Option<u64>,
    },
    /// `POST /webhooks`: registers an endpoint (at most 5 per account).
    CreateWebhook {
        /// Absolute `https://` URL of a public host (`http://` only with
        /// `--allow-insecure-webhooks`).
        url: String,
        /// Event names to receive, or `["*"]` for all current and future events.
        events: Vec<String>,
        /// The new signing secret, drawn and sealed by the shell (not part of what an
        /// `Idempotency-Key` compares: a retry draws a fresh one that is never used).
        signing_secret: SealedSecret,
    },
    /// `GET /webhooks/{id}`: one webhook.
    GetWebhook {
        /// The webhook (`wh_...`).
        webhook_id: String,
    },
    /// `PUT /webhooks/{id}`: changes the given fields; `None` keeps a field.
    UpdateWebhook {
        /// The webhook (`wh_...`).
        webhook_id: String,
        /// New URL, checked like a creation's.
        url: Option<String>,
        /// New subscriptions (replacing the old list).
        events: Option<Vec<String>>,
        /// `true` turns deliveries back on and resets `failure_count` to 0.
        active: Option<bool>,
    },
    /// `DELETE /webhooks/{id}`: removes the webhook: no delivery is made to it any
    /// more and its delivery log is gone.
    DeleteWebhook {
        /// The webhook (`wh_...`).
        webhook_id: String,
    },
    /// `POST /webhooks/{id}/test`: sends a `test` event (no subscription needed) and
    /// answers with how the receiver replied.
    TestWebhook {
        /// The webhook (`wh_...`).
        webhook_id: String,
    },
    /// `GET /keys` (beyond the spec, decision 128): the account's active API keys, by
    /// id, prefix and creation time; never a key.
    ListApiKeys,
    /// `POST /keys` (decision 128): one more API key; the answer shows it once.
    CreateApiKey {
        /// The digest of the new key, drawn by the shell (not part of what an
        /// `Idempotency-Key` compares: a retry draws a fresh one that is never used).
        api_key_digest: KeyDigest,
        /// The key's first 12 characters (`rsk_` and 8 hex digits).
        api_key_prefix: String,
    },
    /// `DELETE /keys/{id}` (decision 128): the key stops authenticating at once.
    RevokeApiKey {
        /// The key's id (`key_...`), as the key list shows it.
        key_id: String,
    },
    /// `GET /auto-refill` (decision 129): the account's auto-refill settings.
    GetAutoRefill,
    /// `PUT /auto-refill` (decision 129): a partial update (at least one field); the
    /// saved card stays as it is.
    UpdateAutoRefill {
        /// Whether the saved card is charged when real spend leaves the balance low.
        enabled: Option<bool>,
        /// USD charged to the card per refill: 10 to 1000000, at most 2 decimals.
        amount_usd: Option<Decimal>,
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
                | EsimQrCode { .. }
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
                | ListApiKeys
                | GetAutoRefill
        )
    }

    /// A short stable name (logs, simulation statistics).
    pub fn kind(&self) -> &'static str {
        use ResellerOp::*;
        match self {
            Provision { .. } => "provision",
            ListEsims { .. } => "list_esims",
            GetEsim { .. } => "get_esim",
            EsimQrCode { .. } => "esim_qr_code",
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
            ListApiKeys => "list_api_keys",
            CreateApiKey { .. } => "create_api_key",
            RevokeApiKey { .. } => "revoke_api_key",
            GetAutoRefill => "get_auto_refill",
            UpdateAutoRefill { .. } => "update_auto_refill",
        }
    }
}

/// The operator's commands (`/admin/v1`, bearer admin token): accounts, their keys,
/// money and limits, and the stock of eSIM profiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AdminOp {
    /// `POST /admin/v1/accounts`: a new reseller account with its first API key.
    CreateAccount {
        /// Where the operator reaches the reseller.
        contact_email: String,
        /// Shown in the account record; `None` when not given.
        company_name: Option<String>,
        /// The digest of the account's first key, drawn by the shell (the key itself is
        /// shown once, in the answer, and never stored).
        api_key_digest: KeyDigest,
        /// The key's first 12 characters (`rsk_` and 8 hex digits), how the reseller
        /// tells keys apart in the key list (empty in journals written before it).
        #[serde(default)]
        api_key_prefix: String,
    },
    /// `POST /admin/v1/accounts/{account_id}/topups`: credits the reseller balance (a
    /// manual top-up, as a bank transfer would).
    TopUp {
        /// The account (`acc_...`).
        account_id: String,
        /// USD credited, at most 2 decimals.
        amount_usd: Decimal,
    },
    /// `POST /admin/v1/accounts/{account_id}/keys`: one more API key for the account.
    CreateKey {
        /// The account (`acc_...`).
        account_id: String,
        /// The digest of the new key, drawn by the shell.
        api_key_digest: KeyDigest,
        /// The key's first 12 characters (empty in journals written before it).
        #[serde(default)]
        api_key_prefix: String,
    },
    /// `DELETE /admin/v1/keys/{api_key}`: the key stops authenticating at once.
    RevokeKey {
        /// The digest of the key to revoke (the transport hashes the key in the path).
        api_key_digest: KeyDigest,
    },
    /// `PUT /admin/v1/accounts/{account_id}/freeze`: freezes or unfreezes the account
    /// (decision 20: data stops, spending calls answer 403, money can still come back).
    Freeze {
        /// The account (`acc_...`).
        account_id: String,
        /// `true` freezes, `false` unfreezes.
        frozen: bool,
    },
    /// `PUT /admin/v1/accounts/{account_id}/auto-refill`. A partial update: absent
    /// fields keep their value (at least one must be given).
    SetAutoRefill {
        /// The account (`acc_...`).
        account_id: String,
        /// Whether the saved card is charged when the balance runs low.
        enabled: Option<bool>,
        /// USD charged to the card per refill.
        amount_usd: Option<Decimal>,
        /// How the simulated saved card answers charges.
        card: Option<CardBehavior>,
    },
    /// `PUT /admin/v1/accounts/{account_id}/limits`: raises (or lowers) the account's
    /// group limits; absent fields keep their value.
    SetLimits {
        /// The account (`acc_...`).
        account_id: String,
        /// Most groups the account may create (default 10).
        max_groups: Option<u32>,
        /// Most eSIMs in one group (default 500).
        max_group_size: Option<u32>,
    },
    /// `PUT /admin/v1/inventory`: how many eSIM profiles are left to provision; at 0,
    /// provisioning answers 503 NO_ESIMS_AVAILABLE.
    SetInventory {
        /// Profiles available from now on.
        available: u64,
    },
    /// A block of eSIM profiles a sharded shell took from the node's global pool
    /// (decision 185; no HTTP route): added to this shard's stock. Journaled as a command
    /// of the shard, so a replay rebuilds the stock without reading the pool.
    GrantInventory {
        /// Profiles taken from the pool (0 is a no-op, still journaled).
        count: u64,
    },
    /// The `--allow-insecure-webhooks` setting of a start, when it differs from the
    /// state's (no HTTP route): journaled, so a replay validates each webhook URL under
    /// the setting it was registered with.
    SetInsecureWebhooks {
        /// `true` when `http://` and private-host webhook URLs are accepted.
        allowed: bool,
    },
}

/// The simulated world (`/sandbox/v1`, bearer admin token): what devices and the
/// upstream network do, for integrators to drive their tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SandboxOp {
    /// `POST /sandbox/v1/esims/{iccid}/install`: the device installs and boots the
    /// profile; the first install makes a `pending` eSIM `active` (`esim.activated`).
    Install {
        /// The eSIM.
        iccid: String,
    },
    /// `POST /sandbox/v1/esims/{iccid}/usage`: the device uses data, charged live to its
    /// wallet (or its group's) and reported on the next sync cycle.
    Usage {
        /// The eSIM.
        iccid: String,
        /// Megabytes used (1 GB = 1000 MB); the wallet may stop it short.
        mb: Decimal,
        /// Where: a country of the rate table (ISO2 code, slug or name).
        country: String,
        /// The network used; `None` for the country's cheapest.
        operator: Option<String>,
    },
    /// `PUT /sandbox/v1/faults`: switches upstream faults on or off; `None` keeps one.
    SetFaults {
        /// Defunds answer 502 UPSTREAM_ERROR with nothing moved (data cannot be paused).
        upstream_pause_fails: Option<bool>,
        /// Live `euicc_state` reads fail, so eSIM details show the cached state.
        network_read_fails: Option<bool>,
    },
}
