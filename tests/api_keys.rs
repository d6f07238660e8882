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
