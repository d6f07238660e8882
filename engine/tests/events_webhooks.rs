//! Events (every name, exact data fields), webhook delivery, signatures and failure counting.

mod common;
use common::*;
use esim_engine::event_log::EventFilter;
use esim_engine::*;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};

fn insecure() -> Harness {
    Harness::with_config(EngineConfig { seed: 11, allow_insecure_webhooks: true, ..EngineConfig::default() })
}

fn register(h: &mut Harness, r: &Reseller, events: &[&str]) -> (String, String) {
    match h.call(r, create_webhook("https://hooks.example.com/esim", events)) {
        // The shell shows the secret; the engine holds (and hands out) only the sealed form.
        Ok(Reply::WebhookCreated(w)) => {
            assert!(w.signing_secret.is_empty(), "the engine never shows a secret");
            (w.webhook.id, String::from_utf8(w.sealed.0).unwrap())
        }
        other => panic!("{other:?}"),
    }
}

fn deliveries(h: &mut Harness) -> Vec<Delivery> {
    h.effects.drain(..).map(|Effect::Deliver(d)| d).collect()
}

/// Drives one run that emits every subscribable event at least once.
fn run_everything(h: &mut Harness) -> Reseller {
    let r = h.reseller("40");
    register(h, &r, &["*"]);
    h.admin(AdminOp::SetAutoRefill {
        account_id: r.account_id.clone(),
        enabled: Some(true),
        amount_usd: Some(d("50")),
        card: Some(CardBehavior::Ok),
    })
    .unwrap();
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "9").unwrap();
    h.call(&r, ResellerOp::Disable { iccid: iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::Enable { iccid: iccid.clone() }).unwrap();
    h.usage(&iccid, "999999");
    h.advance_secs(17 * 60); // esim.balance_low + esim.balance_depleted
    h.fund(&r, &iccid, "9").unwrap();
    h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }).unwrap();
    h.advance_secs(15 * 60); // esim.defunded
    let gid = match h.call(
        &r,
        ResellerOp::CreateGroup { name: "G".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ) {
        Ok(Reply::GroupCreated(g)) => g.id,
        other => panic!("{other:?}"),
    };
    h.call(&r, ResellerOp::AddGroupEsim { group_id: gid.clone(), iccid: iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("12") }).unwrap();
    h.usage(&iccid, "999999"); // group.balance_low (waits for the card) + group.balance_depleted
    h.advance_secs(180); // card settles: topped_up + auto_refill_succeeded + the held low event
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("10") }).unwrap();
    h.call(&r, ResellerOp::DefundGroup { group_id: gid.clone() }).unwrap();
    h.advance_secs(15 * 60); // group.defunded
    h.call(&r, ResellerOp::RemoveGroupEsim { group_id: gid.clone(), iccid: iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::Terminate { iccid: iccid.clone() }).unwrap();
    // balance.low, balance.depleted and a failing card.
    h.admin(AdminOp::SetAutoRefill {
        account_id: r.account_id.clone(),
        enabled: Some(true),
        amount_usd: None,
        card: Some(CardBehavior::Expired),
    })
    .unwrap();
    let other = h.provision(&r);
    let balance = h.balance(&r);
    h.fund(&r, &other, &(balance - d("1.75")).to_string()).unwrap();
    h.provision(&r);
    h.advance_secs(180);
    r
}

