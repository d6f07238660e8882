//! The requests the world sends: each [`Op`] and [`Call`] as an `http::Request` of the
//! endpoint table (or a script's raw request, classified by the production router), sent
//! through the [`Service`](esim_api::Service) and recorded with what it taught.

use super::json::Json;
use super::observe::Exchange;
use super::oracle::{self, Idempotency};
use super::{Entity, World, ADMIN_TOKEN};
use crate::op::{Call, Op};
use bytes::Bytes;
use esim_api::api::Routed;
use esim_api::routes::{percent_encode as encode, Api, Endpoint, RESELLER_BASE};
use esim_api::Outcome;
use esim_engine::{AdminOp, Command, Millis, ResellerOp};
use rust_decimal::Decimal;

/// Who sends a request.
#[derive(Clone, Copy, Debug)]
pub(super) enum Who {
    Account(usize),
    Admin,
    Anonymous,
}

/// What a response tells the world, by the kind of request.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    Provision {
        bind: Option<String>,
    },
    Fund,
    Defund,
    Add,
    FundGroup,
    DefundGroup,
    CreateGroup {
        bind: Option<String>,
    },
    ShowGroup,
    ShowEsim,
    Wallet,
    CreateWebhook {
        bind: Option<String>,
    },
    UpdateWebhook {
        events: Option<Vec<String>>,
        active: Option<bool>,
    },
    DeleteWebhook {
        id: String,
    },
    TestWebhook,
    /// `POST /webhooks/{id}/rotate-secret`: the new secret.
    RotateSecret,
    /// `POST /events/{id}/resend`: the event and webhook of the manual delivery.
    Resend,
    /// `GET /webhooks/{id}/deliveries` (the checkers read the engine's log itself).
    Deliveries,
    /// `POST /keys`: the caller uses the new key from then on.
    MadeKey,
    /// `DELETE /keys/{id}` of the caller's own key: it is revoked.
    RevokedOwnKey,
    /// A hand-written request: the production router says what it is.
    Raw,
    CreateAccount {
        bind: Option<String>,
    },
    TopUp {
        account_id: String,
    },
    NewKey {
        account_id: String,
    },
    Revoke {
        key: String,
    },
    Other,
}

