//! Webhooks: registration, and delivery as engine logic. The engine picks the targets,
//! builds the exact body, hands a delivery (with the webhook's sealed signing secret) to
//! the shell as an effect, which signs and sends it, and takes the outcome back as a
//! command: failure counting, retries and the
//! auto-disable at 10 are decided here, so they are journaled and simulated.

use crate::command::DeliveryResult;
use crate::effect::{Delivery, Effect};
use crate::engine::Engine;
use crate::error::{ApiError, ErrorCode};
use crate::event::{Event, EventName};
use crate::event_data::{EventData, TestData};
use crate::limits;
use crate::random::Purpose;
use crate::reply::*;
use crate::secret::SealedSecret;
use crate::state::*;
use crate::time::Millis;
use crate::timer::Timer;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeSet;

/// The note returned with a new webhook's signing secret.
const SECRET_NOTE: &str = "Store the signing_secret now: it is shown only once. Verify X-Service-Signature as the lowercase hex HMAC-SHA256 of the raw body keyed with the whole secret, or the webhook-id, webhook-timestamp and webhook-signature headers with any Standard Webhooks library.";

/// The note returned with a rotated secret.
const ROTATION_NOTE: &str = "Store the new signing_secret now: it is shown only once. For 24 hours deliveries carry both signatures in webhook-signature (new and previous secret); X-Service-Signature uses the new secret at once.";

/// Lowercase hex HMAC-SHA256 of `body` keyed with `secret` (`X-Service-Signature`; the
/// sender computes it with the secret it opened).
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(body);
    crate::ids::hex(&mac.finalize().into_bytes())
}

/// The `webhook-signature` value of Standard Webhooks: `v1,` and the base64 HMAC-SHA256
/// of `{id}.{timestamp}.{body}`, keyed with the base64-decoded part of the secret after
/// `whsec_` (what every Standard Webhooks library does with a `whsec_` secret). Every
/// secret the service makes decodes (decision 114); a text that does not is used as its
/// bytes, so no delivery goes unsigned.
pub fn standard_signature(secret: &str, event_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap_or_else(|_| secret.as_bytes().to_vec());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(format!("{event_id}.{timestamp_s}.").as_bytes());
    mac.update(body);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
}

/// Wait before retry number `attempt + 1` after `attempt` failed attempts.
pub fn retry_wait_ms(failed_attempts: u32) -> i64 {
    let doubling = failed_attempts.saturating_sub(1).min(20);
    (limits::RETRY_BASE_MS << doubling).min(limits::RETRY_MAX_WAIT_MS)
}

/// True for hosts that only a local developer should target: local names, addresses
/// that are not public, and numeric forms resolvers read as addresses (`0`,
/// `2130706433`, `0x7f.1`, `127.1`). A public name that resolves to a private address
/// is refused by the sender when it connects.
///
/// Refused outright, whatever follows: a `%` anywhere (an IPv6 zone id such as
/// `[fe80::1%25eth0]` only scopes non-global addresses, and no public name holds a
/// percent escape), and a bracketed or colon-holding host that is not a plain IPv6
/// address.
fn is_private_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.contains('%') {
        return true;
    }
    let bracketed = host.starts_with('[') || host.ends_with(']') || host.contains(':');
    let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.');
    if host.is_empty()
        || host == "localhost"
        || host.ends_with(".localhost")
        || host.ends_with(".local")
        || host.ends_with(".internal")
    {
        return true;
    }
    if bracketed {
        return host.parse::<core::net::Ipv6Addr>().map_or(true, |ip| !is_public_ip(ip.into()));
    }
    if let Ok(ip) = host.parse::<core::net::IpAddr>() {
        return !is_public_ip(ip);
    }
    host.split('.').all(|part| !part.is_empty() && (part.bytes().all(|b| b.is_ascii_digit()) || part.starts_with("0x")))
}

