//! The service core: the engine, the clock mode and the API layer, with no IO. The
//! hyper server drives it from one owner task; tests and the simulation drive it in
//! memory. It tells the driver what to journal, so durability slots in around it.

use crate::admission::{Admission, Admitted, KeyMemo};
use crate::api::{self, json_response, respond, Routed};
use crate::routes::{self, Endpoint, Match};
use crate::secrets::Secrets;
use bytes::Bytes;
use esim_engine::{
    AdminOp, ApiError, Command, DeliveryResult, Effect, Engine, ErrorCode, Event, KeyDigest, Millis, Reply, ResellerOp,
    Response,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How service time moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Service time follows the wall clock (possibly sped up): the driver passes it in.
    Wall,
    /// Service time moves only through `POST /sandbox/v1/clock/advance`.
    Virtual,
}

/// One record of the journal: replaying them in order through the engine rebuilds
/// the exact state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JournalEntry {
    /// A state-changing command at its service time.
    Command { at: Millis, command: Command },
    /// Time moved and timers fired.
    Tick { at: Millis },
}

impl JournalEntry {
    /// Applies the entry to an engine (outputs dropped).
    pub fn replay(self, engine: &mut Engine) {
        match self {
            JournalEntry::Command { at, command } => {
                let _ = engine.handle(at, command);
            }
            JournalEntry::Tick { at } => engine.handle_timeout(at),
        }
        while engine.poll_effect().is_some() {}
        while engine.poll_event().is_some() {}
    }
}

/// The `Retry-After` (seconds) of the 503s of a stalled or refusing journal (decision 221).
pub const JOURNAL_RETRY_AFTER_S: u64 = 1;

/// What a request came to.
#[derive(Debug)]
pub enum Outcome {
    Respond(http::Response<Bytes>),
    /// The webhook test endpoint: answer once this delivery's outcome is known, with
    /// [`Service::delivery_outcome`]'s response.
    AwaitDelivery(u64),
}

pub struct Service {
    engine: Engine,
    admin_token: String,
    clock: ClockMode,
    /// The latest service time: a virtual clock's position (moved only by
    /// `clock/advance`), or the latest time a wall clock showed (never shown going back,
    /// even when the wall clock does).
    clock_now: Millis,
    /// Entries to journal, drained by the driver after every call.
    journal: Vec<JournalEntry>,
    /// Draw QR codes in provisioning responses (off only in the simulation).
    render_qr: bool,
    /// Leave QR codes undrawn, marked with [`DeferredQr`], for the caller to draw with
    /// [`draw_deferred_qr`] (the server: its connection tasks draw them).
    defer_qr: bool,
    /// Credentials and rate windows, shared with the connection tasks of a server.
    admission: Arc<Admission>,
    /// New keys and signing secrets, and the key that seals secrets.
    secrets: Secrets,
    /// Why changes are refused for now (the journal cannot be written), if they are:
    /// reads are still answered, timers wait.
    refusal: Option<String>,
}

/// The text of a QR code an answer still has to draw ([`Service::set_defer_qr`]).
#[derive(Clone, Debug)]
pub struct DeferredQr(String);

/// Draws the QR code an answer left undrawn (in the connection task, off the task that
/// applies commands); any other answer is left as it is.
pub fn draw_deferred_qr(response: &mut http::Response<Bytes>) {
    let Some(DeferredQr(text)) = response.extensions_mut().remove::<DeferredQr>() else { return };
    match esim_engine::draw_qr(response.body(), &text) {
        Ok(body) => *response.body_mut() = Bytes::from(body),
        // Cannot happen for an LPA string; the answer keeps its empty data URL.
        Err(why) => tracing::error!(%why, "a QR code could not be drawn"),
    }
}

/// A secret the service drew for a command, to show once in its answer.
struct Issued {
    shown: String,
}

/// Characters of a new API key that the engine keeps to tell keys apart in the key list
/// (`rsk_` and 8 of its 64 hex digits: 32 of 256 random bits, decision 128).
const API_KEY_PREFIX_CHARS: usize = 12;