impl World {
    /// Sends the requests of an op of the operator, a reseller, a device or the network
    /// (every op but the clock, the receivers and restarts, which [`World::apply`] does).
    pub(super) fn send_op(&mut self, op: &Op) {
        match op {
            Op::Account { name } => {
                let body = Json::new()
                    .string("contact_email", &format!("{name}@reseller.example"))
                    .string("company_name", name);
                let kind = Kind::CreateAccount { bind: Some(name.clone()) };
                self.send_to(Who::Admin, Endpoint::CreateAccount, &[], "", body.finish(), None, kind);
            }
            Op::TopUp { account, amount } => {
                let account_id = self.id_of(account);
                let body = Json::new().number("amount_usd", amount).finish();
                let kind = Kind::TopUp { account_id: account_id.clone() };
                self.send_to(Who::Admin, Endpoint::TopUp, &[&account_id], "", body, None, kind);
            }
            Op::Freeze { account, frozen } => {
                let body = Json::new().raw("frozen", &frozen.to_string()).finish();
                self.send_to(Who::Admin, Endpoint::Freeze, &[&self.id_of(account)], "", body, None, Kind::Other);
            }
            Op::AutoRefill { account, enabled, amount, card } => {
                let body = Json::new()
                    .raw("enabled", &enabled.to_string())
                    .optional("amount_usd", amount.as_ref())
                    .optional("card", card.map(|card| card.to_string()).as_deref())
                    .finish();
                let account_id = self.id_of(account);
                self.send_to(Who::Admin, Endpoint::SetAutoRefill, &[&account_id], "", body, None, Kind::Other);
            }
            Op::Limits { account, groups, size } => {
                let body = Json::new()
                    .optional("max_groups", groups.as_ref())
                    .optional("max_group_size", size.as_ref())
                    .finish();
                let account_id = self.id_of(account);
                self.send_to(Who::Admin, Endpoint::SetLimits, &[&account_id], "", body, None, Kind::Other);
            }
            Op::Inventory { available } => {
                let body = Json::new().raw("available", &available.to_string()).finish();
                self.send_to(Who::Admin, Endpoint::SetInventory, &[], "", body, None, Kind::Other);
            }
            Op::NewKey { account } => {
                let account_id = self.id_of(account);
                let kind = Kind::NewKey { account_id: account_id.clone() };
                self.send_to(Who::Admin, Endpoint::CreateKey, &[&account_id], "", String::new(), None, kind);
            }
            Op::Revoke { account } => {
                let key = match self.entity(account) {
                    Some(Entity::Account(i)) => self.keys[self.accounts[i].key as usize].clone(),
                    _ => account.clone(),
                };
                let kind = Kind::Revoke { key: key.clone() };
                self.send_to(Who::Admin, Endpoint::RevokeKey, &[&key], "", String::new(), None, kind);
            }
            Op::Call { caller, call, idempotency_key } => self.call(caller, call, idempotency_key.as_deref()),
            Op::Raw { caller, method, path, body } => self.raw(caller, method, path, body),
            Op::Burst { caller, count } => {
                let who = self.who(caller);
                for _ in 0..*count {
                    self.send_to(who, Endpoint::WalletBalance, &[], "", String::new(), None, Kind::Wallet);
                }
            }
            Op::Install { sim } => {
                let iccid = self.id_of(sim);
                self.send_to(Who::Admin, Endpoint::Install, &[&iccid], "", String::new(), None, Kind::Other);
            }
            Op::Usage { sim, mb, country, operator } => {
                let body = Json::new()
                    .number("mb", mb)
                    .string("country", country)
                    .optional("operator", operator.as_deref())
                    .finish();
                let iccid = self.id_of(sim);
                self.send_to(Who::Admin, Endpoint::Usage, &[&iccid], "", body, None, Kind::Other);
            }
            Op::Faults { upstream_pause_fails, network_read_fails } => {
                let body = Json::new()
                    .optional("upstream_pause_fails", upstream_pause_fails.as_ref())
                    .optional("network_read_fails", network_read_fails.as_ref());
                self.send_to(Who::Admin, Endpoint::SetFaults, &[], "", body.finish(), None, Kind::Other);
            }
            Op::Advance { .. }
            | Op::Receiver { .. }
            | Op::Restart { .. }
            | Op::Failover
            | Op::Zombie
            | Op::LostCommit
            | Op::StandbyLag { .. }
            | Op::Snapshot { .. }
            | Op::Stall { .. }
            | Op::Grant { .. } => {}
        }
    }

    pub(super) fn advance_clock(&mut self, ms: i64) {
        if ms <= 0 {
            return;
        }
        let seconds = Decimal::new(ms, 3).normalize();
        let body = Json::new().number("seconds", &seconds).finish();
        self.send_to(Who::Admin, Endpoint::AdvanceClock, &[], "", body, None, Kind::Other);
    }

    fn who(&self, caller: &str) -> Who {
        match (caller, self.entity(caller)) {
            (_, Some(Entity::Account(i))) => Who::Account(i),
            ("admin", _) => Who::Admin,
            _ => Who::Anonymous,
        }
    }