/// Whether an address is on the public internet (webhooks target only those unless
/// insecure webhooks are allowed): false for every range of IANA's special-purpose
/// registries that is not globally reachable, and for every form that embeds an IPv4
/// address in an IPv6 one.
///
/// - IPv4: refused are 0/8, 10/8, 100.64/10 (CGNAT), 127/8, 169.254/16, 172.16/12,
///   192.0.0/24 (IETF protocol assignments), 192.0.2/24, 192.88.99/24 (the deprecated
///   6to4 relay anycast), 192.168/16, 198.18/15 (benchmarking), 198.51.100/24,
///   203.0.113/24, 224/4 (multicast), 240/4 (reserved) and 255.255.255.255.
/// - IPv6: only global unicast 2000::/3 can be public (everything outside it is
///   loopback, unspecified, IPv4-compatible ::/96, IPv4-mapped ::ffff:0:0/96, NAT64
///   64:ff9b::/96 and 64:ff9b:1::/48, discard-only 100::/64, SRv6 5f00::/16,
///   unique-local fc00::/7, link-local fe80::/10, site-local fec0::/10, multicast
///   ff00::/8, or unassigned); inside it, refused are 2001::/23 (IETF protocol
///   assignments: Teredo 2001::/32, benchmarking 2001:2::/48, ORCHID 2001:10::/28 and
///   ORCHIDv2 2001:20::/28 among them), documentation 2001:db8::/32 and 3fff::/20, and
///   6to4 2002::/16.
/// - The embedding forms (IPv4-mapped and -compatible, NAT64, 6to4, Teredo) are refused
///   outright rather than judged by the IPv4 inside: a translator or relay decides where
///   they lead, which the service cannot see, and a real receiver has a plain IPv4 or a
///   native IPv6 address to register instead.
pub fn is_public_ip(ip: core::net::IpAddr) -> bool {
    use core::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(a == 0
                || a == 10
                || (a == 100 && (64..=127).contains(&b))
                || a == 127
                || (a == 169 && b == 254)
                || (a == 172 && (16..=31).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 192 && b == 0 && c == 2)
                || (a == 192 && b == 88 && c == 99)
                || (a == 192 && b == 168)
                || (a == 198 && (18..=19).contains(&b))
                || (a == 198 && b == 51 && c == 100)
                || (a == 203 && b == 0 && c == 113)
                || a >= 224)
        }
        IpAddr::V6(v6) => {
            let [first, second, ..] = v6.segments();
            let global_unicast = (first & 0xe000) == 0x2000;
            let special = match first {
                // 2001::/23 (IETF protocol assignments) and 2001:db8::/32 (documentation).
                0x2001 => second < 0x0200 || second == 0x0db8,
                // 6to4.
                0x2002 => true,
                // 3fff::/20 (documentation).
                0x3fff => second < 0x1000,
                _ => false,
            };
            global_unicast && !special
        }
    }
}