#[test]
fn every_event_is_emitted_with_exactly_its_fields() {
    let mut h = insecure();
    run_everything(&mut h);
    let esim_common = ["iccid", "end_user_reference", "label"];
    let group_common = ["group_id", "name", "balance_usd"];
    let expected: BTreeMap<&str, Vec<&str>> = [
        ("esim.provisioned", vec!["lpa_string", "status", "created_at", "group_id"]),
        ("esim.activated", vec!["activated_at", "euicc_state", "status"]),
        ("esim.terminated", vec!["status", "terminated_at", "forfeited_usd"]),
        ("esim.data_suspended", vec![]),
        ("esim.data_resumed", vec![]),
        ("esim.balance_low", vec!["wallet_balance_usd", "threshold_usd"]),
        ("esim.balance_depleted", vec!["wallet_balance_usd"]),
        ("esim.defunded", vec!["returned_usd"]),
        ("esim.group_assigned", vec!["group_id", "group_name"]),
        ("esim.group_removed", vec!["group_id", "group_name"]),
        ("balance.low", vec!["balance_usd", "threshold_usd"]),
        ("balance.depleted", vec!["balance_usd"]),
        ("balance.topped_up", vec!["amount_usd", "new_balance_usd", "balance_usd", "source", "topup_id"]),
        ("balance.auto_refill_succeeded", vec!["amount_usd", "payment_intent_id", "balance_usd"]),
        ("balance.auto_refill_failed", vec!["amount_usd", "error_code", "error_message", "balance_usd"]),
        ("group.balance_low", vec!["suggested_amount_usd", "threshold_usd", "account_underfunded"]),
        ("group.funded", vec!["amount_usd"]),
        ("group.balance_depleted", vec![]),
        ("group.defunded", vec!["returned_usd"]),
    ]
    .into_iter()
    .collect();
    let seen: BTreeSet<&str> = h.events.iter().map(|e| e.name.as_str()).collect();
    let subscribable: BTreeSet<&str> = EventName::SUBSCRIBABLE.iter().map(|e| e.as_str()).collect();
    assert_eq!(seen, subscribable, "every subscribable event is emitted by some operation");
    for event in &h.events {
        let mut want: BTreeSet<&str> = expected[event.name.as_str()].iter().copied().collect();
        let common: &[&str] = match event.name.as_str().split('.').next().unwrap() {
            "esim" => &esim_common,
            "group" => &group_common,
            _ => &["balance_usd"],
        };
        want.extend(common);
        let data = event.data.wire();
        let keys: BTreeSet<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
        // topped_up from auto-refill has no topup_id; every other field is always there.
        if event.name == EventName::BalanceToppedUp && data["source"] == "auto_refill" {
            want.remove("topup_id");
        }
        assert_eq!(keys, want, "{}", event.name.as_str());
        assert!(event.id.starts_with("evt_"));
    }
    // The spec's own examples of values.
    let activated = h.events.iter().find(|e| e.name == EventName::EsimActivated).unwrap();
    assert_eq!(activated.data.wire()["euicc_state"], "ENABLED");
    let low = h.events.iter().find(|e| e.name == EventName::GroupBalanceLow).unwrap();
    assert_eq!(low.data.wire()["suggested_amount_usd"], 25.0);
    h.assert_conserved();
}

#[test]
fn deliveries_reach_subscribed_active_webhooks_with_a_verifiable_signature() {
    let mut h = insecure();
    let r = h.reseller("20");
    let (all_id, all_secret) = register(&mut h, &r, &["*"]);
    let (only_id, _) = register(&mut h, &r, &["esim.activated"]);
    h.effects.clear();
    let iccid = h.provision(&r);
    let sent = deliveries(&mut h);
    assert_eq!(sent.len(), 1, "only the * webhook wants esim.provisioned");
    let delivery = &sent[0];
    assert_eq!(delivery.webhook_id, all_id);
    // The delivery carries the webhook's sealed secret for the sender to sign with (the
    // signature itself is the transport's: `sender::delivery_headers`), and the body
    // an independent HMAC is computed over.
    assert_eq!(delivery.signing_secret, sealed(&all_secret));
    let mut mac = Hmac::<Sha256>::new_from_slice(all_secret.as_bytes()).unwrap();
    mac.update(delivery.body.as_bytes());
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(esim_engine::webhook::sign(&all_secret, delivery.body.as_bytes()), expected);
    assert_eq!(delivery.attempt, 1);
    let envelope: serde_json::Value = serde_json::from_str(&delivery.body).unwrap();
    assert_eq!(envelope["event"], "esim.provisioned");
    assert_eq!(delivery.event_id, envelope["id"].as_str().unwrap());
    assert_eq!(envelope.as_object().unwrap().keys().collect::<Vec<_>>(), ["created_at", "data", "event", "id"]);
    h.sandbox(SandboxOp::Install { iccid }).unwrap();
    let sent = deliveries(&mut h);
    let targets: BTreeSet<String> = sent.iter().map(|d| d.webhook_id.clone()).collect();
    assert_eq!(targets, [all_id, only_id].into_iter().collect());
}