    fn call(&mut self, caller: &str, call: &Call, idempotency_key: Option<&str>) {
        let who = self.who(caller);
        let id = |name: &String| self.id_of(name);
        use Endpoint as E;
        let none = String::new;
        // (endpoint, path parameters, query, body, facts to read)
        let (endpoint, params, query, body, kind) = match call {
            Call::Provision { bind, group, label, reference } => {
                let body = Json::new()
                    .optional("end_user_reference", reference.as_deref())
                    .optional("label", label.as_deref())
                    .optional("group_id", group.as_ref().map(id).as_deref());
                (E::ProvisionEsim, vec![], none(), body.finish_or_empty(), Kind::Provision { bind: bind.clone() })
            }
            Call::List { status, limit, offset } => {
                let query = query(&[("status", status.clone()), ("limit", num(limit)), ("offset", num(offset))]);
                (E::ListEsims, vec![], query, none(), Kind::Other)
            }
            Call::Get { sim } => (E::GetEsim, vec![id(sim)], none(), none(), Kind::ShowEsim),
            Call::Enable { sim } => (E::EnableEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Disable { sim } => (E::DisableEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Terminate { sim } => (E::TerminateEsim, vec![id(sim)], none(), none(), Kind::Other),
            Call::Throttle { sim, speed } => {
                let body = Json::new().string("speed", speed).finish();
                (E::ThrottleEsim, vec![id(sim)], none(), body, Kind::Other)
            }
            Call::Fund { sim, amount } => {
                let body = Json::new().number("amount", amount).finish();
                (E::FundEsim, vec![id(sim)], none(), body, Kind::Fund)
            }
            Call::Defund { sim } => (E::DefundEsim, vec![id(sim)], none(), none(), Kind::Defund),
            Call::Groups => (E::ListGroups, vec![], none(), none(), Kind::Other),
            Call::CreateGroup { bind, name, threshold, refill } => {
                let body = Json::new()
                    .string("name", name)
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                (E::CreateGroup, vec![], none(), body.finish(), Kind::CreateGroup { bind: bind.clone() })
            }
            Call::GetGroup { group } => (E::GetGroup, vec![id(group)], none(), none(), Kind::ShowGroup),
            Call::UpdateGroup { group, name, threshold, refill } => {
                let body = Json::new()
                    .optional("name", name.as_deref())
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                (E::UpdateGroup, vec![id(group)], none(), body.finish(), Kind::ShowGroup)
            }
            Call::FundGroup { group, amount } => {
                let body = Json::new().number("amount", amount).finish();
                (E::FundGroup, vec![id(group)], none(), body, Kind::FundGroup)
            }
            Call::DefundGroup { group } => (E::DefundGroup, vec![id(group)], none(), none(), Kind::DefundGroup),
            Call::Members { group, limit, offset } => {
                let query = query(&[("limit", num(limit)), ("offset", num(offset))]);
                (E::ListGroupEsims, vec![id(group)], query, none(), Kind::Other)
            }
            Call::Add { group, sim } => {
                let body = Json::new().string("iccid", &id(sim)).finish();
                (E::AddGroupEsim, vec![id(group)], none(), body, Kind::Add)
            }
            Call::Remove { group, sim } => (E::RemoveGroupEsim, vec![id(group), id(sim)], none(), none(), Kind::Other),
            Call::Wallet => (E::WalletBalance, vec![], none(), none(), Kind::Wallet),
            Call::Rates { country, continent } => {
                let query = query(&[("country", country.clone()), ("continent", continent.clone())]);
                (E::Rates, vec![], query, none(), Kind::Other)
            }
            Call::AccountInfo => (E::Account, vec![], none(), none(), Kind::Other),
            Call::Webhooks => (E::ListWebhooks, vec![], none(), none(), Kind::Other),
            Call::CreateWebhook { bind, events, url } => {
                let default_url = format!("https://hooks.example.com/{}", bind.as_deref().unwrap_or("hook"));
                let body = Json::new()
                    .string("url", url.as_deref().unwrap_or(&default_url))
                    .raw("events", &serde_json::to_string(events).unwrap_or_default())
                    .finish();
                (E::CreateWebhook, vec![], none(), body, Kind::CreateWebhook { bind: bind.clone() })
            }
            Call::GetWebhook { webhook } => (E::GetWebhook, vec![id(webhook)], none(), none(), Kind::Other),
            Call::UpdateWebhook { webhook, events, active, url } => {
                let body = Json::new()
                    .optional("url", url.as_deref())
                    .optional("events", events.as_ref())
                    .optional("active", active.as_ref());
                let kind = Kind::UpdateWebhook { events: events.clone(), active: *active };
                (E::UpdateWebhook, vec![id(webhook)], none(), body.finish(), kind)
            }
            Call::DeleteWebhook { webhook } => {
                let kind = Kind::DeleteWebhook { id: id(webhook) };
                (E::DeleteWebhook, vec![id(webhook)], none(), none(), kind)
            }
            Call::TestWebhook { webhook } => (E::TestWebhook, vec![id(webhook)], none(), none(), Kind::TestWebhook),
            Call::RotateSecret { webhook } => {
                (E::RotateWebhookSecret, vec![id(webhook)], none(), none(), Kind::RotateSecret)
            }
            Call::Deliveries { webhook } => (E::ListDeliveries, vec![id(webhook)], none(), none(), Kind::Deliveries),
            Call::Resend { event, webhook } => {
                let body = Json::new().string("webhook_id", &id(webhook)).finish();
                // An event name stands for the newest event of that name the world saw.
                let event = match esim_engine::EventName::parse(event) {
                    Some(name) => self
                        .recent_events
                        .iter()
                        .rev()
                        .find(|(_, seen, _)| *seen == name)
                        .map_or_else(|| event.clone(), |(_, _, id)| id.clone()),
                    None => id(event),
                };
                (E::ResendEvent, vec![event], none(), body, Kind::Resend)
            }
            Call::Keys => (E::ListApiKeys, vec![], none(), none(), Kind::Other),
            Call::MakeKey => (E::CreateApiKey, vec![], none(), none(), Kind::MadeKey),
            Call::RevokeOwnKey => {
                let key_id = match who {
                    Who::Account(i) => esim_engine::KeyDigest::of(&self.keys[self.accounts[i].key as usize]).key_id(),
                    _ => "key_none".to_string(),
                };
                (E::RevokeApiKey, vec![key_id], none(), none(), Kind::RevokedOwnKey)
            }
            Call::GetRefill => (E::GetAutoRefill, vec![], none(), none(), Kind::Other),
            Call::SetRefill { enabled, amount } => {
                let body = Json::new().optional("enabled", enabled.as_ref()).optional("amount_usd", amount.as_ref());
                (E::UpdateAutoRefill, vec![], none(), body.finish_or_empty(), Kind::Other)
            }
        };
        let params: Vec<&str> = params.iter().map(String::as_str).collect();
        self.send_to(who, endpoint, &params, &query, body, idempotency_key, kind);
    }

    /// Sends a request of `endpoint` with these path parameters (percent-encoded by the
    /// endpoint table) and query (`?...` or empty).
    #[allow(clippy::too_many_arguments)]
    fn send_to(
        &mut self,
        who: Who,
        endpoint: Endpoint,
        params: &[&str],
        query: &str,
        body: String,
        idempotency_key: Option<&str>,
        kind: Kind,
    ) {
        let method = http::Method::from_bytes(endpoint.method().as_bytes()).expect("the table's methods are valid");
        let path = endpoint.path(params) + query;
        self.send(who, method, path, body, idempotency_key, kind);
    }

    /// A request as bytes; its meaning (for the rate limit and the facts) comes from the
    /// production router itself.
    fn raw(&mut self, caller: &str, method: &str, path: &str, body: &str) {
        // `{name}` becomes the bound id (or the name itself when unbound).
        let mut full = String::with_capacity(path.len());
        let mut rest = path;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else { break };
            full.push_str(&rest[..open]);
            full.push_str(&encode(&self.id_of(&rest[open + 1..open + close])));
            rest = &rest[open + close + 1..];
        }
        full.push_str(rest);
        if !(full.starts_with("/admin") || full.starts_with("/sandbox") || full.starts_with("/api")) {
            full = format!("{RESELLER_BASE}{full}");
        }
        let method = http::Method::from_bytes(method.as_bytes()).unwrap_or(http::Method::GET);
        let who = self.who(caller);
        self.send(who, method, full, body.to_string(), None, Kind::Raw);
    }

    /// Sends one request and records the exchange (and its facts).
    fn send(
        &mut self,
        who: Who,
        method: http::Method,
        path: String,
        body: String,
        idempotency_key: Option<&str>,
        kind: Kind,
    ) {
        let body = Bytes::from(body);
        let (key, key_valid) = match who {
            Who::Account(i) => (Some(self.accounts[i].key), !self.accounts[i].revoked),
            _ => (None, false),
        };
        let mut builder = http::Request::builder().method(method.clone()).uri(path.as_str());
        match who {
            Who::Account(i) => {
                builder =
                    builder.header("authorization", format!("Bearer {}", self.keys[self.accounts[i].key as usize]))
            }
            Who::Admin => builder = builder.header("authorization", format!("Bearer {ADMIN_TOKEN}")),
            Who::Anonymous => {}
        }
        if !body.is_empty() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(key) = idempotency_key {
            builder = builder.header("idempotency-key", key);
        }
        let now = self.now;
        let request = match builder.body(body.clone()) {
            Ok(request) => request,
            Err(error) => {
                // Not even a valid HTTP request (a script's bad path): nothing was sent.
                self.log.exchanges.push(Exchange {
                    method,
                    path,
                    request_body: body,
                    key,
                    key_valid,
                    engine_bound: false,
                    read: true,
                    idempotency: Idempotency::None,
                    status: 0,
                    rate_limited: false,
                    body: Bytes::from(format!("not sent: {error}")),
                    retry_after: None,
                    at: now,
                    answered: now,
                });
                return;
            }
        };
        // Raw requests are classified by the router; the world's own are well-formed.
        let (engine_bound, read, kind) = match kind {
            Kind::Raw => classify(&request),
            kind => (path.starts_with(RESELLER_BASE), method == http::Method::GET, kind),
        };
        let account = match who {
            Who::Account(i) => Some(self.accounts[i].engine),
            _ => None,
        };
        // A request the router refuses (its shape: JSON, a missing field, an amount with
        // more than 2 decimals) never reaches the engine's idempotency store.
        let reaches_engine =
            idempotency_key.is_some() && matches!(esim_api::api::route(&request, ADMIN_TOKEN, None), Routed::Engine(_));
        let idempotency = match (idempotency_key, account) {
            (Some(idem), Some(account)) if key_valid && engine_bound && reaches_engine && !read => {
                self.idempotency.expect(account, idem, &(method.clone(), path.clone(), body.clone()), now)
            }
            _ => Idempotency::None,
        };
        let response = match self.service.handle(now, &request) {
            Outcome::Respond(response) => response,
            Outcome::AwaitDelivery(delivery_id) => self
                .process_effects(Some(delivery_id))
                .unwrap_or_else(|| esim_api::api::json_response(500, "{\"error\":\"the test delivery never came\"}")),
        };
        // What a stalled append makes of the answer the client sees (the world reads the
        // engine's own answer back, as a retry with the same Idempotency-Key would).
        let (seen, waited_ms) = self.stall_answer();
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
        let response_body = response.into_body();
        let rate_limited = status == 429 && retry_after.is_some();
        self.stats.requests += 1;
        if rate_limited {
            self.stats.rate_limited += 1;
        }
        if let (Idempotency::Fresh, Some(account), Some(idem)) = (&idempotency, account, idempotency_key) {
            if oracle::is_final(status, rate_limited, matches!(kind, Kind::TestWebhook)) {
                let request = (method.clone(), path.clone(), body.clone());
                self.idempotency.store(account, idem, request, status, response_body.clone(), now);
            }
        }
        let fresh = matches!(idempotency, Idempotency::None | Idempotency::Fresh);
        if fresh && (200..300).contains(&status) {
            self.observe(who, &kind, &response_body);
        }
        let (status, response_body, retry_after, idempotency) = match seen {
            // A 503 is no stored answer: a replay answered so is not judged as one.
            Some(late) => (late.status, late.body, late.retry_after, Idempotency::None),
            None => (status, response_body, retry_after, idempotency),
        };
        self.log.exchanges.push(Exchange {
            method,
            path,
            request_body: body,
            key,
            key_valid,
            engine_bound,
            read,
            idempotency,
            status,
            rate_limited,
            body: response_body,
            retry_after,
            at: now,
            answered: now.plus_ms(waited_ms),
        });
        self.now = self.service.now(Millis(0));
        // The client waited: the world's clock moves on by that much.
        self.advance_clock(waited_ms);
    }
}

/// The script verb whose requests reach each endpoint, or `None` (with the reason) for
/// an endpoint the simulation never sends. An exhaustive match: a new endpoint does not
/// compile until the simulation says how it reaches it, and a test checks that the
/// generated worlds do send every one named here.
pub fn reached_by(endpoint: Endpoint) -> Option<&'static str> {
    use Endpoint as E;
    Some(match endpoint {
        E::ProvisionEsim => "provision",
        E::ListEsims => "list",
        E::GetEsim => "get",
        E::EnableEsim => "enable",
        E::DisableEsim => "disable",
        E::TerminateEsim => "terminate",
        E::ThrottleEsim => "throttle",
        E::FundEsim => "fund",
        E::DefundEsim => "defund",
        E::ListGroups => "groups",
        E::CreateGroup => "group",
        E::GetGroup => "getgroup",
        E::UpdateGroup => "patchgroup",
        E::FundGroup => "fundgroup",
        E::DefundGroup => "defundgroup",
        E::ListGroupEsims => "members",
        E::AddGroupEsim => "add",
        E::RemoveGroupEsim => "remove",
        E::WalletBalance => "wallet",
        E::Rates => "rates",
        E::Account => "accountinfo",
        E::ListWebhooks => "webhooks",
        E::CreateWebhook => "webhook",
        E::GetWebhook => "getwebhook",
        E::UpdateWebhook => "putwebhook",
        E::DeleteWebhook => "deletewebhook",
        E::TestWebhook => "testwebhook",
        E::CreateAccount => "account",
        E::TopUp => "topup",
        E::CreateKey => "newkey",
        E::RevokeKey => "revoke",
        E::Freeze => "freeze",
        E::SetAutoRefill => "autorefill",
        E::SetLimits => "limits",
        E::SetInventory => "inventory",
        E::Install => "install",
        E::Usage => "usage",
        E::SetFaults => "faults",
        E::AdvanceClock => "advance",
        // Reads of no state the checkers follow: the documents are static, the clock and
        // the state digest are read from the engine directly, and the conservation
        // report is checked on the engine's own report after every step.
        E::OpenApi
        | E::AdminOpenApi
        | E::SandboxOpenApi
        | E::Clock
        | E::State
        | E::ConservationReport
        | E::ListAccounts => return None,
        // The engine's timer queue, read as it is: the checkers follow what the timers do.
        E::Pending => return None,
        // The events API shows what the event log already holds; its own tests check it
        // against the delivered envelopes (tests/events_api.rs).
        E::ListEvents | E::GetEvent => return None,
        // The LPA string and its picture again (decision 130): the world never renders
        // QR codes, and the OpenAPI test checks a drawn answer against the document.
        E::EsimQrCode => return None,
        E::ListApiKeys => "keys",
        E::CreateApiKey => "makekey",
        E::RevokeApiKey => "revokekey",
        E::GetAutoRefill => "getrefill",
        E::UpdateAutoRefill => "refill",
        E::RotateWebhookSecret => "rotate",
        E::ListDeliveries => "deliveries",
        E::ResendEvent => "resend",
    })
}