impl Engine {
    /// Checks a webhook URL: HTTPS to a public host, unless insecure webhooks are allowed.
    fn check_url(&self, url: &str) -> Result<String, ApiError> {
        let url = url.trim();
        let bad = || {
            ApiError::validation(
                "url must be an absolute https:// URL (http:// and private hosts only in insecure sandbox mode)",
            )
        };
        if url.len() > 2_048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad());
        }
        let insecure = self.config.allow_insecure_webhooks;
        let rest = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => rest,
            (None, Some(rest)) if insecure => rest,
            _ => return Err(bad()),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host_port = authority.rsplit('@').next().unwrap_or("");
        let host = if host_port.starts_with('[') {
            host_port.split(']').next().map(|h| format!("{h}]")).unwrap_or_default()
        } else {
            host_port.split(':').next().unwrap_or("").to_string()
        };
        if host.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        if !insecure && is_private_host(&host) {
            return Err(bad());
        }
        Ok(url.to_string())
    }

    fn check_events(events: &[String]) -> Result<Subscription, ApiError> {
        if events.is_empty() {
            return Err(ApiError::validation("events must list at least one event name, or [\"*\"]"));
        }
        if events.iter().any(|e| e == "*") {
            return Ok(Subscription::All);
        }
        let mut set = BTreeSet::new();
        for name in events {
            match EventName::parse(name) {
                Some(event) if event != EventName::Test => {
                    set.insert(event);
                }
                _ => return Err(ApiError::validation(format!("events: unknown event name {name:?}"))),
            }
        }
        Ok(Subscription::Events(set))
    }

    fn webhook_of(&self, account: AccountIx, webhook_id: &str) -> Result<WebhookIx, ApiError> {
        match self.webhook_index.get(webhook_id) {
            Some(&w) if self.webhooks[w].account == account && !self.webhooks[w].deleted => Ok(w),
            _ => Err(ApiError::new(ErrorCode::NotFound, format!("no webhook {webhook_id}"))),
        }
    }

    /// `POST /webhooks/{id}/rotate-secret`: the shell's new secret signs from now on; the
    /// current one keeps signing beside it for `SECRET_ROTATION_OVERLAP_MS` (decision 116).
    /// An unknown webhook is 404 first; a frozen account 403 (decision 233).
    pub(crate) fn rotate_webhook_secret(
        &mut self,
        account: AccountIx,
        webhook_id: &str,
        signing_secret: SealedSecret,
    ) -> Response {
        assert!(!signing_secret.is_unset(), "the shell seals a new secret into every rotation");
        let webhook = self.webhook_of(account, webhook_id)?;
        self.require_not_frozen(account)?;
        let until = self.now.plus_ms(limits::SECRET_ROTATION_OVERLAP_MS);
        let record = &mut self.webhooks[webhook];
        let previous = std::mem::replace(&mut record.signing_secret, signing_secret.clone());
        record.previous_secret = Some((previous, until));
        Ok(Reply::WebhookSecretRotated(WebhookCreated {
            webhook: self.webhook_record(webhook),
            signing_secret: String::new(),
            sealed: signing_secret,
            note: ROTATION_NOTE,
        }))
    }

    fn webhook_record(&self, webhook: WebhookIx) -> WebhookRecord {
        let w = &self.webhooks[webhook];
        WebhookRecord {
            id: w.id.clone(),
            url: w.url.clone(),
            events: w.events.clone(),
            active: w.active,
            failure_count: w.failure_count,
            last_triggered_at: w.last_triggered_at,
            last_failure_at: w.last_failure_at,
            created_at: w.created_at,
        }
    }

    pub(crate) fn list_webhooks(&self, account: AccountIx) -> Response {
        Ok(Reply::WebhookList(WebhookList {
            webhooks: self.accounts[account].webhooks.iter().map(|&w| self.webhook_record(w)).collect(),
            available_events: EventName::SUBSCRIBABLE.iter().map(|e| e.as_str()).collect(),
        }))
    }

    pub(crate) fn create_webhook(
        &mut self,
        account: AccountIx,
        url: String,
        events: Vec<String>,
        signing_secret: SealedSecret,
    ) -> Response {
        assert!(!signing_secret.is_unset(), "the shell seals a new secret into every webhook creation");
        let url = self.check_url(&url)?;
        let subscription = Self::check_events(&events)?;
        if self.accounts[account].webhooks.len() >= limits::MAX_WEBHOOKS {
            return Err(ApiError::new(
                ErrorCode::WebhookLimitReached,
                format!("at most {} webhooks per account", limits::MAX_WEBHOOKS),
            ));
        }
        let id = self.random_id(Purpose::ResourceId, "wh_", 8);
        let webhook = WebhookIx(self.webhooks.len() as u32);
        self.webhooks.push(Webhook {
            id: id.clone(),
            account,
            url,
            events,
            subscription,
            signing_secret: signing_secret.clone(),
            previous_secret: None,
            active: true,
            failure_count: 0,
            last_triggered_at: None,
            last_failure_at: None,
            created_at: self.now,
            deleted: false,
            delivery_log: Default::default(),
        });
        let previous = self.webhook_index.insert(id, webhook);
        assert!(previous.is_none(), "webhook ids are unique");
        self.accounts[account].webhooks.push(webhook);
        assert!(self.accounts[account].webhooks.len() <= limits::MAX_WEBHOOKS, "an account holds at most its webhooks");
        // The shell, which drew the secret, shows it in the answer (once).
        Ok(Reply::WebhookCreated(WebhookCreated {
            webhook: self.webhook_record(webhook),
            signing_secret: String::new(),
            sealed: signing_secret,
            note: SECRET_NOTE,
        }))
    }

    pub(crate) fn get_webhook(&self, account: AccountIx, webhook_id: &str) -> Response {
        Ok(Reply::Webhook(self.webhook_record(self.webhook_of(account, webhook_id)?)))
    }

    pub(crate) fn update_webhook(
        &mut self,
        account: AccountIx,
        webhook_id: &str,
        url: Option<String>,
        events: Option<Vec<String>>,
        active: Option<bool>,
    ) -> Response {
        let webhook = self.webhook_of(account, webhook_id)?;
        let url = url.map(|u| self.check_url(&u)).transpose()?;
        let subscription = events.as_deref().map(Self::check_events).transpose()?;
        let record = &mut self.webhooks[webhook];
        if let Some(url) = url {
            record.url = url;
        }
        if let (Some(events), Some(subscription)) = (events, subscription) {
            record.events = events;
            record.subscription = subscription;
        }
        if let Some(active) = active {
            record.active = active;
            if active {
                record.failure_count = 0;
            }
        }
        Ok(Reply::Webhook(self.webhook_record(webhook)))
    }

    pub(crate) fn delete_webhook(&mut self, account: AccountIx, webhook_id: &str) -> Response {
        let webhook = self.webhook_of(account, webhook_id)?;
        self.webhooks[webhook].deleted = true;
        self.webhooks[webhook].active = false;
        // Invisible from now on: its log would only hold memory.
        self.webhooks[webhook].delivery_log.clear();
        self.accounts[account].webhooks.retain(|&w| w != webhook);
        Ok(Reply::Success(Success { success: true }))
    }

    /// `POST /webhooks/{id}/test`: a frozen account sends none, as it resends none
    /// (decision 233).
    pub(crate) fn test_webhook(&mut self, account: AccountIx, webhook_id: &str) -> Response {
        let webhook = self.webhook_of(account, webhook_id)?;
        self.require_not_frozen(account)?;
        let event = Event {
            id: self.random_id(Purpose::EventId, "evt_", 12),
            account,
            name: EventName::Test,
            created_at: self.now,
            data: EventData::Test(TestData { message: "This is a test event.", webhook_id: webhook_id.to_string() }),
        };
        let body = String::from_utf8(event.envelope_bytes()).expect("JSON is UTF-8");
        let delivery_id = self.start_delivery(webhook, &event, body, true);
        Ok(Reply::WebhookTestDispatched { delivery_id: delivery_id.0 })
    }

    /// Hands a first attempt to the shell.
    pub(crate) fn start_delivery(&mut self, webhook: WebhookIx, event: &Event, body: String, test: bool) -> DeliveryId {
        self.start_delivery_of(webhook, event.id.clone(), event.name, body, test, false)
    }

    fn start_delivery_of(
        &mut self,
        webhook: WebhookIx,
        event_id: String,
        event: EventName,
        body: String,
        test: bool,
        manual: bool,
    ) -> DeliveryId {
        let id = DeliveryId(self.next_delivery_id);
        self.next_delivery_id += 1;
        self.deliveries.insert(
            id,
            DeliveryState {
                webhook,
                event_id,
                event,
                body,
                attempt: 1,
                first_attempt_at: self.now,
                in_flight: true,
                test,
                manual,
                handed_out_at: self.now,
            },
        );
        self.push_delivery_effect(id);
        id
    }

    fn push_delivery_effect(&mut self, id: DeliveryId) {
        let state = &self.deliveries[&id];
        let webhook = &self.webhooks[state.webhook];
        let delivery = Delivery {
            delivery_id: id.0,
            webhook_id: webhook.id.clone(),
            url: webhook.url.clone(),
            event_id: state.event_id.clone(),
            event: state.event,
            signing_secret: webhook.signing_secret.clone(),
            previous_signing_secret: webhook
                .previous_secret
                .as_ref()
                .filter(|(_, until)| self.now < *until)
                .map(|(sealed, _)| sealed.clone()),
            body: state.body.clone(),
            timestamp: self.now,
            attempt: state.attempt,
            manual: state.manual,
        };
        self.effects.push_back(Effect::Deliver(delivery));
    }

    /// Deliveries handed out whose outcome never came back (the shell restarted):
    /// hand them out again. Receivers de-duplicate by event id.
    pub(crate) fn redeliver_in_flight(&mut self) {
        let ids: Vec<DeliveryId> = self.deliveries.iter().filter(|(_, d)| d.in_flight).map(|(id, _)| *id).collect();
        for id in ids {
            self.push_delivery_effect(id);
        }
    }

    pub(crate) fn record_delivery_outcome(
        &mut self,
        id: DeliveryId,
        result: DeliveryResult,
        duration_ms: Option<u64>,
    ) -> Response {
        let Some(state) = self.deliveries.get_mut(&id).filter(|d| d.in_flight) else {
            return Err(ApiError::new(ErrorCode::NotFound, format!("no delivery {} awaits an outcome", id.0)));
        };
        state.in_flight = false;
        let (webhook, test, manual, attempt, first) =
            (state.webhook, state.test, state.manual, state.attempt, state.first_attempt_at);
        let logged = DeliveryAttempt {
            delivery_id: id.0,
            event_id: state.event_id.clone(),
            event: state.event,
            attempt,
            manual,
            attempted_at: state.handed_out_at,
            result: match result.clone() {
                DeliveryResult::Failed(why) => DeliveryResult::Failed(cut_text(why, limits::DELIVERY_ERROR_TEXT_MAX)),
                other => other,
            },
            duration_ms,
            next_retry_at: None,
        };
        let next_retry_at = if test || manual {
            // One attempt each, counting nothing (decision 118): a probe or a resend the
            // reseller asked for says nothing of the receiver's health that automatic
            // deliveries would not.
            self.deliveries.remove(&id);
            None
        } else {
            self.count_outcome(id, webhook, &result, attempt, first)
        };
        self.log_attempt(webhook, DeliveryAttempt { next_retry_at, ..logged });
        if !test {
            return Ok(Reply::Success(Success { success: true }));
        }
        let (status, error) = match &result {
            DeliveryResult::Status(code) => (*code, None),
            DeliveryResult::Timeout => (0, Some("timeout".to_string())),
            DeliveryResult::Failed(why) => (0, Some(why.clone())),
        };
        Ok(Reply::WebhookTest(WebhookTestResult { success: result.is_success(), status, error }))
    }

    /// The outcome of an automatic attempt: the webhook's failure count, its disabling,
    /// and the delivery's retry, whose time it returns (None when the delivery is done).
    fn count_outcome(
        &mut self,
        id: DeliveryId,
        webhook: WebhookIx,
        result: &DeliveryResult,
        attempt: u32,
        first: Millis,
    ) -> Option<Millis> {
        let now = self.now;
        let record = &mut self.webhooks[webhook];
        if !record.active || record.deleted {
            // Disabled (by failures or by the reseller) or deleted while this attempt was
            // out: its outcome changes nothing, so an auto-disabled webhook keeps its
            // failure_count of 10 until the reseller re-enables it.
            self.deliveries.remove(&id);
            return None;
        }
        record.last_triggered_at = Some(now);
        if result.is_success() {
            record.failure_count = 0;
            self.deliveries.remove(&id);
            return None;
        }
        record.failure_count += 1;
        // Only an active webhook counts failures, and it is disabled at the limit.
        assert!(record.failure_count <= limits::WEBHOOK_DISABLE_AT, "failures beyond the disable limit");
        record.last_failure_at = Some(now);
        // 410 Gone: the receiver says the endpoint is gone for good (Standard Webhooks),
        // so it is disabled at once rather than retried (decision 115).
        let gone = matches!(result, DeliveryResult::Status(410));
        if gone || record.failure_count >= limits::WEBHOOK_DISABLE_AT {
            record.active = false;
            // Disabled: nothing more goes to it, including retries already waiting.
            self.deliveries.retain(|_, d| d.webhook != webhook || d.in_flight);
            self.deliveries.remove(&id);
            return None;
        }
        let retry_at = now.plus_ms(retry_wait_ms(attempt));
        if retry_at.0 - first.0 > limits::RETRY_WINDOW_MS {
            self.deliveries.remove(&id);
            return None;
        }
        self.schedule(retry_at, Timer::RetryDelivery(id));
        Some(retry_at)
    }

    /// Keeps a finished attempt in its webhook's log, letting the oldest go past the
    /// count or age limit (decision 118).
    fn log_attempt(&mut self, webhook: WebhookIx, attempt: DeliveryAttempt) {
        let now = self.now;
        let record = &mut self.webhooks[webhook];
        if record.deleted {
            return;
        }
        let log = &mut record.delivery_log;
        while log.len() >= limits::DELIVERY_LOG_PER_WEBHOOK_MAX
            || log.front().is_some_and(|oldest| now.0 - oldest.attempted_at.0 >= limits::EVENT_RETENTION_MS)
        {
            log.pop_front();
        }
        log.push_back(attempt);
        assert!(log.len() <= limits::DELIVERY_LOG_PER_WEBHOOK_MAX, "the delivery log is bounded");
    }

    /// `GET /webhooks/{id}/deliveries`: its finished attempts, newest first, one page.
    pub(crate) fn list_deliveries(
        &self,
        account: AccountIx,
        webhook_id: &str,
        event_id: Option<&str>,
        limit: Option<u64>,
        offset: Option<u64>,
    ) -> Response {
        let webhook = self.webhook_of(account, webhook_id)?;
        let (limit, offset) = crate::limits::page(limit, offset)?;
        let now = self.now;
        let shown = self.webhooks[webhook].delivery_log.iter().rev().filter(|attempt| {
            now.0 - attempt.attempted_at.0 < limits::EVENT_RETENTION_MS
                && event_id.is_none_or(|event_id| attempt.event_id == event_id)
        });
        let mut total = 0u64;
        let mut attempts = Vec::new();
        for attempt in shown {
            if total >= offset && (attempts.len() as u64) < limit {
                attempts.push(delivery_attempt_record(attempt));
            }
            total += 1;
        }
        Ok(Reply::DeliveryAttemptPage(DeliveryAttemptPage { attempts, total, limit, offset }))
    }

    /// `POST /events/{id}/resend`: the event's kept envelope, byte for byte, to one of
    /// the account's webhooks at once, as a manual delivery (decision 118). A disabled
    /// webhook takes it too: that is how a reseller checks a fixed receiver before
    /// switching it back on. Unknown ids are 404 first; a frozen account 403 (decision 233).
    pub(crate) fn resend_event(&mut self, account: AccountIx, event_id: &str, webhook_id: &str) -> Response {
        let (name, envelope) = self
            .kept_envelope(account, event_id)
            .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no event {event_id}")))?;
        let webhook = self.webhook_of(account, webhook_id)?;
        self.require_not_frozen(account)?;
        let id = self.start_delivery_of(webhook, event_id.to_string(), name, envelope, false, true);
        Ok(Reply::ResendAccepted(ResendAccepted {
            delivery_id: delivery_id_text(id.0),
            event_id: event_id.to_string(),
            event_type: name.as_str(),
            webhook_id: webhook_id.to_string(),
            queued_at: self.now,
        }))
    }

    pub(crate) fn retry_delivery(&mut self, id: DeliveryId) {
        // Stale when the webhook hit its failure limit while this retry waited: its
        // waiting retries were dropped then.
        let Some(state) = self.deliveries.get(&id) else { return };
        let webhook = &self.webhooks[state.webhook];
        if !webhook.active || webhook.deleted {
            // Disabled by the reseller or deleted while this retry waited: nothing more
            // goes to it.
            self.deliveries.remove(&id);
            return;
        }
        let state = self.deliveries.get_mut(&id).expect("checked above");
        state.attempt += 1;
        state.in_flight = true;
        // A restart hands in-flight attempts out again without touching the state
        // (`redeliver_in_flight`), so the hand-out time is set here and at the start.
        state.handed_out_at = self.now;
        self.push_delivery_effect(id);
    }
}