fn fail(h: &mut Harness, id: u64) {
    h.run(Command::DeliveryOutcome { delivery_id: id, result: DeliveryResult::Status(500), duration_ms: None })
        .unwrap();
}

fn webhook(h: &mut Harness, r: &Reseller, id: &str) -> esim_engine::reply::WebhookRecord {
    match h.call(r, ResellerOp::GetWebhook { webhook_id: id.into() }) {
        Ok(Reply::Webhook(w)) => w,
        other => panic!("{other:?}"),
    }
}

#[test]
fn ten_consecutive_failures_disable_a_webhook_success_resets_and_put_active_resets() {
    let mut h = insecure();
    let r = h.reseller("100");
    let (id, _) = register(&mut h, &r, &["esim.provisioned"]);
    // 9 failures, then a success: the count resets.
    h.provision(&r);
    let mut delivery = deliveries(&mut h).remove(0);
    for attempt in 1..=9 {
        assert_eq!(delivery.attempt, attempt);
        fail(&mut h, delivery.delivery_id);
        assert_eq!(webhook(&mut h, &r, &id).failure_count, attempt);
        h.advance_secs(7 * 3600);
        delivery = deliveries(&mut h).remove(0);
    }
    h.run(Command::DeliveryOutcome {
        delivery_id: delivery.delivery_id,
        result: DeliveryResult::Status(200),
        duration_ms: None,
    })
    .unwrap();
    assert_eq!(webhook(&mut h, &r, &id).failure_count, 0);
    // 10 in a row (timeouts count too): inactive, and nothing more is sent.
    h.provision(&r);
    let mut delivery = deliveries(&mut h).remove(0);
    for attempt in 1..=10 {
        h.run(Command::DeliveryOutcome {
            delivery_id: delivery.delivery_id,
            result: if attempt % 2 == 0 { DeliveryResult::Timeout } else { DeliveryResult::Status(503) },
            duration_ms: None,
        })
        .unwrap();
        h.advance_secs(7 * 3600);
        if attempt < 10 {
            delivery = deliveries(&mut h).remove(0);
        }
    }
    let w = webhook(&mut h, &r, &id);
    assert_eq!((w.failure_count, w.active), (10, false));
    assert!(w.last_failure_at.is_some());
    h.provision(&r);
    h.advance_secs(3600);
    assert!(deliveries(&mut h).is_empty(), "an inactive webhook gets nothing");
    h.call(&r, ResellerOp::UpdateWebhook { webhook_id: id.clone(), url: None, events: None, active: Some(true) })
        .unwrap();
    let w = webhook(&mut h, &r, &id);
    assert_eq!((w.failure_count, w.active), (0, true));
    h.provision(&r);
    assert_eq!(deliveries(&mut h).len(), 1);
}

#[test]
fn retries_follow_the_exponential_schedule_and_give_up_after_three_days() {
    let mut h = insecure();
    let r = h.reseller("20");
    register(&mut h, &r, &["esim.provisioned"]);
    h.provision(&r);
    let first = deliveries(&mut h).remove(0);
    fail(&mut h, first.delivery_id);
    h.advance_secs(29);
    assert!(deliveries(&mut h).is_empty());
    h.advance_secs(1);
    let second = deliveries(&mut h).remove(0);
    assert_eq!((second.delivery_id, second.attempt, second.body.as_str()), (first.delivery_id, 2, first.body.as_str()));
    fail(&mut h, second.delivery_id);
    h.advance_secs(59);
    assert!(deliveries(&mut h).is_empty());
    h.advance_secs(1);
    assert_eq!(deliveries(&mut h)[0].attempt, 3);
}