/// What the production router makes of a request: (reaches the engine as a reseller
/// command, is a read, the facts to read from its response).
fn classify(request: &http::Request<Bytes>) -> (bool, bool, Kind) {
    match esim_api::api::route(request, ADMIN_TOKEN, None) {
        Routed::Engine(Command::Reseller(reseller)) => {
            let read = reseller.op.is_read();
            let kind = match reseller.op {
                ResellerOp::Provision { .. } => Kind::Provision { bind: None },
                ResellerOp::Fund { .. } => Kind::Fund,
                ResellerOp::Defund { .. } => Kind::Defund,
                ResellerOp::AddGroupEsim { .. } => Kind::Add,
                ResellerOp::FundGroup { .. } => Kind::FundGroup,
                ResellerOp::DefundGroup { .. } => Kind::DefundGroup,
                ResellerOp::CreateGroup { .. } => Kind::CreateGroup { bind: None },
                ResellerOp::GetGroup { .. } | ResellerOp::UpdateGroup { .. } => Kind::ShowGroup,
                ResellerOp::GetEsim { .. } => Kind::ShowEsim,
                ResellerOp::WalletBalance => Kind::Wallet,
                ResellerOp::CreateWebhook { .. } => Kind::CreateWebhook { bind: None },
                ResellerOp::UpdateWebhook { events, active, .. } => Kind::UpdateWebhook { events, active },
                ResellerOp::DeleteWebhook { webhook_id } => Kind::DeleteWebhook { id: webhook_id },
                ResellerOp::TestWebhook { .. } => Kind::TestWebhook,
                ResellerOp::RotateWebhookSecret { .. } => Kind::RotateSecret,
                ResellerOp::ResendEvent { .. } => Kind::Resend,
                _ => Kind::Other,
            };
            (true, read, kind)
        }
        Routed::Engine(Command::Admin(op)) => {
            let kind = match op {
                AdminOp::CreateAccount { .. } => Kind::CreateAccount { bind: None },
                AdminOp::TopUp { account_id, .. } => Kind::TopUp { account_id },
                AdminOp::CreateKey { account_id, .. } => Kind::NewKey { account_id },
                // The command holds only the key's digest; the key is the path's last segment.
                AdminOp::RevokeKey { .. } => Kind::Revoke {
                    key: esim_api::api::percent_decode(request.uri().path().rsplit('/').next().unwrap_or("")),
                },
                _ => Kind::Other,
            };
            (false, false, kind)
        }
        // Refused by the transport after the key check: counted by the rate limit, but
        // never reaches the idempotency store (treated as a read).
        Routed::Reject(_) if esim_api::routes::api_of_path(request.uri().path()) == Some(Api::Reseller) => {
            (true, true, Kind::Other)
        }
        _ => (false, request.method() == http::Method::GET, Kind::Other),
    }
}

fn num(value: &Option<u64>) -> Option<String> {
    value.map(|v| v.to_string())
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> =
        pairs.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v)))).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}
