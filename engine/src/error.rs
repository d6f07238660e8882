//! Business failures as values: every error code of the spec, and the ones we added.

use serde::Serialize;

/// A machine code of the error body, with its HTTP status and human text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// A field is missing, of the wrong type or out of range (400); the message names it.
    ValidationError,
    /// The eSIM is terminated and never changes again (400).
    EsimAlreadyTerminated,
    /// A defund of a wallet that shows $0 (400, decision 10).
    NoBalanceToReturn,
    /// A defund before the first fund: no upstream wallet yet (400, decision 10).
    WalletNotReady,
    /// Unknown or revoked API key (401).
    InvalidApiKey,
    /// The reseller balance cannot pay for it (402).
    InsufficientBalance,
    /// No eSIM with that ICCID on this account (404): another account's is just as unknown.
    EsimNotFound,
    /// No such resource (404).
    NotFound,
    /// No group with that id on this account (404).
    GroupNotFound,
    /// Group names are unique per account (409, decision 26).
    GroupNameTaken,
    /// A group defund is on its way (409).
    GroupDefundPending,
    /// A second defund while one is on its way (409).
    DefundAlreadyPending,
    /// Adding an eSIM that is already a group member (409).
    EsimAlreadyInGroup,
    /// The eSIM's move into a group is on its way (409, decision 11).
    MovePending,
    /// Over the rate limit of the key or of its account (429, with `Retry-After`).
    RateLimited,
    /// The account has its maximum of groups (429).
    GroupLimitReached,
    /// The group has its maximum of eSIMs, pending moves included (429).
    GroupFull,
    /// The upstream network refused (502): nothing moved, worth a retry.
    UpstreamError,
    /// The eSIM inventory is empty (503).
    NoEsimsAvailable,
    // Beyond the spec's table (recorded in docs/decisions.md).
    /// Fund on a group member (the spec names the code, not the status: 409).
    EsimInGroup,
    /// Fund or enable while the eSIM's balance return is in progress (409).
    DefundPending,
    /// Idempotency-Key reused with a different request (409).
    IdempotencyKeyReused,
    /// The operator froze the account: no new spend or data (403).
    AccountSuspended,
    /// Too many webhooks on the account (429, like the other count limits).
    WebhookLimitReached,
    /// Too many active API keys on the account (429, decision 128).
    ApiKeyLimitReached,
    /// Revoking the account's last active API key (409, decision 128).
    LastApiKey,
    /// Admin and sandbox APIs: bad admin token (401).
    InvalidAdminToken,
    /// Admin API: unknown account id (404).
    AccountNotFound,
    /// Sandbox: the clock is not virtual (409).
    ClockNotVirtual,
    /// Durability: the journal cannot take a change now (503).
    ServiceUnavailable,
    /// Routing: unknown path (404), wrong method (405), body too large (413).
    RouteNotFound,
    /// Routing: a known path with another method (405).
    MethodNotAllowed,
    /// Routing: a body over the limit (413).
    PayloadTooLarge,
    /// Transport: the request body did not arrive in time (408).
    RequestTimeout,
}