#[test]
fn webhook_registration_rules() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    for (url, events) in [
        ("http://hooks.example.com/x", vec!["*"]),
        ("https://127.0.0.1/x", vec!["*"]),
        ("not a url", vec!["*"]),
        ("https://hooks.example.com/x", vec![]),
        ("https://hooks.example.com/x", vec!["esim.unknown"]),
        ("https://hooks.example.com/x", vec!["test"]),
    ] {
        let error = h
            .call(
                &r,
                ResellerOp::CreateWebhook {
                    url: url.into(),
                    events: events.iter().map(|e| e.to_string()).collect(),
                    signing_secret: sealed("whsec_x"),
                },
            )
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::ValidationError, "{url} {events:?}");
    }
    let Ok(Reply::WebhookCreated(w)) = h.call(&r, create_webhook("https://hooks.example.com/x", &["*"])) else {
        panic!()
    };
    assert_eq!(w.sealed, sealed("whsec_test"), "the engine keeps the secret as the shell sealed it");
    assert!(!w.note.is_empty());
    for _ in 0..4 {
        h.call(&r, create_webhook("https://hooks.example.com/x", &["*"])).unwrap();
    }
    assert_eq!(code(h.call(&r, create_webhook("https://hooks.example.com/x", &["*"]))), "WEBHOOK_LIMIT_REACHED");
    let Ok(Reply::WebhookList(list)) = h.call(&r, ResellerOp::ListWebhooks) else { panic!() };
    assert_eq!(list.webhooks.len(), 5);
    assert_eq!(list.available_events.len(), EventName::SUBSCRIBABLE.len());
    assert!(list.available_events.contains(&"group.balance_low"));
    let json = serde_json::to_value(&list.webhooks[0]).unwrap();
    assert!(json.get("signing_secret").is_none(), "the secret is shown only once");
    h.call(&r, ResellerOp::DeleteWebhook { webhook_id: w.webhook.id.clone() }).unwrap();
    assert_eq!(code(h.call(&r, ResellerOp::GetWebhook { webhook_id: w.webhook.id.clone() })), "NOT_FOUND");
    assert_eq!(code(h.call(&r, ResellerOp::DeleteWebhook { webhook_id: w.webhook.id })), "NOT_FOUND");
}

#[test]
fn test_endpoint_reports_the_receivers_status_without_counting() {
    let mut h = insecure();
    let r = h.reseller("20");
    let (id, _) = register(&mut h, &r, &["esim.activated"]);
    let Ok(Reply::WebhookTestDispatched { delivery_id }) =
        h.call(&r, ResellerOp::TestWebhook { webhook_id: id.clone() })
    else {
        panic!()
    };
    let sent = deliveries(&mut h);
    assert_eq!(sent[0].event, EventName::Test);
    let Ok(Reply::WebhookTest(result)) =
        h.run(Command::DeliveryOutcome { delivery_id, result: DeliveryResult::Status(418), duration_ms: None })
    else {
        panic!()
    };
    assert_eq!((result.success, result.status), (false, 418));
    assert_eq!(webhook(&mut h, &r, &id).failure_count, 0);
    assert!(h.events.iter().all(|e| e.name != EventName::Test), "test events are not account events");
}

