//! The requests the world sends: each [`Op`] and [`Call`] as an `http::Request` of the
//! endpoint table (or a script's raw request, classified by the production router), sent
//! through the [`Service`](esim_api::Service) and recorded with what it taught.

use super::json::Json;
use super::log::Exchange;
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

/// A request of the endpoint table before it is sent: the endpoint, its path
/// parameters, its query (`?...` or empty), its body, and what its response teaches.
struct Planned {
    endpoint: Endpoint,
    params: Vec<String>,
    query: String,
    body: String,
    kind: Kind,
}

impl Planned {
    fn new(endpoint: Endpoint, params: Vec<String>, kind: Kind) -> Planned {
        Planned { endpoint, params, query: String::new(), body: String::new(), kind }
    }

    fn query(self, query: String) -> Planned {
        Planned { query, ..self }
    }

    fn body(self, body: String) -> Planned {
        Planned { body, ..self }
    }
}

impl World {
    /// Sends the requests of an op of the operator, a reseller, a device or the network
    /// (every op but the clock, the receivers and restarts, which [`World::apply`] does).
    pub(super) fn send_op(&mut self, op: &Op) {
        match op {
            Op::Account { .. }
            | Op::TopUp { .. }
            | Op::Freeze { .. }
            | Op::AutoRefill { .. }
            | Op::Limits { .. }
            | Op::Inventory { .. }
            | Op::NewKey { .. }
            | Op::Revoke { .. } => self.send_operator_op(op),
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

    /// Sends an op of the operator, through the admin API: accounts and their money,
    /// switches and limits, the inventory, keys.
    fn send_operator_op(&mut self, op: &Op) {
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
            other => unreachable!("{other:?} is no operator's op"),
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

    /// Sends a reseller's call. Each part of the interface says, in its own function,
    /// which endpoint a [`Call`] is and what its response teaches ([`Planned`]).
    fn call(&mut self, caller: &str, call: &Call, idempotency_key: Option<&str>) {
        let who = self.who(caller);
        let planned = match call {
            Call::Provision { .. }
            | Call::List { .. }
            | Call::Get { .. }
            | Call::Enable { .. }
            | Call::Disable { .. }
            | Call::Terminate { .. }
            | Call::Throttle { .. }
            | Call::Fund { .. }
            | Call::Defund { .. } => self.esim_call(call),
            Call::Groups
            | Call::CreateGroup { .. }
            | Call::GetGroup { .. }
            | Call::UpdateGroup { .. }
            | Call::FundGroup { .. }
            | Call::DefundGroup { .. }
            | Call::Members { .. }
            | Call::Add { .. }
            | Call::Remove { .. } => self.group_call(call),
            Call::Webhooks
            | Call::CreateWebhook { .. }
            | Call::GetWebhook { .. }
            | Call::UpdateWebhook { .. }
            | Call::DeleteWebhook { .. }
            | Call::TestWebhook { .. }
            | Call::RotateSecret { .. }
            | Call::Deliveries { .. }
            | Call::Resend { .. } => self.webhook_call(call),
            Call::Wallet
            | Call::Rates { .. }
            | Call::AccountInfo
            | Call::Keys
            | Call::MakeKey
            | Call::RevokeOwnKey
            | Call::GetRefill
            | Call::SetRefill { .. } => self.account_call(who, call),
        };
        let Planned { endpoint, params, query, body, kind } = planned;
        let params: Vec<&str> = params.iter().map(String::as_str).collect();
        self.send_to(who, endpoint, &params, &query, body, idempotency_key, kind);
    }

    /// The eSIM endpoints: provision, list, read, the state changes, fund and defund.
    fn esim_call(&self, call: &Call) -> Planned {
        let id = |name: &String| self.id_of(name);
        use Endpoint as E;
        match call {
            Call::Provision { bind, group, label, reference } => {
                let body = Json::new()
                    .optional("end_user_reference", reference.as_deref())
                    .optional("label", label.as_deref())
                    .optional("group_id", group.as_ref().map(id).as_deref());
                let kind = Kind::Provision { bind: bind.clone() };
                Planned::new(E::ProvisionEsim, vec![], kind).body(body.finish_or_empty())
            }
            Call::List { status, limit, offset } => {
                let query = query(&[("status", status.clone()), ("limit", num(limit)), ("offset", num(offset))]);
                Planned::new(E::ListEsims, vec![], Kind::Other).query(query)
            }
            Call::Get { sim } => Planned::new(E::GetEsim, vec![id(sim)], Kind::ShowEsim),
            Call::Enable { sim } => Planned::new(E::EnableEsim, vec![id(sim)], Kind::Other),
            Call::Disable { sim } => Planned::new(E::DisableEsim, vec![id(sim)], Kind::Other),
            Call::Terminate { sim } => Planned::new(E::TerminateEsim, vec![id(sim)], Kind::Other),
            Call::Throttle { sim, speed } => {
                let body = Json::new().string("speed", speed).finish();
                Planned::new(E::ThrottleEsim, vec![id(sim)], Kind::Other).body(body)
            }
            Call::Fund { sim, amount } => {
                let body = Json::new().number("amount", amount).finish();
                Planned::new(E::FundEsim, vec![id(sim)], Kind::Fund).body(body)
            }
            Call::Defund { sim } => Planned::new(E::DefundEsim, vec![id(sim)], Kind::Defund),
            other => unreachable!("{other:?} is no eSIM call"),
        }
    }

    /// The group endpoints: create, read, change, fund and defund, and membership.
    fn group_call(&self, call: &Call) -> Planned {
        let id = |name: &String| self.id_of(name);
        use Endpoint as E;
        match call {
            Call::Groups => Planned::new(E::ListGroups, vec![], Kind::Other),
            Call::CreateGroup { bind, name, threshold, refill } => {
                let body = Json::new()
                    .string("name", name)
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                Planned::new(E::CreateGroup, vec![], Kind::CreateGroup { bind: bind.clone() }).body(body.finish())
            }
            Call::GetGroup { group } => Planned::new(E::GetGroup, vec![id(group)], Kind::ShowGroup),
            Call::UpdateGroup { group, name, threshold, refill } => {
                let body = Json::new()
                    .optional("name", name.as_deref())
                    .optional("low_balance_threshold_usd", threshold.as_ref())
                    .optional("refill_amount_usd", refill.as_ref());
                Planned::new(E::UpdateGroup, vec![id(group)], Kind::ShowGroup).body(body.finish())
            }
            Call::FundGroup { group, amount } => {
                let body = Json::new().number("amount", amount).finish();
                Planned::new(E::FundGroup, vec![id(group)], Kind::FundGroup).body(body)
            }
            Call::DefundGroup { group } => Planned::new(E::DefundGroup, vec![id(group)], Kind::DefundGroup),
            Call::Members { group, limit, offset } => {
                let query = query(&[("limit", num(limit)), ("offset", num(offset))]);
                Planned::new(E::ListGroupEsims, vec![id(group)], Kind::Other).query(query)
            }
            Call::Add { group, sim } => {
                let body = Json::new().string("iccid", &id(sim)).finish();
                Planned::new(E::AddGroupEsim, vec![id(group)], Kind::Add).body(body)
            }
            Call::Remove { group, sim } => Planned::new(E::RemoveGroupEsim, vec![id(group), id(sim)], Kind::Other),
            other => unreachable!("{other:?} is no group call"),
        }
    }

    /// The webhook endpoints: create, read, change, delete, test, rotate the secret, the
    /// delivery log and a resend.
    fn webhook_call(&self, call: &Call) -> Planned {
        let id = |name: &String| self.id_of(name);
        use Endpoint as E;
        match call {
            Call::Webhooks => Planned::new(E::ListWebhooks, vec![], Kind::Other),
            Call::CreateWebhook { bind, events, url } => {
                let default_url = format!("https://hooks.example.com/{}", bind.as_deref().unwrap_or("hook"));
                let body = Json::new()
                    .string("url", url.as_deref().unwrap_or(&default_url))
                    .raw("events", &serde_json::to_string(events).unwrap_or_default())
                    .finish();
                Planned::new(E::CreateWebhook, vec![], Kind::CreateWebhook { bind: bind.clone() }).body(body)
            }
            Call::GetWebhook { webhook } => Planned::new(E::GetWebhook, vec![id(webhook)], Kind::Other),
            Call::UpdateWebhook { webhook, events, active, url } => {
                let body = Json::new()
                    .optional("url", url.as_deref())
                    .optional("events", events.as_ref())
                    .optional("active", active.as_ref());
                let kind = Kind::UpdateWebhook { events: events.clone(), active: *active };
                Planned::new(E::UpdateWebhook, vec![id(webhook)], kind).body(body.finish())
            }
            Call::DeleteWebhook { webhook } => {
                let kind = Kind::DeleteWebhook { id: id(webhook) };
                Planned::new(E::DeleteWebhook, vec![id(webhook)], kind)
            }
            Call::TestWebhook { webhook } => Planned::new(E::TestWebhook, vec![id(webhook)], Kind::TestWebhook),
            Call::RotateSecret { webhook } => {
                Planned::new(E::RotateWebhookSecret, vec![id(webhook)], Kind::RotateSecret)
            }
            Call::Deliveries { webhook } => Planned::new(E::ListDeliveries, vec![id(webhook)], Kind::Deliveries),
            Call::Resend { event, webhook } => {
                let body = Json::new().string("webhook_id", &id(webhook)).finish();
                Planned::new(E::ResendEvent, vec![self.event_id(event)], Kind::Resend).body(body)
            }
            other => unreachable!("{other:?} is no webhook call"),
        }
    }

    /// The id a resend names: an event name stands for the newest event of that name the
    /// world saw, anything else for the id it is bound to (or itself).
    fn event_id(&self, event: &str) -> String {
        match esim_engine::EventName::parse(event) {
            Some(name) => self
                .recent_events
                .iter()
                .rev()
                .find(|(_, seen, _)| *seen == name)
                .map_or_else(|| event.to_string(), |(_, _, id)| id.clone()),
            None => self.id_of(event),
        }
    }

    /// The account's own endpoints: the wallet, rates, the account, API keys and
    /// auto-refill.
    fn account_call(&self, who: Who, call: &Call) -> Planned {
        use Endpoint as E;
        match call {
            Call::Wallet => Planned::new(E::WalletBalance, vec![], Kind::Wallet),
            Call::Rates { country, continent } => {
                let query = query(&[("country", country.clone()), ("continent", continent.clone())]);
                Planned::new(E::Rates, vec![], Kind::Other).query(query)
            }
            Call::AccountInfo => Planned::new(E::Account, vec![], Kind::Other),
            Call::Keys => Planned::new(E::ListApiKeys, vec![], Kind::Other),
            Call::MakeKey => Planned::new(E::CreateApiKey, vec![], Kind::MadeKey),
            Call::RevokeOwnKey => {
                let key_id = match who {
                    Who::Account(i) => esim_engine::KeyDigest::of(&self.keys[self.accounts[i].key as usize]).key_id(),
                    _ => "key_none".to_string(),
                };
                Planned::new(E::RevokeApiKey, vec![key_id], Kind::RevokedOwnKey)
            }
            Call::GetRefill => Planned::new(E::GetAutoRefill, vec![], Kind::Other),
            Call::SetRefill { enabled, amount } => {
                let body = Json::new().optional("enabled", enabled.as_ref()).optional("amount_usd", amount.as_ref());
                Planned::new(E::UpdateAutoRefill, vec![], Kind::Other).body(body.finish_or_empty())
            }
            other => unreachable!("{other:?} is no account call"),
        }
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

    /// Sends one request and records the exchange (and its facts): the request as a
    /// client builds it, what the idempotency oracle expects of it, the service's answer
    /// (as a stalled append makes it), and what the answer teaches the world.
    fn send(
        &mut self,
        who: Who,
        method: http::Method,
        path: String,
        body: String,
        idempotency_key: Option<&str>,
        kind: Kind,
    ) {
        let (key, key_valid) = match who {
            Who::Account(i) => (Some(self.accounts[i].key), !self.accounts[i].revoked),
            _ => (None, false),
        };
        let now = self.now;
        let mut exchange = Exchange::unanswered(method, path, Bytes::from(body), key, key_valid, now);
        let request = match self.request_of(who, &exchange, idempotency_key) {
            Ok(request) => request,
            Err(error) => {
                // Not even a valid HTTP request (a script's bad path): nothing was sent.
                exchange.body = Bytes::from(format!("not sent: {error}"));
                self.log.exchanges.push(exchange);
                return;
            }
        };
        // Raw requests are classified by the router; the world's own are well-formed.
        let (engine_bound, read, kind) = match kind {
            Kind::Raw => classify(&request),
            kind => (exchange.path.starts_with(RESELLER_BASE), exchange.method == http::Method::GET, kind),
        };
        (exchange.engine_bound, exchange.read) = (engine_bound, read);
        let account = match who {
            Who::Account(i) => Some(self.accounts[i].engine),
            _ => None,
        };
        exchange.idempotency = self.expect_replay(&exchange, &request, idempotency_key, account);
        let response = self.respond(now, &request);
        // What a stalled append makes of the answer the client sees (the world reads the
        // engine's own answer back, as a retry with the same Idempotency-Key would).
        let (seen, waited_ms) = self.stall_answer();
        assert!(waited_ms >= 0, "a client waits forward in time");
        exchange.status = response.status().as_u16();
        exchange.retry_after = retry_after(&response);
        exchange.rate_limited = exchange.status == 429 && exchange.retry_after.is_some();
        exchange.body = response.into_body();
        self.learn(who, &kind, &exchange, idempotency_key, account);
        if let Some(late) = seen {
            // A 503 is no stored answer: a replay answered so is not judged as one.
            (exchange.status, exchange.body, exchange.retry_after) = (late.status, late.body, late.retry_after);
            exchange.idempotency = Idempotency::None;
        }
        exchange.answered = now.plus_ms(waited_ms);
        self.log.exchanges.push(exchange);
        self.now = self.service.now(Millis(0));
        // The client waited: the world's clock moves on by that much.
        self.advance_clock(waited_ms);
    }

    /// The request as a client sends it: the caller's key (or the admin token), a JSON
    /// content type when there is a body, and the Idempotency-Key. An error is a request
    /// no client could send (a script's bad path).
    fn request_of(
        &self,
        who: Who,
        exchange: &Exchange,
        idempotency_key: Option<&str>,
    ) -> Result<http::Request<Bytes>, http::Error> {
        let mut builder = http::Request::builder().method(exchange.method.clone()).uri(exchange.path.as_str());
        match who {
            Who::Account(i) => {
                builder =
                    builder.header("authorization", format!("Bearer {}", self.keys[self.accounts[i].key as usize]))
            }
            Who::Admin => builder = builder.header("authorization", format!("Bearer {ADMIN_TOKEN}")),
            Who::Anonymous => {}
        }
        if !exchange.request_body.is_empty() {
            builder = builder.header("content-type", "application/json");
        }
        if let Some(key) = idempotency_key {
            builder = builder.header("idempotency-key", key);
        }
        builder.body(exchange.request_body.clone())
    }

    /// What the idempotency oracle expects of a request with an Idempotency-Key: only a
    /// valid key's change that reaches the engine is stored, so only it can be replayed.
    fn expect_replay(
        &mut self,
        exchange: &Exchange,
        request: &http::Request<Bytes>,
        idempotency_key: Option<&str>,
        account: Option<u32>,
    ) -> Idempotency {
        // A request the router refuses (its shape: JSON, a missing field, an amount with
        // more than 2 decimals) never reaches the engine's idempotency store.
        let reaches_engine =
            idempotency_key.is_some() && matches!(esim_api::api::route(request, ADMIN_TOKEN, None), Routed::Engine(_));
        match (idempotency_key, account) {
            (Some(idem), Some(account))
                if exchange.key_valid && exchange.engine_bound && reaches_engine && !exchange.read =>
            {
                let fingerprint = (exchange.method.clone(), exchange.path.clone(), exchange.request_body.clone());
                self.idempotency.expect(account, idem, &fingerprint, exchange.at)
            }
            _ => Idempotency::None,
        }
    }

    /// The service's answer; a test delivery's is the receiver's, fetched at once.
    fn respond(&mut self, now: Millis, request: &http::Request<Bytes>) -> http::Response<Bytes> {
        match self.service.handle(now, request) {
            Outcome::Respond(response) => response,
            Outcome::AwaitDelivery(delivery_id) => self
                .process_effects(Some(delivery_id))
                .unwrap_or_else(|| esim_api::api::json_response(500, "{\"error\":\"the test delivery never came\"}")),
        }
    }

    /// What a fresh answer teaches: the run's counts, the answer an Idempotency-Key
    /// replays from now on (once it is final), and the facts of a success.
    fn learn(
        &mut self,
        who: Who,
        kind: &Kind,
        exchange: &Exchange,
        idempotency_key: Option<&str>,
        account: Option<u32>,
    ) {
        let judged = exchange.idempotency != Idempotency::None;
        assert!(!judged || (account.is_some() && idempotency_key.is_some()), "only a reseller's key is judged");
        self.stats.requests += 1;
        if exchange.rate_limited {
            self.stats.rate_limited += 1;
        }
        if let (Idempotency::Fresh, Some(account), Some(idem)) = (&exchange.idempotency, account, idempotency_key) {
            if oracle::is_final(exchange.status, exchange.rate_limited, matches!(kind, Kind::TestWebhook)) {
                let request = (exchange.method.clone(), exchange.path.clone(), exchange.request_body.clone());
                self.idempotency.store(account, idem, request, exchange.status, exchange.body.clone(), exchange.at);
            }
        }
        let fresh = matches!(exchange.idempotency, Idempotency::None | Idempotency::Fresh);
        if fresh && (200..300).contains(&exchange.status) {
            self.observe(who, kind, &exchange.body);
        }
    }
}

/// A response's Retry-After header, as text.
fn retry_after(response: &http::Response<Bytes>) -> Option<String> {
    response.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string)
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