impl ErrorCode {
    /// The HTTP status of the code (decision 45).
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            ValidationError | EsimAlreadyTerminated | NoBalanceToReturn | WalletNotReady => 400,
            InvalidApiKey | InvalidAdminToken => 401,
            InsufficientBalance => 402,
            AccountSuspended => 403,
            EsimNotFound | NotFound | GroupNotFound | AccountNotFound | RouteNotFound => 404,
            MethodNotAllowed => 405,
            GroupNameTaken | GroupDefundPending | DefundAlreadyPending | EsimAlreadyInGroup | MovePending
            | EsimInGroup | DefundPending | IdempotencyKeyReused | ClockNotVirtual | LastApiKey => 409,
            RequestTimeout => 408,
            PayloadTooLarge => 413,
            RateLimited | GroupLimitReached | GroupFull | WebhookLimitReached | ApiKeyLimitReached => 429,
            UpstreamError => 502,
            NoEsimsAvailable | ServiceUnavailable => 503,
        }
    }

    /// The `code` string of the error body.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            ValidationError => "VALIDATION_ERROR",
            EsimAlreadyTerminated => "ESIM_ALREADY_TERMINATED",
            NoBalanceToReturn => "NO_BALANCE_TO_RETURN",
            WalletNotReady => "WALLET_NOT_READY",
            InvalidApiKey => "INVALID_API_KEY",
            InsufficientBalance => "INSUFFICIENT_BALANCE",
            EsimNotFound => "ESIM_NOT_FOUND",
            NotFound => "NOT_FOUND",
            GroupNotFound => "GROUP_NOT_FOUND",
            GroupNameTaken => "GROUP_NAME_TAKEN",
            GroupDefundPending => "GROUP_DEFUND_PENDING",
            DefundAlreadyPending => "DEFUND_ALREADY_PENDING",
            EsimAlreadyInGroup => "ESIM_ALREADY_IN_GROUP",
            MovePending => "MOVE_PENDING",
            RateLimited => "RATE_LIMITED",
            GroupLimitReached => "GROUP_LIMIT_REACHED",
            GroupFull => "GROUP_FULL",
            UpstreamError => "UPSTREAM_ERROR",
            NoEsimsAvailable => "NO_ESIMS_AVAILABLE",
            EsimInGroup => "ESIM_IN_GROUP",
            DefundPending => "DEFUND_PENDING",
            IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
            AccountSuspended => "ACCOUNT_SUSPENDED",
            WebhookLimitReached => "WEBHOOK_LIMIT_REACHED",
            ApiKeyLimitReached => "API_KEY_LIMIT_REACHED",
            LastApiKey => "LAST_API_KEY",
            InvalidAdminToken => "INVALID_ADMIN_TOKEN",
            AccountNotFound => "ACCOUNT_NOT_FOUND",
            ClockNotVirtual => "CLOCK_NOT_VIRTUAL",
            ServiceUnavailable => "SERVICE_UNAVAILABLE",
            RouteNotFound => "ROUTE_NOT_FOUND",
            MethodNotAllowed => "METHOD_NOT_ALLOWED",
            PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            RequestTimeout => "REQUEST_TIMEOUT",
        }
    }

    /// The human-readable `error` text of the body.
    pub fn title(self) -> &'static str {
        use ErrorCode::*;
        match self {
            ValidationError => "Invalid request",
            EsimAlreadyTerminated => "eSIM already terminated",
            NoBalanceToReturn => "No balance to return",
            WalletNotReady => "Wallet not ready",
            InvalidApiKey => "Invalid API key",
            InsufficientBalance => "Insufficient balance",
            EsimNotFound => "eSIM not found",
            NotFound => "Not found",
            GroupNotFound => "Group not found",
            GroupNameTaken => "Group name already taken",
            GroupDefundPending => "Group defund pending",
            DefundAlreadyPending => "Defund already pending",
            EsimAlreadyInGroup => "eSIM already in group",
            MovePending => "Move pending",
            RateLimited => "Rate limit exceeded",
            GroupLimitReached => "Group limit reached",
            GroupFull => "Group full",
            UpstreamError => "Upstream error",
            NoEsimsAvailable => "No eSIMs available",
            EsimInGroup => "eSIM is in a group",
            DefundPending => "Balance return in progress",
            IdempotencyKeyReused => "Idempotency key reused",
            AccountSuspended => "Account suspended",
            WebhookLimitReached => "Webhook limit reached",
            ApiKeyLimitReached => "API key limit reached",
            LastApiKey => "Last API key",
            InvalidAdminToken => "Invalid admin token",
            AccountNotFound => "Account not found",
            ClockNotVirtual => "Clock is not virtual",
            ServiceUnavailable => "Service unavailable",
            RouteNotFound => "Not found",
            MethodNotAllowed => "Method not allowed",
            PayloadTooLarge => "Payload too large",
            RequestTimeout => "Request timeout",
        }
    }

    /// Every code, for the tests that each is produced by some command.
    pub const ALL: [ErrorCode; 34] = {
        use ErrorCode::*;
        [
            ValidationError,
            EsimAlreadyTerminated,
            NoBalanceToReturn,
            WalletNotReady,
            InvalidApiKey,
            InsufficientBalance,
            EsimNotFound,
            NotFound,
            GroupNotFound,
            GroupNameTaken,
            GroupDefundPending,
            DefundAlreadyPending,
            EsimAlreadyInGroup,
            MovePending,
            RateLimited,
            GroupLimitReached,
            GroupFull,
            UpstreamError,
            NoEsimsAvailable,
            EsimInGroup,
            DefundPending,
            IdempotencyKeyReused,
            AccountSuspended,
            WebhookLimitReached,
            ApiKeyLimitReached,
            LastApiKey,
            InvalidAdminToken,
            AccountNotFound,
            ClockNotVirtual,
            ServiceUnavailable,
            RouteNotFound,
            MethodNotAllowed,
            PayloadTooLarge,
            RequestTimeout,
        ]
    };
}

/// An error response: the spec's error body plus what the transport needs for headers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct ApiError {
    /// The machine code of the error body.
    pub code: ErrorCode,
    /// The human text of the error body: says what to change.
    pub message: String,
    /// Seconds for a Retry-After header (429 RATE_LIMITED).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), retry_after_secs: None }
    }
    /// A 400 VALIDATION_ERROR: the most common refusal, so it has a short form.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ValidationError, message)
    }
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.code.http_status()
    }
}

impl Serialize for ApiError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut body = serializer.serialize_struct("Error", 3)?;
        body.serialize_field("error", self.code.title())?;
        body.serialize_field("code", self.code.as_str())?;
        body.serialize_field("message", &self.message)?;
        body.end()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status(), self.code.as_str(), self.message)
    }
}
