//! The reseller's own API keys and auto-refill settings (decisions 128, 129), over real
//! HTTP on loopback: what the developer dashboard calls.

mod common;

use common::TestServer;
use serde_json::{json, Value};

fn ids(list: &Value) -> Vec<String> {
    list["keys"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn a_reseller_makes_lists_and_revokes_its_own_keys() {
    let server = TestServer::start().await;
    let (_, first) = server.account(20.0).await;

    let list = server.api("GET", "/keys", &first, None).await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert_eq!(ids(&list.body).len(), 1);
    let first_id = ids(&list.body)[0].clone();
    assert_eq!(list.body["keys"][0]["prefix"].as_str(), Some(&first[..12]), "the prefix is the key's first 12");
    assert_eq!(list.body["keys"][0]["current"], json!(true));
    assert!(list.body["keys"][0]["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));

    let last = server.api("DELETE", &format!("/keys/{first_id}"), &first, None).await;
    assert_eq!((last.status, last.body["code"].as_str()), (409, Some("LAST_API_KEY")), "{}", last.body);

    // A new key, once with an Idempotency-Key: the replay names the same key but cannot
    // show it again (only its digest was kept).
    let headers = [("content-type", "application/json"), ("idempotency-key", "make-key-1")];
    let made = server.raw("POST", "/api/v2/reseller/keys", Some(&first), &headers, Default::default()).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let second = made.body["api_key"].as_str().unwrap().to_string();
    assert!(second.starts_with("rsk_") && second.len() == 68, "{second}");
    assert_ne!(second, first);
    let again = server.raw("POST", "/api/v2/reseller/keys", Some(&first), &headers, Default::default()).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(again.body["id"], made.body["id"]);
    assert_eq!(again.body["api_key"], Value::Null, "a replay never shows a key: {}", again.body);

    // The new key works at once; the list marks it as the caller and never shows a key.
    assert_eq!(server.api("GET", "/wallet/balance", &second, None).await.status, 200);
    let list = server.api("GET", "/keys", &second, None).await;
    let made_id = made.body["id"].as_str().unwrap().to_string();
    let mut listed = ids(&list.body);
    listed.sort();
    let mut expected = vec![first_id.clone(), made_id.clone()];
    expected.sort();
    assert_eq!(listed, expected, "both keys (made in the same millisecond: listed by id)");
    for key in list.body["keys"].as_array().unwrap() {
        assert_eq!(key["current"], json!(key["id"] == json!(made_id)), "only the caller's key is current: {key}");
    }
    let text = String::from_utf8_lossy(&list.raw).to_string();
    assert!(!text.contains(&first) && !text.contains(&second), "no key in the list: {text}");

    // A key may revoke itself: from then on it answers 401 over HTTP.
    let own = server.api("DELETE", &format!("/keys/{}", made.body["id"].as_str().unwrap()), &second, None).await;
    assert_eq!((own.status, &own.body["revoked"]), (200, &json!(true)), "{}", own.body);
    let refused = server.api("GET", "/wallet/balance", &second, None).await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (401, Some("INVALID_API_KEY")));
    assert_eq!(server.api("GET", "/wallet/balance", &first, None).await.status, 200, "the first key still works");

    // Another account's key id is as unknown as a made-up one.
    let (_, other) = server.account(0.0).await;
    let theirs = server.api("DELETE", &format!("/keys/{first_id}"), &other, None).await;
    assert_eq!((theirs.status, theirs.body["code"].as_str()), (404, Some("NOT_FOUND")));
    assert_eq!(server.api("GET", "/wallet/balance", &first, None).await.status, 200);

    // At most 20 active keys per account.
    let mut made_count = 1;
    loop {
        let reply = server.api("POST", "/keys", &first, None).await;
        if reply.status != 201 {
            assert_eq!((reply.status, reply.body["code"].as_str()), (429, Some("API_KEY_LIMIT_REACHED")));
            break;
        }
        made_count += 1;
        assert!(made_count <= 20, "the cap holds");
    }
    assert_eq!(made_count, 20);
    server.stop().await;
}

#[tokio::test]
async fn a_reseller_turns_on_auto_refill_and_real_spend_charges_the_card() {
    let server = TestServer::start().await;
    let (_, key) = server.account(10.0).await;

    let settings = server.api("GET", "/auto-refill", &key, None).await;
    assert_eq!(settings.status, 200, "{}", settings.body);
    assert_eq!((&settings.body["enabled"], &settings.body["charges_last_24h"]), (&json!(false), &json!(0)));
    for bad in [json!({}), json!({ "amount_usd": 9.99 }), json!({ "amount_usd": 10.001 }), json!({ "enabled": "yes" })]
    {
        let refused = server.api("PUT", "/auto-refill", &key, Some(bad.clone())).await;
        assert_eq!((refused.status, refused.body["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{bad}");
    }
    let on = server.api("PUT", "/auto-refill", &key, Some(json!({ "enabled": true, "amount_usd": 30 }))).await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(
        (&on.body["enabled"], &on.body["amount_usd"], &on.body["card"]),
        (&json!(true), &json!(30), &json!("ok"))
    );

    // Provisionings spend the balance below $5: the card is charged, the credit arrives.
    for _ in 0..4 {
        server.provision(&key, None).await;
    }
    let charging = server.api("GET", "/auto-refill", &key, None).await;
    assert_eq!(charging.body["charge_in_flight_usd"], json!(30), "{}", charging.body);
    server.advance(180).await;
    let settled = server.api("GET", "/auto-refill", &key, None).await;
    assert_eq!((&settled.body["charges_last_24h"], &settled.body["charge_in_flight_usd"]), (&json!(1), &Value::Null));
    let wallet = server.api("GET", "/wallet/balance", &key, None).await;
    assert_eq!(wallet.body["balance_usd"], json!(33), "10 - 4 x 1.75 + 30: {}", wallet.body);

    let off = server.api("PUT", "/auto-refill", &key, Some(json!({ "enabled": false }))).await;
    assert_eq!((&off.body["enabled"], &off.body["amount_usd"]), (&json!(false), &json!(30)), "the amount is kept");
    server.stop().await;
}

/// What one request of the churning account got: the service second it was sent in and
/// its answer. A 429 must be the rate limit's own (code and `Retry-After` until the end of
/// the account's window, which began at second 0).
fn note(log: &mut Vec<(u64, u16)>, second: u64, reply: &common::Reply) {
    if reply.status == 429 {
        assert_eq!(reply.body["code"].as_str(), Some("RATE_LIMITED"), "{}", reply.body);
        let retry_after = reply.headers.get("retry-after").and_then(|v| v.to_str().ok());
        assert_eq!(retry_after, Some((60 - second).to_string().as_str()), "until the window ends");
    }
    log.push((second, reply.status));
}

/// Key churn (decision 230): an account that makes a key, revokes the previous one with
/// it and spends the new key's 100 requests, over and over for 20 s of service time, gets
/// no more non-429 answers in the minute than its account budget, while another account
/// keeps its own. On the virtual clock, so each request's minute is exact.
#[tokio::test]
async fn key_churn_stays_within_the_accounts_rate_limit() {
    const CHURN_SECONDS: u64 = 20;
    const STEPS_PER_SECOND: usize = 5;
    let per_key = esim_engine::EngineConfig::default().rate_limit_per_minute;
    let budget = (per_key * esim_http::admission::ACCOUNT_BUDGET_IN_KEYS) as usize;
    let server = TestServer::start().await;
    let (_, mut key) = server.account(20.0).await;
    let (_, other) = server.account(0.0).await;
    let mut log = Vec::new();
    let listed = server.api("GET", "/keys", &key, None).await;
    note(&mut log, 0, &listed);
    let mut key_id = ids(&listed.body).remove(0);
    for second in 0..CHURN_SECONDS {
        for _ in 0..STEPS_PER_SECOND {
            let made = server.api("POST", "/keys", &key, None).await;
            note(&mut log, second, &made);
            if made.status == 201 {
                let next = made.body["api_key"].as_str().unwrap().to_string();
                let revoked = server.api("DELETE", &format!("/keys/{key_id}"), &next, None).await;
                note(&mut log, second, &revoked);
                (key, key_id) = (next, made.body["id"].as_str().unwrap().to_string());
            }
            // What is left of the key's own 100 (the deletion and the next making count).
            for _ in 0..per_key - 2 {
                let read = server.api("GET", "/wallet/balance", &key, None).await;
                note(&mut log, second, &read);
            }
        }
        let theirs = server.api("GET", "/wallet/balance", &other, None).await;
        assert_eq!(theirs.status, 200, "another account keeps its own budget: {}", theirs.body);
        server.advance(1).await;
    }
    let admitted = log.iter().filter(|(_, status)| *status != 429).count();
    let refused = log.len() - admitted;
    assert!(log.len() > 4 * budget, "the churn sent {} requests, enough to show the limit", log.len());
    assert_eq!(admitted, budget, "{refused} refused: the account's keys together get the budget, no more");
    assert!(log.iter().all(|(_, status)| [200, 201, 429].contains(status)), "only answers or 429s");

    // The next minute the account's budget is back: for the key it holds, up to its 100.
    server.advance(60 - CHURN_SECONDS).await;
    assert_eq!(server.api("GET", "/wallet/balance", &key, None).await.status, 200);
    server.stop().await;
}

/// A frozen account (decision 233), over HTTP: no key made (403 ACCOUNT_SUSPENDED, the
/// code every refused spend gives), its keys still listed, one revoked; thawed, it makes
/// keys again.
#[tokio::test]
async fn a_frozen_account_lists_and_revokes_its_keys_but_makes_none() {
    let server = TestServer::start().await;
    let (account, first) = server.account(20.0).await;
    let made = server.api("POST", "/keys", &first, None).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let freeze = |frozen: bool| json!({ "frozen": frozen });
    let path = format!("/admin/v1/accounts/{account}/freeze");
    assert_eq!(server.admin("PUT", &path, Some(freeze(true))).await.status, 200);

    let refused = server.api("POST", "/keys", &first, None).await;
    assert_eq!((refused.status, refused.body["code"].as_str()), (403, Some("ACCOUNT_SUSPENDED")), "{}", refused.body);
    let on = server.api("PUT", "/auto-refill", &first, Some(json!({ "enabled": true }))).await;
    assert_eq!((on.status, on.body["code"].as_str()), (403, Some("ACCOUNT_SUSPENDED")), "{}", on.body);
    let list = server.api("GET", "/keys", &first, None).await;
    assert_eq!((list.status, ids(&list.body).len()), (200, 2), "{}", list.body);
    let revoked = server.api("DELETE", &format!("/keys/{}", made.body["id"].as_str().unwrap()), &first, None).await;
    assert_eq!(revoked.status, 200, "revoking only takes access away: {}", revoked.body);

    assert_eq!(server.admin("PUT", &path, Some(freeze(false))).await.status, 200);
    assert_eq!(server.api("POST", "/keys", &first, None).await.status, 201);
    server.stop().await;
}