/// The part of a new key that the key list shows.
fn api_key_prefix(api_key: &str) -> String {
    api_key[..API_KEY_PREFIX_CHARS].to_string()
}

impl Service {
    pub fn new(engine: Engine, admin_token: String, clock: ClockMode, secrets: Secrets) -> Service {
        let clock_now = engine.now();
        // The OpenAPI documents are built once per process, here: a document that
        // cannot be built stops the start, never a request.
        crate::openapi_operator::served(crate::routes::Api::Reseller);
        Service {
            admission: Arc::new(Admission::new(&engine)),
            secrets,
            refusal: None,
            engine,
            admin_token,
            clock,
            clock_now,
            journal: Vec::new(),
            render_qr: true,
            defer_qr: false,
        }
    }

    /// The server's connection tasks draw QR codes ([`draw_deferred_qr`]), so the task
    /// applying commands never spends a QR drawing's time (issue 15).
    pub fn set_defer_qr(&mut self, defer: bool) {
        self.defer_qr = defer;
    }

    /// The simulation renders millions of responses and never looks at QR pictures:
    /// it turns them off (the field then holds an empty PNG data URL).
    pub fn set_render_qr(&mut self, render: bool) {
        self.render_qr = render;
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Continues from another engine state (the durable one after a failed append).
    pub fn replace_engine(&mut self, engine: Engine) {
        self.clock_now = self.clock_now.max(engine.now());
        self.engine = engine;
        self.journal.clear();
        self.admission.reload_keys(&self.engine);
    }

    /// What any restart loses, whether the engine was rebuilt or kept: the rate windows
    /// (soft state) start empty, and deliveries in flight are handed out again.
    pub fn restart(&mut self) {
        self.admission.clear_windows();
        self.engine.restart();
    }

    /// Refuses changes (503, reads still answered, timers held) while `reason` is given:
    /// the driver's journal cannot take writes.
    pub fn refuse_changes(&mut self, reason: Option<String>) {
        self.refusal = reason;
    }

    /// Why changes are refused, when they are.
    pub fn refusing_changes(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    fn refused(&self) -> Option<ApiError> {
        self.refusal.as_ref().map(|why| {
            let mut error = ApiError::new(ErrorCode::ServiceUnavailable, format!("changes are refused for now: {why}"));
            error.retry_after_secs = Some(JOURNAL_RETRY_AFTER_S);
            error
        })
    }

    /// The admission checks, for a server's connection tasks (before a body is read).
    pub fn admission(&self) -> Arc<Admission> {
        self.admission.clone()
    }

    /// The shell's secrets (the sender opens signing secrets with its key).
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The admin token of the admin and sandbox APIs.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The latest service time shown (a server's connection tasks count rate windows
    /// in it).
    pub fn shown_now(&self) -> Millis {
        self.clock_now
    }

    /// Applies a command as a request would (journaled), e.g. the demo account; a new
    /// key or secret is drawn here and shown in the answer.
    pub fn apply_command(&mut self, now: Millis, command: Command) -> Response {
        self.apply(now, command)
    }

    pub fn clock(&self) -> ClockMode {
        self.clock
    }

    /// Service time of a request: the wall time given, or the virtual clock.
    pub fn now(&self, wall_now: Millis) -> Millis {
        match self.clock {
            ClockMode::Wall => wall_now.max(self.clock_now).max(self.engine.now()),
            ClockMode::Virtual => self.clock_now,
        }
    }

    /// Journal entries produced since the last drain (the driver makes them durable
    /// before it sends the responses of this call).
    pub fn drain_journal(&mut self) -> Vec<JournalEntry> {
        // The next group of entries is likely as large as this one: room for it at once.
        let room = self.journal.len();
        std::mem::replace(&mut self.journal, Vec::with_capacity(room))
    }

    /// Effects (webhook deliveries) to carry out.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.engine.poll_effect()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.engine.poll_event()
    }

    /// Fires due timers at `now`, journaling a tick when any fired.
    fn advance(&mut self, now: Millis) {
        if self.refusal.is_some() {
            // Firing timers changes the state, which cannot be journaled now.
            return;
        }
        if self.engine.poll_timeout().is_some_and(|deadline| deadline <= now) {
            self.engine.handle_timeout(now);
            self.journal.push(JournalEntry::Tick { at: now });
        }
    }

    /// The timer driver of a wall clock: fire what is due at `wall_now`.
    pub fn tick(&mut self, wall_now: Millis) {
        if self.clock == ClockMode::Wall {
            let now = self.now(wall_now);
            self.advance(now);
        }
    }

    /// Next deadline in service time (a wall-clock driver sleeps until then).
    pub fn poll_timeout(&self) -> Option<Millis> {
        self.engine.poll_timeout()
    }

    /// Draws the secret a command needs (a new API key, a new signing secret) from the
    /// entropy source, and puts into the command only what the engine may hold: the
    /// key's digest, the secret sealed.
    fn issue_secrets(&mut self, command: &mut Command) -> Option<Issued> {
        let new_key = |secrets: &mut Secrets, slot: &mut KeyDigest, prefix: &mut String| {
            let issued = secrets.new_api_key();
            *slot = issued.digest;
            *prefix = api_key_prefix(&issued.api_key);
            Issued { shown: issued.api_key }
        };
        match command {
            Command::Admin(AdminOp::CreateAccount { api_key_digest, api_key_prefix, .. })
            | Command::Admin(AdminOp::CreateKey { api_key_digest, api_key_prefix, .. }) => {
                Some(new_key(&mut self.secrets, api_key_digest, api_key_prefix))
            }
            Command::Reseller(request) => match &mut request.op {
                ResellerOp::CreateApiKey { api_key_digest, api_key_prefix } => {
                    Some(new_key(&mut self.secrets, api_key_digest, api_key_prefix))
                }
                ResellerOp::CreateWebhook { signing_secret, .. }
                | ResellerOp::RotateWebhookSecret { signing_secret, .. } => {
                    let issued = self.secrets.new_signing_secret();
                    *signing_secret = issued.sealed;
                    Some(Issued { shown: issued.secret })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// The key a command adds or revokes (the admission's copy follows the engine); a
    /// revocation by id is looked up before it is applied.
    fn key_changed(&self, command: &Command) -> Option<KeyDigest> {
        match command {
            Command::Admin(AdminOp::CreateAccount { api_key_digest, .. })
            | Command::Admin(AdminOp::CreateKey { api_key_digest, .. })
            | Command::Admin(AdminOp::RevokeKey { api_key_digest }) => Some(*api_key_digest),
            Command::Reseller(request) => match &request.op {
                ResellerOp::CreateApiKey { api_key_digest, .. } => Some(*api_key_digest),
                ResellerOp::RevokeApiKey { key_id } => self.engine.api_key_digest(key_id),
                _ => None,
            },
            _ => None,
        }
    }

    fn apply(&mut self, now: Millis, mut command: Command) -> Response {
        self.advance(now);
        if let Command::Reseller(request) = &command {
            if request.op.is_read() {
                // Nothing to journal. (While changes are refused, timers wait, so the
                // engine must not fire them either: it reads at the time it last moved to.)
                let at = if self.refusal.is_some() { self.engine.now() } else { now };
                return self.engine.handle(at, command);
            }
        }
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let issued = self.issue_secrets(&mut command);
        let key_changed = self.key_changed(&command);
        // The engine answers from the journaled command itself (no copy of it).
        self.journal.push(JournalEntry::Command { at: now, command });
        let Some(JournalEntry::Command { command, .. }) = self.journal.last() else {
            unreachable!("the entry was just pushed")
        };
        let mut response = self.engine.handle_ref(now, command);
        if let Some(digest) = key_changed {
            self.admission.refresh_key(&self.engine, &digest);
        }
        if let Ok(reply) = &mut response {
            self.show_secret(reply, issued);
        }
        response
    }

    /// Shows the secret of an answer: the one just drawn, or, for a replayed webhook
    /// creation, the original one opened from its sealed form.
    fn show_secret(&self, reply: &mut Reply, issued: Option<Issued>) {
        match reply {
            Reply::Replayed { signing_secret: Some(sealed), .. } => match self.secrets.open(sealed) {
                Ok(secret) => reply.show_secret(&secret),
                Err(why) => tracing::error!(%why, "a replayed webhook creation's secret cannot be opened"),
            },
            Reply::AccountCreated(_)
            | Reply::KeyCreated(_)
            | Reply::ApiKeyCreated(_)
            | Reply::WebhookCreated(_)
            | Reply::WebhookSecretRotated(_) => {
                let issued = issued.expect("a secret was drawn for every command that shows one");
                reply.show_secret(&issued.shown);
            }
            _ => {}
        }
    }

    /// Handles one request: credentials and the rate limit first ([`Admission`]), then
    /// the request itself.
    pub fn handle(&mut self, wall_now: Millis, request: &http::Request<Bytes>) -> Outcome {
        let now = self.now(wall_now);
        let path = request.uri().path();
        // Matched once, for the credential check and for routing.
        let matched = routes::find(request.method().as_str(), path);
        let memo = KeyMemo::default();
        let admitted = self.admission.screen_matched(&matched, path, request.headers(), &self.admin_token, &memo, now);
        let found = match &matched {
            Match::Found(endpoint, params) => Some((*endpoint, params.as_slice())),
            Match::WrongMethod(_) | Match::NotFound => None,
        };
        match admitted {
            Err(refused) => Outcome::Respond(api::error_response(refused)),
            Ok(Admitted::Reseller(digest)) => self.handle_found(wall_now, request, Some(digest), found),
            Ok(_) => self.handle_found(wall_now, request, None, found),
        }
    }

    /// Handles a request whose credentials a server's connection task checked already
    /// (with [`Admission::screen`], before reading its body); a reseller request comes
    /// with its key's digest.
    pub fn handle_admitted(
        &mut self,
        wall_now: Millis,
        request: &http::Request<Bytes>,
        key_digest: Option<KeyDigest>,
    ) -> Outcome {
        self.handle_found(wall_now, request, key_digest, None)
    }

    /// [`Service::handle_admitted`] of a request whose route was found already.
    fn handle_found(
        &mut self,
        wall_now: Millis,
        request: &http::Request<Bytes>,
        key_digest: Option<KeyDigest>,
        found: Option<(Endpoint, &[String])>,
    ) -> Outcome {
        let now = self.now(wall_now);
        self.clock_now = now;
        let response = match api::route_matched(request, &self.admin_token, key_digest, found) {
            Routed::Reject(error) => api::error_response(error),
            Routed::OpenApi(api) => json_response(200, crate::openapi_operator::served(api)),
            Routed::ClockRead => self.clock_body(now),
            Routed::StateDigest => {
                self.advance(now);
                let writes = match &self.refusal {
                    None => "accepted".to_string(),
                    Some(why) => format!("refused: {why}"),
                };
                // The stock the operator set, less what was provisioned since (decision 321):
                // the dashboard shows it before anyone changes it.
                let body = serde_json::json!({
                    "state_digest": self.engine.state_digest(),
                    "now": now.to_rfc3339(),
                    "writes": writes,
                    "inventory": { "available": self.engine.inventory() },
                });
                json_response(200, serde_json::to_vec(&body).expect("json"))
            }
            Routed::Pending { limit } => {
                self.advance(now);
                json_response(200, serde_json::to_vec(&self.engine.pending_timers(limit)).expect("json"))
            }
            Routed::ClockAdvance { .. } if self.refusal.is_some() => {
                api::error_response(self.refused().expect("refusing"))
            }
            Routed::ClockAdvance { ms } => {
                if self.clock != ClockMode::Virtual {
                    api::error_response(ApiError::new(
                        ErrorCode::ClockNotVirtual,
                        "the service runs on the wall clock; start it with --clock virtual",
                    ))
                } else {
                    self.clock_now = self.clock_now.plus_ms(ms);
                    let now = self.clock_now;
                    // Always journaled: the virtual clock's position must survive a restart.
                    self.engine.handle_timeout(now);
                    self.journal.push(JournalEntry::Tick { at: now });
                    self.clock_body(now)
                }
            }
            Routed::Accounts { limit, offset } => self.accounts_page(limit, offset),
            Routed::Report { account_id, format, period } => {
                self.advance(now);
                match self.engine.finance_report(account_id.as_deref(), period) {
                    Some(report) => {
                        let body = report.render(&format).expect("format checked by the router");
                        let content_type = esim_engine::finance::FinanceReport::content_type(&format);
                        let mut response = json_response(200, body);
                        response
                            .headers_mut()
                            .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
                        // A sharded node combines the shards' figures (crate::shards).
                        response.extensions_mut().insert(report);
                        response
                    }
                    None => api::error_response(ApiError::new(ErrorCode::AccountNotFound, "no such account")),
                }
            }
            Routed::Engine(command) => match self.apply(now, command) {
                Ok(Reply::WebhookTestDispatched { delivery_id }) => return Outcome::AwaitDelivery(delivery_id),
                Ok(mut reply) => {
                    // Issue 15: a QR code (about 75 µs) is drawn by the connection task
                    // when the server asks for it, not here, where every command waits.
                    let deferred = match (self.render_qr && self.defer_qr, reply.qr_text()) {
                        (true, Some(text)) => Some(DeferredQr(text.to_string())),
                        _ => None,
                    };
                    reply.set_render_qr(self.render_qr && deferred.is_none());
                    let mut response = respond(&Ok(reply));
                    if let Some(deferred) = deferred {
                        response.extensions_mut().insert(deferred);
                    }
                    response
                }
                other => respond(&other),
            },
        };
        Outcome::Respond(response)
    }

    /// `GET /admin/v1/accounts`: who the operator serves (oldest first, paged like the
    /// reseller lists), so an account id need not be dug out of a report. Never a key:
    /// only digests of keys are kept.
    fn accounts_page(&self, limit: u64, offset: u64) -> http::Response<Bytes> {
        #[derive(serde::Serialize)]
        struct Listed<'a> {
            account_id: &'a str,
            company_name: Option<&'a str>,
            contact_email: &'a str,
            // RFC 3339, as every time a client sees (docs/architecture.md, "Time").
            #[serde(with = "esim_engine::time::rfc3339")]
            created_at: Millis,
            frozen: bool,
            balance_usd: rust_decimal::Decimal,
            esims: usize,
            groups: usize,
        }
        let accounts = self.engine.accounts();
        let listed: Vec<Listed> = accounts
            .iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(limit as usize)
            .map(|account| Listed {
                account_id: &account.id,
                company_name: account.company_name.as_deref(),
                contact_email: &account.contact_email,
                created_at: account.created_at,
                frozen: account.frozen,
                balance_usd: self.engine.ledger().balance(account.slots.reseller).normalize(),
                esims: account.esims.len(),
                groups: account.groups.len(),
            })
            .collect();
        let body = serde_json::json!({ "accounts": listed, "total": accounts.len(), "limit": limit, "offset": offset });
        json_response(200, serde_json::to_vec(&body).expect("json"))
    }

    /// The clock's answer at service time `now` (a wall clock moves between inputs).
    fn clock_body(&self, now: Millis) -> http::Response<Bytes> {
        json_response(
            200,
            serde_json::to_vec(&serde_json::json!({ "now": now.to_rfc3339(), "mode": self.clock })).expect("json"),
        )
    }

    /// Feeds back what became of a delivery; for a webhook test, the response is the
    /// caller's answer.
    pub fn delivery_outcome(
        &mut self,
        wall_now: Millis,
        delivery_id: u64,
        result: DeliveryResult,
        duration_ms: Option<u64>,
    ) -> http::Response<Bytes> {
        let now = self.now(wall_now);
        respond(&self.apply(now, Command::DeliveryOutcome { delivery_id, result, duration_ms }))
    }
}