/// Every error code the engine owns is produced by some command.
#[test]
fn every_engine_error_code_is_reachable() {
    let mut h = insecure();
    let mut seen = BTreeSet::new();
    let mut note = |response: Response| {
        if let Err(error) = response {
            seen.insert(error.code);
        }
    };
    let r = h.reseller("30");
    let poor = h.reseller("0");
    let bad_key = Reseller { account_id: String::new(), api_key: "rsk_x".into() };
    note(h.call(&bad_key, ResellerOp::Account));
    note(h.call(&poor, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None }));
    let iccid = h.provision_installed(&r);
    note(h.fund(&r, &iccid, "0"));
    note(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }));
    note(h.fund(&r, &iccid, "0.01"));
    note(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }));
    note(h.call(&r, ResellerOp::GetEsim { iccid: "89".into() }));
    note(h.call(&r, ResellerOp::GetWebhook { webhook_id: "wh_x".into() }));
    note(h.call(&r, ResellerOp::GetGroup { group_id: "g".into() }));
    h.fund(&r, &iccid, "10").unwrap();
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: Some(true), network_read_fails: None }).unwrap();
    note(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }));
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: Some(false), network_read_fails: None }).unwrap();
    h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }).unwrap();
    note(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }));
    note(h.fund(&r, &iccid, "1"));
    let Ok(Reply::GroupCreated(g)) = h.call(
        &r,
        ResellerOp::CreateGroup { name: "A".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ) else {
        panic!()
    };
    note(h.call(
        &r,
        ResellerOp::CreateGroup { name: "A".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ));
    h.admin(AdminOp::SetLimits { account_id: r.account_id.clone(), max_groups: Some(1), max_group_size: Some(2) })
        .unwrap();
    note(h.call(
        &r,
        ResellerOp::CreateGroup { name: "B".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ));
    let member = h.provision(&r);
    h.call(&r, ResellerOp::AddGroupEsim { group_id: g.id.clone(), iccid: member.clone() }).unwrap();
    note(h.call(&r, ResellerOp::AddGroupEsim { group_id: g.id.clone(), iccid: member.clone() }));
    note(h.fund(&r, &member, "1"));
    let mover = h.provision(&r);
    h.fund(&r, &mover, "2").unwrap();
    h.call(&r, ResellerOp::AddGroupEsim { group_id: g.id.clone(), iccid: mover.clone() }).unwrap();
    note(h.call(&r, ResellerOp::AddGroupEsim { group_id: g.id.clone(), iccid: mover.clone() }));
    let third = h.provision(&r);
    note(h.call(&r, ResellerOp::AddGroupEsim { group_id: g.id.clone(), iccid: third.clone() }));
    h.call(&r, ResellerOp::FundGroup { group_id: g.id.clone(), amount: d("1") }).unwrap();
    h.call(&r, ResellerOp::DefundGroup { group_id: g.id.clone() }).unwrap();
    note(h.call(&r, ResellerOp::DefundGroup { group_id: g.id.clone() }));
    h.call(&r, ResellerOp::Terminate { iccid: third.clone() }).unwrap();
    note(h.call(&r, ResellerOp::Terminate { iccid: third.clone() }));
    for _ in 0..5 {
        h.call(&r, create_webhook("https://hooks.example.com", &["*"])).unwrap();
    }
    note(h.call(&r, create_webhook("https://hooks.example.com", &["*"])));
    let key = |k: &str| {
        Command::Reseller(ResellerRequest {
            key_digest: KeyDigest::of(&r.api_key),
            idempotency_key: Some(k.into()),
            op: ResellerOp::Disable { iccid: iccid.clone() },
        })
    };
    h.run(key("k")).ok();
    note(h.run(Command::Reseller(ResellerRequest {
        key_digest: KeyDigest::of(&r.api_key),
        idempotency_key: Some("k".into()),
        op: ResellerOp::Enable { iccid: iccid.clone() },
    })));
    let standalone = h.provision(&r);
    h.admin(AdminOp::SetInventory { available: 0 }).unwrap();
    note(h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None }));
    h.admin(AdminOp::Freeze { account_id: r.account_id.clone(), frozen: true }).unwrap();
    note(h.call(&r, ResellerOp::Enable { iccid: standalone.clone() }));
    note(h.admin(AdminOp::TopUp { account_id: "acc_missing".into(), amount_usd: d("10") }));
    // API keys (decision 128): the last active one cannot go, the 21st cannot come (a
    // frozen account makes none at all, decision 233: thawed first).
    h.admin(AdminOp::Freeze { account_id: r.account_id.clone(), frozen: false }).unwrap();
    let Ok(Reply::ApiKeyList(list)) = h.call(&r, ResellerOp::ListApiKeys) else { panic!("the key list") };
    note(h.call(&r, ResellerOp::RevokeApiKey { key_id: list.keys[0].id.clone() }));
    for made in 1.. {
        let (key, api_key_digest) = h.draw_key();
        let answer = h.call(&r, ResellerOp::CreateApiKey { api_key_digest, api_key_prefix: key[..12].to_string() });
        if answer.is_err() {
            assert_eq!(made, limits::API_KEYS_PER_ACCOUNT_MAX, "the cap counts the first key too");
            note(answer);
            break;
        }
    }
    let engine_codes: BTreeSet<ErrorCode> = ErrorCode::ALL
        .into_iter()
        .filter(|c| {
            !matches!(
                c,
                ErrorCode::InvalidAdminToken
                    | ErrorCode::ClockNotVirtual
                    | ErrorCode::ServiceUnavailable
                    | ErrorCode::RouteNotFound
                    | ErrorCode::MethodNotAllowed
                    | ErrorCode::PayloadTooLarge
                    | ErrorCode::RequestTimeout
                    // The rate limit is the transport's admission (`admission.rs`).
                    | ErrorCode::RateLimited
            )
        })
        .collect();
    let missing: Vec<_> = engine_codes.difference(&seen).collect();
    assert!(missing.is_empty(), "never produced: {missing:?}");
}