/// A delivery's id as the API shows it.
fn delivery_id_text(id: u64) -> String {
    format!("dlv_{id}")
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut_text(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

fn delivery_attempt_record(attempt: &DeliveryAttempt) -> DeliveryAttemptRecord {
    let (status, error) = match &attempt.result {
        DeliveryResult::Status(code) => (Some(*code), None),
        DeliveryResult::Timeout => (None, Some("timeout".to_string())),
        DeliveryResult::Failed(why) => (None, Some(why.clone())),
    };
    DeliveryAttemptRecord {
        delivery_id: delivery_id_text(attempt.delivery_id),
        event_id: attempt.event_id.clone(),
        event_type: attempt.event.as_str(),
        attempt: attempt.attempt,
        manual: attempt.manual,
        attempted_at: attempt.attempted_at,
        success: attempt.result.is_success(),
        status,
        error,
        duration_ms: attempt.duration_ms,
        next_retry_at: attempt.next_retry_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_cut_on_a_character_boundary() {
        assert_eq!(cut_text("abc".into(), 5), "abc");
        assert_eq!(cut_text("abcdef".into(), 3), "abc");
        assert_eq!(cut_text("aé".into(), 2), "a");
    }

    #[test]
    fn retry_schedule_doubles_and_caps() {
        assert_eq!(retry_wait_ms(1), 30_000);
        assert_eq!(retry_wait_ms(2), 60_000);
        assert_eq!(retry_wait_ms(3), 120_000);
        assert_eq!(retry_wait_ms(40), limits::RETRY_MAX_WAIT_MS);
    }

    #[test]
    fn private_hosts() {
        let private = [
            "localhost",
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.20.0.1",
            "[::1]",
            "169.254.1.1",
            // Forms a spec audit got through the first version of this check:
            "[::ffff:127.0.0.1]",
            "[::]",
            "0",
            "2130706433",
            "0x7f.1",
            "127.1",
            "localhost.",
            "[fd00::1]",
            "[fe80::1]",
            "100.64.0.1",
            "metadata.google.internal",
        ];
        for host in private {
            assert!(is_private_host(host), "{host}");
        }
        for host in ["example.com", "8.8.8.8", "172.32.0.1", "hooks.reseller.io", "[2001:4860:4860::8888]", "1.example"]
        {
            assert!(!is_private_host(host), "{host}");
        }
        // Zone ids, percent escapes and bracketed hosts that are not IPv6 addresses.
        for host in [
            "[fe80::1%25eth0]",
            "[fe80::1%eth0]",
            "[::ffff:127.0.0.1%25eth0]",
            "[2001:4860:4860::8888%25eth0]",
            "127%2e0%2e0%2e1",
            "[example.com]",
            "[8.8.8.8]",
            "[]",
            "[::ffff:0:0]",
            "[64:ff9b::a00:1]",
            "[2002:a00:1::]",
            "[fec0::1]",
        ] {
            assert!(is_private_host(host), "{host}");
        }
    }

    /// Every special-purpose range: one address inside (refused) and, where the range
    /// has a public neighbour, one just outside (accepted).
    #[test]
    fn public_ip_table() {
        let table: &[(&str, bool)] = &[
            // IPv4
            ("0.0.0.0", false),
            ("0.255.255.255", false),
            ("1.0.0.0", true),
            ("9.255.255.255", true),
            ("10.0.0.0", false),
            ("10.255.255.255", false),
            ("11.0.0.0", true),
            ("100.63.255.255", true),
            ("100.64.0.0", false),
            ("100.127.255.255", false),
            ("100.128.0.0", true),
            ("126.255.255.255", true),
            ("127.0.0.1", false),
            ("127.255.255.255", false),
            ("128.0.0.0", true),
            ("169.253.255.255", true),
            ("169.254.0.1", false),
            ("169.254.169.254", false),
            ("169.255.0.0", true),
            ("172.15.255.255", true),
            ("172.16.0.0", false),
            ("172.31.255.255", false),
            ("172.32.0.0", true),
            ("191.255.255.255", true),
            ("192.0.0.0", false),
            ("192.0.0.9", false),
            ("192.0.0.255", false),
            ("192.0.1.0", true),
            ("192.0.2.1", false),
            ("192.0.3.0", true),
            ("192.88.98.255", true),
            ("192.88.99.1", false),
            ("192.88.100.0", true),
            ("192.167.255.255", true),
            ("192.168.0.1", false),
            ("192.169.0.0", true),
            ("198.17.255.255", true),
            ("198.18.0.0", false),
            ("198.19.255.255", false),
            ("198.20.0.0", true),
            ("198.51.99.255", true),
            ("198.51.100.1", false),
            ("198.51.101.0", true),
            ("203.0.112.255", true),
            ("203.0.113.1", false),
            ("203.0.114.0", true),
            ("223.255.255.255", true),
            ("224.0.0.1", false),
            ("239.255.255.255", false),
            ("240.0.0.1", false),
            ("255.255.255.255", false),
            ("8.8.8.8", true),
            // IPv6 outside global unicast 2000::/3
            ("::", false),
            ("::1", false),
            ("::2", false),
            ("::a00:1", false),
            ("::808:808", false),
            ("::ffff:0:0", false),
            ("::ffff:127.0.0.1", false),
            ("::ffff:8.8.8.8", false),
            ("::ffff:0:808:808", false),
            ("64:ff9b::808:808", false),
            ("64:ff9b::a00:1", false),
            ("64:ff9b:1::808:808", false),
            ("100::1", false),
            ("100:0:0:1::1", false),
            ("5f00::1", false),
            ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", false),
            ("4000::1", false),
            ("fc00::1", false),
            ("fdff:ffff::1", false),
            ("fe80::1", false),
            ("febf::1", false),
            ("fec0::1", false),
            ("feff::1", false),
            ("ff02::1", false),
            ("ff0e::1", false),
            // IPv6 inside 2000::/3
            ("2000::1", true),
            ("2001::1", false),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", false),
            ("2001:1::1", false),
            ("2001:2::1", false),
            ("2001:10::1", false),
            ("2001:20::1", false),
            ("2001:1ff:ffff::1", false),
            ("2001:200::1", true),
            ("2001:db7:ffff::1", true),
            ("2001:db8::1", false),
            ("2001:db8:ffff::1", false),
            ("2001:db9::1", true),
            ("2001:4860:4860::8888", true),
            ("2001:ffff::1", true),
            ("2002::1", false),
            ("2002:a00:1::1", false),
            ("2002:808:808::1", false),
            ("2003::1", true),
            ("2606:4700::1111", true),
            ("3ffe:ffff::1", true),
            ("3fff::1", false),
            ("3fff:fff:ffff::1", false),
            ("3fff:1000::1", true),
        ];
        for (address, public) in table {
            let ip: core::net::IpAddr = address.parse().unwrap_or_else(|_| panic!("{address} parses"));
            assert_eq!(is_public_ip(ip), *public, "{address}");
        }
    }
}
