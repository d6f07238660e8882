//! End-to-end tests over real HTTP on 127.0.0.1:0 against the real server type, with a
//! real webhook receiver that verifies every signature.

mod common;
use bytes::Bytes;
use common::*;
use serde_json::{json, Value};

async fn register(server: &TestServer, key: &str, receiver: &Receiver) -> String {
    let reply = server.api("POST", "/webhooks", key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    reply.body["signing_secret"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_lifecycle_provision_install_fund_use_pause_report_defund_settle() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(100.0).await;
    let secret = register(&server, &key, &receiver).await;

    let iccid = server.provision(&key, None).await;
    let installed = server.admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await;
    assert_eq!(installed.status, 200);
    let funded = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 20}))).await;
    assert_eq!(funded.status, 200, "{}", funded.body);
    assert_eq!(funded.body["wallet_balance_usd"], json!(19.99));
    assert_eq!(funded.body["account_balance_remaining"], json!(78.25));
    assert!(String::from_utf8_lossy(&funded.raw).contains("\"wallet_balance_usd\":19.99"));

    let used = server
        .admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(json!({"mb": 500, "country": "DE"})))
        .await;
    assert_eq!(used.status, 200, "{}", used.body);
    let charged = used.body["charged_usd"].as_f64().unwrap();
    assert!(charged > 0.0);
    // During the reporting pause the charge is live but not reported.
    let detail = server.api("GET", &format!("/esim/{iccid}"), &key, None).await;
    assert_eq!(detail.body["total_data_charged_usd"], json!(0));
    server.advance(16 * 60 + 60).await;
    let detail = server.api("GET", &format!("/esim/{iccid}"), &key, None).await;
    assert_eq!(detail.body["total_data_charged_usd"].as_f64().unwrap(), charged);
    let shown = detail.body["wallet_balance_usd"].as_f64().unwrap();

    let defund = server.api("POST", &format!("/esim/{iccid}/defund"), &key, None).await;
    assert_eq!(defund.status, 202, "{}", defund.body);
    assert_eq!(defund.body["estimated_return_usd"].as_f64().unwrap(), shown);
    let before = server.api("GET", "/wallet/balance", &key, None).await.body["balance_usd"].as_f64().unwrap();
    server.advance(15 * 60).await;
    let after = server.api("GET", "/wallet/balance", &key, None).await.body["balance_usd"].as_f64().unwrap();
    assert!((after - before - shown).abs() < 1e-9, "credited the displayed balance: {before} -> {after}, {shown}");
    let settled = receiver.wait_event("esim.defunded").await;
    assert_eq!(settled.json()["data"]["iccid"], json!(iccid));

    let deliveries = receiver.wait_for(3).await;
    let names: Vec<String> = deliveries.iter().map(|d| d.event()).collect();
    for expected in ["esim.provisioned", "esim.activated", "esim.defunded"] {
        assert!(names.iter().any(|n| n == expected), "{expected} in {names:?}");
    }
    for delivery in &deliveries {
        verify_signature(delivery, &secret);
    }
    let report = server.admin("GET", "/admin/v1/reports/conservation", None).await;
    assert_eq!(report.body["conserved"], json!(true), "{}", report.body);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_lifecycle_create_fund_add_low_defund_rename() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(200.0).await;
    let secret = register(&server, &key, &receiver).await;
    let group = server.api("POST", "/groups", &key, Some(json!({"name": "Field team"}))).await;
    assert_eq!(group.status, 201, "{}", group.body);
    let gid = group.body["id"].as_str().unwrap().to_string();
    assert_eq!(group.body["low_balance_threshold_usd"], json!(10));
    assert_eq!(group.body["refill_amount_usd"], json!(25));

    let funded = server.api("POST", &format!("/groups/{gid}/fund"), &key, Some(json!({"amount": 27}))).await;
    assert_eq!(funded.status, 200, "{}", funded.body);
    receiver.wait_event("group.funded").await;

    // Add without balance: 200. With balance: 202 move_pending, settles later.
    let empty = server.provision(&key, None).await;
    let added = server.api("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({"iccid": empty}))).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let rich = server.provision(&key, None).await;
    server.api("POST", &format!("/esim/{rich}/fund"), &key, Some(json!({"amount": 9}))).await;
    let moving = server.api("POST", &format!("/groups/{gid}/esims"), &key, Some(json!({"iccid": rich}))).await;
    assert_eq!(moving.status, 202, "{}", moving.body);
    assert_eq!(moving.body["status"], json!("move_pending"));
    assert_eq!(moving.body["settles_in_minutes"], json!(15));
    server.advance(15 * 60).await;
    let members = server.api("GET", &format!("/groups/{gid}/esims"), &key, None).await;
    assert_eq!(members.body["total"], json!(2), "{}", members.body);

    // Usage drops the group below its threshold: group.balance_low with the refill amount.
    server.admin("POST", &format!("/sandbox/v1/esims/{empty}/install"), None).await;
    server.admin("POST", &format!("/sandbox/v1/esims/{empty}/usage"), Some(json!({"mb": 4000, "country": "DE"}))).await;
    let low = receiver.wait_event("group.balance_low").await;
    assert_eq!(low.json()["data"]["suggested_amount_usd"], json!(25));
    assert_eq!(low.json()["data"]["group_id"], json!(gid));

    let defund = server.api("POST", &format!("/groups/{gid}/defund"), &key, None).await;
    assert_eq!(defund.status, 200, "{}", defund.body);
    assert_eq!(
        server.api("POST", &format!("/groups/{gid}/defund"), &key, None).await.body["code"],
        json!("GROUP_DEFUND_PENDING")
    );
    server.advance(15 * 60).await;
    receiver.wait_event("group.defunded").await;
    let renamed = server.api("PATCH", &format!("/groups/{gid}"), &key, Some(json!({"name": "Reused"}))).await;
    assert_eq!((renamed.status, renamed.body["name"].clone()), (200, json!("Reused")));
    let detail = server.api("GET", &format!("/esim/{empty}"), &key, None).await;
    assert_eq!(detail.body["group_id"], json!(gid));
    assert!(detail.body.get("group_total_data_charged_usd").is_some());
    for delivery in receiver.wait_for(1).await {
        verify_signature(&delivery, &secret);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_missing_wrong_and_revoked_keys_and_admin_token() {
    let server = TestServer::start().await;
    let (id, key) = server.account(20.0).await;
    let missing = server.raw("GET", "/api/v2/reseller/wallet/balance", None, &[], Bytes::new()).await;
    assert_eq!((missing.status, missing.body["code"].clone()), (401, json!("INVALID_API_KEY")));
    assert!(missing.body["error"].is_string());
    let wrong = server.api("GET", "/wallet/balance", "rsk_wrong", None).await;
    assert_eq!(wrong.status, 401);
    let extra = server.admin("POST", &format!("/admin/v1/accounts/{id}/keys"), None).await;
    let second = extra.body["api_key"].as_str().unwrap().to_string();
    assert_eq!(server.api("GET", "/wallet/balance", &second, None).await.status, 200);
    assert_eq!(server.admin("DELETE", &format!("/admin/v1/keys/{second}"), None).await.status, 200);
    assert_eq!(server.api("GET", "/wallet/balance", &second, None).await.body["code"], json!("INVALID_API_KEY"));
    assert_eq!(server.api("GET", "/wallet/balance", &key, None).await.status, 200);
    let admin = server.call("POST", "/admin/v1/accounts", "nope", Some(json!({"contact_email": "a@b.c"}))).await;
    assert_eq!((admin.status, admin.body["code"].clone()), (401, json!("INVALID_ADMIN_TOKEN")));
    let sandbox = server.call("POST", "/sandbox/v1/clock/advance", &key, Some(json!({"seconds": 1}))).await;
    assert_eq!(sandbox.status, 401);
    let openapi = server.raw("GET", "/api/v2/reseller/openapi.json", None, &[], Bytes::new()).await;
    assert_eq!(openapi.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_accounts_resources_are_not_found() {
    let server = TestServer::start().await;
    let (_, alice) = server.account(50.0).await;
    let (_, bob) = server.account(50.0).await;
    let iccid = server.provision(&alice, None).await;
    let gid = server.api("POST", "/groups", &alice, Some(json!({"name": "A"}))).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (method, path, body) in [
        ("GET", format!("/esim/{iccid}"), None),
        ("POST", format!("/esim/{iccid}/fund"), Some(json!({"amount": 5}))),
        ("POST", format!("/esim/{iccid}/terminate"), None),
    ] {
        let reply = server.api(method, &path, &bob, body).await;
        assert_eq!((reply.status, reply.body["code"].clone()), (404, json!("ESIM_NOT_FOUND")), "{path}");
    }
    let reply = server.api("GET", &format!("/groups/{gid}"), &bob, None).await;
    assert_eq!((reply.status, reply.body["code"].clone()), (404, json!("GROUP_NOT_FOUND")));
    assert_eq!(server.api("GET", "/esim/list", &bob, None).await.body["total"], json!(0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429_with_retry_after() {
    let server = TestServer::start().await;
    let (_, key) = server.account(20.0).await;
    for _ in 0..100 {
        assert_eq!(server.api("GET", "/account", &key, None).await.status, 200);
    }
    let limited = server.api("GET", "/account", &key, None).await;
    assert_eq!((limited.status, limited.body["code"].clone()), (429, json!("RATE_LIMITED")));
    assert_eq!(limited.headers.get("retry-after").unwrap().to_str().unwrap(), "60");
    server.advance(60).await;
    assert_eq!(server.api("GET", "/account", &key, None).await.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_the_rate_limit_come_before_what_is_wrong_with_a_request() {
    let server = TestServer::start().await;
    let (_, key) = server.account(20.0).await;
    let fund = "/api/v2/reseller/esim/8900000000000000000/fund";
    let send = |path: &'static str, token: Option<&str>, body: &'static str| {
        let token = token.map(str::to_string);
        let server = &server;
        async move { server.raw("POST", path, token.as_deref(), &[], Bytes::from(body)).await }
    };
    let code = |reply: &common::Reply| (reply.status, reply.body["code"].as_str().unwrap_or("").to_string());
    // No key, or a wrong one: 401 whatever the body, the route or the method.
    for (path, body) in
        [(fund, "{bad"), (fund, "{}"), ("/api/v2/reseller/nothing/here", ""), ("/api/v2/reseller/wallet/balance", "")]
    {
        for token in [None, Some("rsk_wrong")] {
            let reply = send(path, token, body).await;
            assert_eq!(code(&reply), (401, "INVALID_API_KEY".into()), "{path} {body} {token:?}");
        }
    }
    // With the key: the request's own error.
    let key = key.as_str();
    assert_eq!(code(&send(fund, Some(key), "{bad").await), (400, "VALIDATION_ERROR".into()));
    assert_eq!(code(&send("/api/v2/reseller/nothing", Some(key), "").await), (404, "ROUTE_NOT_FOUND".into()));
    assert_eq!(code(&send("/api/v2/reseller/wallet/balance", Some(key), "").await), (405, "METHOD_NOT_ALLOWED".into()));
    // Bad requests count against the limit, and past it they get 429 too.
    for _ in 0..97 {
        assert_eq!(send(fund, Some(key), "{}").await.status, 400);
    }
    let limited = send(fund, Some(key), "{bad").await;
    assert_eq!(code(&limited), (429, "RATE_LIMITED".into()));
    assert!(limited.headers.contains_key("retry-after"));
    assert_eq!(server.api("GET", "/account", key, None).await.status, 429);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_retries_replay_the_same_bytes() {
    let server = TestServer::start().await;
    let (_, key) = server.account(50.0).await;
    let iccid = server.provision(&key, None).await;
    let path = format!("/api/v2/reseller/esim/{iccid}/fund");
    let send = |amount: &'static str| {
        server.raw(
            "POST",
            &path,
            Some(&key),
            &[("idempotency-key", "retry-1")],
            Bytes::from(format!("{{\"amount\": {amount}}}")),
        )
    };
    let first = send("10").await;
    let second = send("10").await;
    assert_eq!(first.status, 200);
    assert_eq!((first.status, first.raw.clone()), (second.status, second.raw.clone()));
    let balance = server.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(balance.body["balance_usd"], json!(38.25), "applied once");
    let reused = send("11").await;
    assert_eq!((reused.status, reused.body["code"].clone()), (409, json!("IDEMPOTENCY_KEY_REUSED")));
    // A provisioning retried: the same bytes, its QR code drawn again, one fee charged.
    let provision = || {
        server.raw(
            "POST",
            "/api/v2/reseller/esim/provision",
            Some(&key),
            &[("idempotency-key", "order-7")],
            Bytes::from("{}"),
        )
    };
    let (first, second) = (provision().await, provision().await);
    assert_eq!(first.status, 201);
    assert_eq!((first.status, first.raw.clone()), (second.status, second.raw.clone()));
    let qr = first.body["qr_code"].as_str().unwrap();
    assert!(qr.starts_with("data:image/png;base64,iVBORw0KGgo"), "a PNG: {}", &qr[..40.min(qr.len())]);
    let balance = server.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(balance.body["balance_usd"], json!(36.5), "one provisioning fee of 1.75");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_answer_the_right_4xx_and_change_nothing() {
    let server = TestServer::start().await;
    let (_, key) = server.account(50.0).await;
    let iccid = server.provision(&key, None).await;
    let gid =
        server.api("POST", "/groups", &key, Some(json!({"name": "G"}))).await.body["id"].as_str().unwrap().to_string();
    let digest = server.digest().await;
    let huge = "x".repeat(1024 * 1024 + 10);
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        ("POST", format!("/esim/{iccid}/fund"), "{not json".into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), "{}".into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), r#"{"amount":"10"}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), r#"{"amount":0}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), r#"{"amount":10000.01}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), r#"{"amount":1e400}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), "[1,2]".into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/fund"), r#"{"amount":999}"#.into(), 402, "INSUFFICIENT_BALANCE"),
        ("POST", format!("/esim/{iccid}/throttle"), r#"{"speed":"SPEED_9_KBPS"}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/esim/{iccid}/throttle"), r#"{"speed":12}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", "/esim/provision".into(), r#"{"label":5}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", "/esim/provision".into(), r#"{"group_id":"nope"}"#.into(), 400, "VALIDATION_ERROR"),
        (
            "POST",
            "/esim/provision".into(),
            r#"{"group_id":"00000000-0000-4000-8000-000000000000"}"#.into(),
            404,
            "GROUP_NOT_FOUND",
        ),
        ("GET", "/esim/list?limit=abc".into(), String::new(), 400, "VALIDATION_ERROR"),
        ("GET", "/esim/list?status=weird".into(), String::new(), 400, "VALIDATION_ERROR"),
        ("POST", "/groups".into(), r#"{"name":""}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", "/groups".into(), r#"{"name":"G"}"#.into(), 409, "GROUP_NAME_TAKEN"),
        ("PATCH", format!("/groups/{gid}"), "{}".into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/groups/{gid}/fund"), r#"{"amount":-1}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", format!("/groups/{gid}/esims"), "{}".into(), 400, "VALIDATION_ERROR"),
        ("POST", "/webhooks".into(), r#"{"url":"https://x.example","events":"*"}"#.into(), 400, "VALIDATION_ERROR"),
        ("POST", "/webhooks".into(), r#"{"url":"ftp://x","events":["*"]}"#.into(), 400, "VALIDATION_ERROR"),
        ("GET", "/webhooks/wh_missing".into(), String::new(), 404, "NOT_FOUND"),
        ("GET", "/esim/8900000000000000000".into(), String::new(), 404, "ESIM_NOT_FOUND"),
        ("GET", "/no/such/route".into(), String::new(), 404, "ROUTE_NOT_FOUND"),
        ("DELETE", "/wallet/balance".into(), String::new(), 405, "METHOD_NOT_ALLOWED"),
        ("POST", format!("/esim/{iccid}/fund"), huge, 413, "PAYLOAD_TOO_LARGE"),
    ];
    for (method, path, body, status, code) in cases {
        let reply = server
            .raw(
                method,
                &format!("/api/v2/reseller{path}"),
                Some(&key),
                &[("content-type", "application/json")],
                Bytes::from(body),
            )
            .await;
        assert_eq!(
            (reply.status, reply.body["code"].as_str().unwrap_or("?")),
            (status, code),
            "{method} {path}: {}",
            reply.body
        );
        assert!(reply.body["error"].is_string() && reply.body["message"].is_string(), "error body of {path}");
    }
    let field = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": "ten"}))).await;
    assert!(field.body["message"].as_str().unwrap().contains("amount"), "the message names the field");
    assert_eq!(server.digest().await, digest, "no bad input changed the state");
    // The other API's name for the amount (issue 37): the same 400, with a hint.
    let (account, _) = server.account(0.0).await;
    let hinted = [
        (server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount_usd": 5}))).await, "amount"),
        (server.api("POST", &format!("/groups/{gid}/fund"), &key, Some(json!({"amount_usd": 5}))).await, "amount"),
        (
            server.admin("POST", &format!("/admin/v1/accounts/{account}/topups"), Some(json!({"amount": 50}))).await,
            "amount_usd",
        ),
    ];
    for (reply, meant) in hinted {
        assert_eq!((reply.status, &reply.body["code"]), (400, &json!("VALIDATION_ERROR")), "{}", reply.body);
        let message = reply.body["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{meant} is required")), "{message}");
        assert!(message.contains(&format!("did you mean `{meant}`?")), "{message}");
    }
    let top_up = server.admin("POST", &format!("/admin/v1/accounts/{account}/topups"), Some(json!({}))).await;
    assert_eq!(top_up.body["message"], json!("amount_usd is required"), "no hint without the look-alike");
    let balance = server.admin("GET", "/admin/v1/accounts", None).await.body["accounts"][1]["balance_usd"].clone();
    assert_eq!(balance, json!(0), "no top-up was made");
    server.stop().await;
}

/// Whether a JSON integer could be an instant in epoch milliseconds (2001 to 5138).
fn looks_like_epoch_ms(value: &Value) -> bool {
    value.as_i64().is_some_and(|n| (1_000_000_000_000..100_000_000_000_000).contains(&n))
}

/// The places in `value` where a time field (`*_at`, `now`, `due*`) holds an integer that
/// looks like epoch milliseconds, or (`*_at`, `now`) anything but RFC 3339 text or null.
fn ms_instants(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                let here = format!("{at}.{name}");
                let timed = name.ends_with("_at") || name == "now";
                if (timed || name.starts_with("due")) && looks_like_epoch_ms(field) {
                    found.push(format!("{here} = {field} (epoch milliseconds)"));
                } else if timed && !field.is_null() && !field.is_object() {
                    let text = field.as_str().unwrap_or_default();
                    let rfc3339 =
                        text.len() == 24 && text.ends_with('Z') && esim_engine::Millis::parse_rfc3339(text).is_some();
                    if !rfc3339 {
                        found.push(format!("{here} = {field} (not RFC 3339 UTC with milliseconds)"));
                    }
                }
                ms_instants(field, &here, found);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                ms_instants(item, &format!("{at}[{i}]"), found);
            }
        }
        _ => {}
    }
}

/// Issue 37: every time in every admin and sandbox GET reply is RFC 3339, like the
/// reseller API's. The GETs come from the endpoint table, so a new one is walked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_and_sandbox_reply_writes_times_in_rfc3339() {
    // The check can fail.
    let mut caught = Vec::new();
    ms_instants(&json!({"accounts": [{"created_at": 1_767_225_600_000_i64}], "now": "2026-01-01"}), "", &mut caught);
    ms_instants(&json!({"timers": [{"due_at": 1_767_225_600_000_i64, "due_in_seconds": 60}]}), "", &mut caught);
    assert_eq!(caught.len(), 3, "{caught:?}");

    // Some of everything: accounts, keys, a funded eSIM with usage to report, a return on
    // its way, a group, a webhook whose receiver fails (a retry waits), auto-refill.
    let server = TestServer::start().await;
    let (account, key) = server.account(100.0).await;
    server.admin("POST", &format!("/admin/v1/accounts/{account}/keys"), None).await;
    let refill = json!({"enabled": true, "amount_usd": 20, "card": "ok"});
    server.admin("PUT", &format!("/admin/v1/accounts/{account}/auto-refill"), Some(refill)).await;
    let failing =
        server.api("POST", "/webhooks", &key, Some(json!({"url": "http://127.0.0.1:9/", "events": ["*"]}))).await;
    assert_eq!(failing.status, 201, "{}", failing.body);
    let (kept, returned) = (server.provision(&key, None).await, server.provision(&key, None).await);
    for iccid in [&kept, &returned] {
        server.admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await;
        let funded = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 10}))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        let usage = json!({"mb": 100, "country": "DE"});
        server.admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(usage)).await;
    }
    assert_eq!(server.api("POST", &format!("/esim/{returned}/defund"), &key, None).await.status, 202);
    let group = server.api("POST", "/groups", &key, Some(json!({"name": "G"}))).await;
    assert_eq!(group.status, 201, "{}", group.body);
    server.advance(30).await;
    // The failed delivery's retry is set once the sender reports the failure.
    let mut pending = Value::Null;
    for _ in 0..100 {
        pending = server.admin("GET", "/sandbox/v1/pending", None).await.body;
        let kinds: Vec<&str> =
            pending["timers"].as_array().unwrap().iter().filter_map(|t| t["kind"].as_str()).collect();
        if ["usage_report", "esim_return", "webhook_retry"].iter().all(|kind| kinds.contains(kind)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(pending.to_string().contains("webhook_retry") && pending.to_string().contains("esim_return"), "{pending}");

    let (mut walked, mut found) = (Vec::new(), Vec::new());
    use esim_http::routes::{Api, Endpoint};
    for &endpoint in Endpoint::ALL {
        if endpoint.method() != "GET" || !matches!(endpoint.documented_in(), Api::Admin | Api::Sandbox) {
            continue;
        }
        assert_eq!(endpoint.parameters().count(), 0, "{endpoint:?}: give its path parameters here");
        let path = endpoint.full_pattern();
        let queries = match endpoint {
            Endpoint::ConservationReport => vec![String::new(), format!("?format=json&account_id={account}")],
            _ => vec![String::new()],
        };
        for query in &queries {
            let reply = server.admin("GET", &format!("{path}{query}"), None).await;
            assert_eq!(reply.status, 200, "GET {path}{query}: {}", reply.body);
            assert!(reply.body.is_object(), "GET {path}{query} answers JSON");
            ms_instants(&reply.body, &format!("GET {path}{query}"), &mut found);
            walked.push(format!("{path}{query}"));
        }
    }
    assert!(found.is_empty(), "times not in RFC 3339:\n{}", found.join("\n"));
    for expected in ["/admin/v1/accounts", "/admin/v1/state", "/sandbox/v1/clock", "/sandbox/v1/pending"] {
        assert!(walked.iter().any(|path| path == expected), "{expected} walked: {walked:?}");
    }
    let accounts = server.admin("GET", "/admin/v1/accounts", None).await.body;
    assert_eq!(accounts["accounts"][0]["created_at"], json!("2026-01-01T00:00:00.000Z"), "{accounts}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_test_endpoint_answers_with_the_receivers_real_status() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(20.0).await;
    let created =
        server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["esim.activated"]}))).await;
    let id = created.body["id"].as_str().unwrap().to_string();
    let secret = created.body["signing_secret"].as_str().unwrap().to_string();
    let ok = server.api("POST", &format!("/webhooks/{id}/test"), &key, None).await;
    assert_eq!((ok.status, ok.body["success"].clone(), ok.body["status"].clone()), (200, json!(true), json!(200)));
    receiver.status.store(503, std::sync::atomic::Ordering::SeqCst);
    let failing = server.api("POST", &format!("/webhooks/{id}/test"), &key, None).await;
    assert_eq!((failing.body["success"].clone(), failing.body["status"].clone()), (json!(false), json!(503)));
    let got = receiver.wait_for(2).await;
    assert_eq!(got[0].event(), "test");
    verify_signature(&got[0], &secret);
    let list = server.api("GET", "/webhooks", &key, None).await;
    assert_eq!(list.body["webhooks"][0]["failure_count"], json!(0));
    assert!(list.body["available_events"].as_array().unwrap().len() >= 18);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_cut_off_by_the_header_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut options = esim_http::server::ServerOptions::new(1, true);
    options.header_read_timeout = std::time::Duration::from_millis(300);
    let server = TestServer::start_with(options).await;
    let address = server.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream.write_all(b"GET /api/v2/reseller/account HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    // Never finish the headers: the server must close the connection by itself.
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "the connection was not cut off");
    // The service is still healthy for everyone else.
    let reply = server.raw("GET", "/api/v2/reseller/openapi.json", None, &[], Bytes::new()).await;
    assert_eq!(reply.status, 200);
    server.stop().await;
}