/// The envelope as the engine wrote it before it kept events in a typed form: serde's
/// struct of the four fields, in this order (decision 155 keeps these bytes).
fn serde_envelope(event: &Event) -> String {
    #[derive(serde::Serialize)]
    struct Envelope<'a> {
        id: &'a str,
        event: &'static str,
        created_at: String,
        data: &'a serde_json::Value,
    }
    let envelope = Envelope {
        id: &event.id,
        event: event.name.as_str(),
        created_at: event.created_at.to_rfc3339(),
        data: &serde_json::to_value(&event.data).unwrap(),
    };
    serde_json::to_string(&envelope).unwrap()
}

fn shown(h: &mut Harness, r: &Reseller, event_id: &str) -> Result<String, &'static str> {
    match h.call(r, ResellerOp::GetEvent { event_id: event_id.into() }) {
        Ok(Reply::Event(envelope)) => Ok(envelope.json().to_string()),
        Err(error) => Err(error.code.as_str()),
        other => panic!("{other:?}"),
    }
}

fn listed(h: &mut Harness, r: &Reseller, filter: EventFilter) -> Vec<String> {
    match h.call(r, ResellerOp::ListEvents { filter, limit: Some(100), offset: None }) {
        Ok(Reply::EventPage(page)) => {
            assert_eq!(page.total as usize, page.events.len(), "one page holds them all");
            page.events.iter().map(|e| e.json().to_string()).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// Every kept event, typed (`esim.provisioned`, `esim.activated`) or kept as JSON text,
/// is shown by `GET /events/{id}` and `GET /events` byte for byte as it was delivered,
/// also after the state went through a snapshot; the `iccid` and `group_id` filters
/// find exactly the events whose data names them (decisions 154, 155).
#[test]
fn the_events_api_shows_every_event_as_delivered_also_after_a_snapshot() {
    let mut h = insecure();
    let r = run_everything(&mut h);
    let gid = match h.call(
        &r,
        ResellerOp::CreateGroup {
            name: "Fleet \"β\"".into(),
            low_balance_threshold_usd: None,
            refill_amount_usd: None,
        },
    ) {
        Ok(Reply::GroupCreated(g)) => g.id,
        other => panic!("{other:?}"),
    };
    h.admin(AdminOp::TopUp { account_id: r.account_id.clone(), amount_usd: d("50") }).unwrap();
    // A provisioning into a group without texts, and one with texts that need escaping.
    for (group_id, label) in [(Some(gid.clone()), None), (None, Some("tab\t\"quote\" ü".to_string()))] {
        let op = ResellerOp::Provision { end_user_reference: None, label, group_id };
        let Ok(Reply::Provisioned(p)) = h.call(&r, op) else { panic!("provision failed") };
        h.sandbox(SandboxOp::Install { iccid: p.iccid }).unwrap();
    }
    let delivered: BTreeMap<String, String> = deliveries(&mut h)
        .into_iter()
        .filter(|d| d.event != EventName::Test && d.attempt == 1 && !d.manual)
        .map(|d| (d.event_id, d.body))
        .collect();
    let events: Vec<Event> = h.events.iter().filter(|e| e.name != EventName::Test).cloned().collect();
    assert!(events.len() > 25, "{} events", events.len());
    let typed = [EventName::EsimProvisioned, EventName::EsimActivated];
    let checked = events.iter().filter(|e| delivered.contains_key(&e.id));
    assert!(checked.filter(|e| typed.contains(&e.name)).count() >= 2, "typed events were delivered: {delivered:?}");
    for event in &events {
        let envelope = serde_envelope(event);
        assert_eq!(String::from_utf8(event.envelope_bytes()).unwrap(), envelope);
        // (Some wait for an earlier delivery to the webhook to be answered.)
        if let Some(body) = delivered.get(&event.id) {
            assert_eq!(*body, envelope, "{} delivered", event.name.as_str());
        }
        assert_eq!(shown(&mut h, &r, &event.id), Ok(envelope), "{} shown", event.name.as_str());
    }
    let newest_first: Vec<String> = events.iter().rev().map(serde_envelope).collect();
    assert_eq!(listed(&mut h, &r, EventFilter::default()), newest_first);

    // Filters: what the data names, compared as text; an unknown eSIM or group: none.
    let named = |field: &str| -> BTreeSet<String> {
        events.iter().filter_map(|e| e.data.wire().get(field).and_then(|v| v.as_str()).map(str::to_string)).collect()
    };
    let (iccids, groups) = (named("iccid"), named("group_id"));
    assert!(iccids.len() >= 4 && groups.len() >= 2, "{iccids:?} {groups:?}");
    for (field, values) in [("iccid", &iccids), ("group_id", &groups)] {
        for value in values.iter().map(Some).chain([Some(&"8900000000000000000".to_string()), None]) {
            let Some(value) = value else { continue };
            let filter = match field {
                "iccid" => EventFilter { iccid: Some(value.clone()), ..EventFilter::default() },
                _ => EventFilter { group_id: Some(value.clone()), ..EventFilter::default() },
            };
            let want: Vec<String> = events
                .iter()
                .rev()
                .filter(|e| e.data.wire().get(field).and_then(|v| v.as_str()) == Some(value))
                .map(serde_envelope)
                .collect();
            assert_eq!(listed(&mut h, &r, filter), want, "{field} {value}");
        }
    }

    // Ids this build never drew, and another account's event, are unknown.
    let id = &events[0].id;
    let other = h.reseller("0");
    for unknown in [id.to_uppercase().replacen("EVT_", "evt_", 1), format!("{id}0"), "evt_zz".into(), id[..20].into()] {
        assert_eq!(shown(&mut h, &r, &unknown), Err("NOT_FOUND"), "{unknown}");
    }
    assert_eq!(shown(&mut h, &other, id), Err("NOT_FOUND"));

    // Through a snapshot: the same state (digest), the same envelopes.
    let text = serde_json::to_string(&h.engine).unwrap();
    let mut back = insecure();
    back.engine = serde_json::from_str(&text).unwrap();
    back.now = h.now;
    assert_eq!(back.engine.state_digest(), h.engine.state_digest());
    for event in &events {
        assert_eq!(shown(&mut back, &r, &event.id), Ok(serde_envelope(event)));
    }
    assert_eq!(listed(&mut back, &r, EventFilter::default()), newest_first);

    // A snapshot written before decision 155 (whole envelopes, `kept`) still reads:
    // the same envelopes, the same filters (decision 157).
    let kept: Vec<serde_json::Value> = events
        .iter()
        .enumerate()
        .map(|(seq, e)| {
            serde_json::json!({
                "seq": seq, "id": e.id, "account": e.account, "name": e.name, "created_at": e.created_at,
                "iccid": e.data.iccid(), "group_id": e.data.group_id(), "envelope": serde_envelope(e),
            })
        })
        .collect();
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    old["event_log"] = serde_json::json!({ "kept": kept, "first_seq": 0, "by_id": {}, "by_account": [] });
    let mut legacy = insecure();
    legacy.engine = serde_json::from_value(old).unwrap();
    legacy.now = h.now;
    for event in &events {
        assert_eq!(shown(&mut legacy, &r, &event.id), Ok(serde_envelope(event)));
    }
    assert_eq!(listed(&mut legacy, &r, EventFilter::default()), newest_first);
    for iccid in &iccids {
        let filter = EventFilter { iccid: Some(iccid.clone()), ..EventFilter::default() };
        assert_eq!(listed(&mut legacy, &r, filter.clone()), listed(&mut h, &r, filter), "{iccid}");
    }
    for group in &groups {
        let filter = EventFilter { group_id: Some(group.clone()), ..EventFilter::default() };
        assert_eq!(listed(&mut legacy, &r, filter.clone()), listed(&mut h, &r, filter), "{group}");
    }
    // New events are kept beside the old ones.
    let next = h.provision(&r);
    legacy.provision(&r);
    let filter = EventFilter { iccid: Some(next), ..EventFilter::default() };
    assert_eq!(listed(&mut legacy, &r, filter.clone()), listed(&mut h, &r, filter));
}
