//! The events API over real HTTP (issue 14): `GET /events` lists an account's events
//! newest first with its filters, and `GET /events/{id}` answers the very bytes a real
//! receiver on loopback was sent; another account's events are unknown; after 30 days
//! an event is gone. The delivery log (`GET /webhooks/{id}/deliveries`) shows a failed
//! attempt, its retry and manual resends (`POST /events/{id}/resend`).

mod common;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

async fn events(server: &TestServer, key: &str, query: &str) -> Value {
    let page = server.api("GET", &format!("/events{query}"), key, None).await;
    assert_eq!(page.status, 200, "{query}: {}", page.body);
    page.body
}

fn ids(page: &Value) -> Vec<String> {
    page["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_listed_newest_first_filtered_and_answered_as_delivered() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(100.0).await;
    let hook = server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
    assert_eq!(hook.status, 201, "{}", hook.body);

    let first = server.provision(&key, None).await;
    server.advance(60).await;
    let second = server.provision(&key, None).await;
    let group = server.api("POST", "/groups", &key, Some(json!({"name": "Fleet"}))).await;
    let group_id = group.body["id"].as_str().unwrap().to_string();
    let funded = server.api("POST", &format!("/groups/{group_id}/fund"), &key, Some(json!({"amount": 10}))).await;
    assert_eq!(funded.status, 200, "{}", funded.body);
    let disabled = server.api("POST", &format!("/esim/{second}/disable"), &key, None).await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);

    // Every delivery, by event id: the events API must answer these exact bytes.
    let delivered = receiver.wait_for(4).await;
    let delivered: BTreeMap<String, Vec<u8>> =
        delivered.iter().map(|d| (d.json()["id"].as_str().unwrap().to_string(), d.body.to_vec())).collect();
    assert_eq!(delivered.len(), 4);
    let all = events(&server, &key, "").await;
    let listed = ids(&all);
    let names: Vec<&str> = all["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    // The top-up came before the webhook existed: listed, though nobody was sent it.
    assert_eq!(
        names,
        ["esim.data_suspended", "group.funded", "esim.provisioned", "esim.provisioned", "balance.topped_up"]
    );
    assert_eq!(all["total"], json!(5), "{all}");
    let times: Vec<&str> =
        all["events"].as_array().unwrap().iter().map(|e| e["created_at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
    for (id, listed_event) in listed.iter().zip(all["events"].as_array().unwrap()) {
        let one = server.api("GET", &format!("/events/{id}"), &key, None).await;
        assert_eq!(one.status, 200, "{}", one.body);
        assert_eq!(&one.body, listed_event, "the list carries the same envelope");
        if let Some(bytes) = delivered.get(id) {
            assert_eq!(one.raw.to_vec(), *bytes, "the delivered bytes of {id}");
        }
    }
    assert!(delivered.keys().all(|id| listed.contains(id)), "every delivered event is listed");

    // Filters.
    let provisioned = events(&server, &key, "?type=esim.provisioned").await;
    assert_eq!(provisioned["total"], json!(2));
    let of_second = events(&server, &key, &format!("?iccid={second}")).await;
    let second_names: Vec<&str> =
        of_second["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(second_names, ["esim.data_suspended", "esim.provisioned"]);
    let of_group = events(&server, &key, &format!("?group_id={group_id}")).await;
    assert_eq!(ids(&of_group).len(), 1);
    assert_eq!(of_group["events"][0]["event"], json!("group.funded"));
    let first_at = provisioned["events"][1]["created_at"].as_str().unwrap().to_string();
    assert_eq!(provisioned["events"][1]["data"]["iccid"], json!(first));
    let after_first = events(&server, &key, &format!("?created_after={first_at}")).await;
    assert_eq!(after_first["total"], json!(3), "strictly after the first provisioning");
    assert!(ids(&after_first).iter().all(|id| listed[..3].contains(id)));
    let second_at = provisioned["events"][0]["created_at"].as_str().unwrap();
    let before = events(&server, &key, &format!("?created_before={second_at}")).await;
    assert_eq!(ids(&before), listed[3..], "the first provisioning and the top-up");
    let paged = events(&server, &key, "?limit=1&offset=1").await;
    assert_eq!((ids(&paged), paged["total"].clone()), (vec![listed[1].clone()], json!(5)));

    // Bad filters are the spec's validation error.
    for bad in [
        "?type=esim.nope",
        "?type=test",
        "?created_after=yesterday",
        "?created_before=2026-02-31T00:00:00Z",
        "?limit=0",
    ] {
        let reply = server.api("GET", &format!("/events{bad}"), &key, None).await;
        assert_eq!((reply.status, reply.body["code"].clone()), (400, json!("VALIDATION_ERROR")), "{bad}");
    }

    // Another account sees none of them.
    let (_, other) = server.account(10.0).await;
    assert_eq!(events(&server, &other, "").await["total"], json!(1), "its own balance.topped_up only");
    let foreign = server.api("GET", &format!("/events/{}", listed[0]), &other, None).await;
    assert_eq!((foreign.status, foreign.body["code"].clone()), (404, json!("NOT_FOUND")));

    // Kept 30 days, then gone.
    server.advance(30 * 24 * 3600 - 120).await;
    assert_eq!(events(&server, &key, "").await["total"], json!(5), "still within 30 days");
    server.advance(120).await;
    assert_eq!(events(&server, &key, "").await["total"], json!(0), "all older than 30 days");
    let gone = server.api("GET", &format!("/events/{}", listed[0]), &key, None).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    server.stop().await;
}

/// Polls a webhook's delivery log until it shows `count` attempts (outcomes come back
/// from the sender asynchronously), at most 10 s.
async fn delivery_log(server: &TestServer, key: &str, webhook: &str, count: u64) -> Value {
    for _ in 0..1_000 {
        let page = server.api("GET", &format!("/webhooks/{webhook}/deliveries"), key, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        if page.body["total"].as_u64().unwrap() >= count {
            return page.body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the delivery log of {webhook} never showed {count} attempts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_log_shows_a_failed_attempt_its_retry_and_a_manual_resend() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    receiver.status.store(500, std::sync::atomic::Ordering::SeqCst);
    let (_, key) = server.account(100.0).await;
    let hook =
        server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["esim.provisioned"]}))).await;
    assert_eq!(hook.status, 201, "{}", hook.body);
    let webhook = hook.body["id"].as_str().unwrap().to_string();
    let secret = hook.body["signing_secret"].as_str().unwrap().to_string();

    // The first attempt fails: logged with its status, duration and next retry time.
    server.provision(&key, None).await;
    let first = receiver.wait_for(1).await.remove(0);
    let event_id = first.json()["id"].as_str().unwrap().to_string();
    let log = delivery_log(&server, &key, &webhook, 1).await;
    let failed = &log["attempts"][0];
    assert_eq!(
        (failed["event_id"].as_str(), failed["attempt"].clone(), failed["status"].clone(), failed["success"].clone()),
        (Some(event_id.as_str()), json!(1), json!(500), json!(false)),
        "{log}"
    );
    assert_eq!((failed["error"].clone(), failed["manual"].clone()), (Value::Null, json!(false)));
    assert!(failed["duration_ms"].is_u64(), "{failed}");
    let attempted_at = failed["attempted_at"].as_str().unwrap();
    let retry_at = failed["next_retry_at"].as_str().unwrap();
    let ms = |text: &str| esim_engine::Millis::parse_rfc3339(text).unwrap().0;
    assert_eq!(ms(retry_at) - ms(attempted_at), 30_000, "{attempted_at} -> {retry_at}");

    // Its retry, 30 s later, succeeds: newest first.
    receiver.status.store(200, std::sync::atomic::Ordering::SeqCst);
    server.advance(30).await;
    receiver.wait_for(2).await;
    let log = delivery_log(&server, &key, &webhook, 2).await;
    let retried = &log["attempts"][0];
    assert_eq!(
        (retried["attempt"].clone(), retried["status"].clone(), retried["success"].clone()),
        (json!(2), json!(200), json!(true)),
        "{log}"
    );
    assert_eq!(
        (retried["next_retry_at"].clone(), retried["delivery_id"].clone()),
        (Value::Null, failed["delivery_id"].clone())
    );

    // A manual resend: 202, the same bytes and event id at once, signed, attempt 1.
    let resend =
        server.api("POST", &format!("/events/{event_id}/resend"), &key, Some(json!({"webhook_id": webhook}))).await;
    assert_eq!(resend.status, 202, "{}", resend.body);
    assert_eq!(
        (resend.body["event_id"].as_str(), resend.body["webhook_id"].as_str()),
        (Some(event_id.as_str()), Some(webhook.as_str()))
    );
    let again = receiver.wait_for(3).await.remove(2);
    assert_eq!(again.body, first.body, "the same envelope, byte for byte");
    verify_signature(&again, &secret);
    assert_eq!(again.headers["webhook-id"].to_str().unwrap(), event_id);
    assert_eq!(again.headers["x-service-delivery-attempt"].to_str().unwrap(), "1");
    let log = delivery_log(&server, &key, &webhook, 3).await;
    let manual = &log["attempts"][0];
    assert_eq!((manual["manual"].clone(), manual["success"].clone()), (json!(true), json!(true)), "{log}");
    assert_eq!(manual["delivery_id"], resend.body["delivery_id"]);
    assert_ne!(manual["delivery_id"], failed["delivery_id"], "a resend is a delivery of its own");

    // A failing resend is not retried and not counted in failure_count.
    receiver.status.store(503, std::sync::atomic::Ordering::SeqCst);
    let resend =
        server.api("POST", &format!("/events/{event_id}/resend"), &key, Some(json!({"webhook_id": webhook}))).await;
    assert_eq!(resend.status, 202, "{}", resend.body);
    let log = delivery_log(&server, &key, &webhook, 4).await;
    assert_eq!(
        (log["attempts"][0]["status"].clone(), log["attempts"][0]["next_retry_at"].clone()),
        (json!(503), Value::Null)
    );
    let shown = server.api("GET", &format!("/webhooks/{webhook}"), &key, None).await;
    assert_eq!(shown.body["failure_count"], json!(0), "{}", shown.body);
    server.advance(3600).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(receiver.received.lock().unwrap().len(), 4, "never retried");

    // A receiver that is not there: no status, the error text says why.
    let dead =
        server.api("POST", "/webhooks", &key, Some(json!({"url": "http://127.0.0.1:1/none", "events": ["*"]}))).await;
    let dead = dead.body["id"].as_str().unwrap().to_string();
    let resend =
        server.api("POST", &format!("/events/{event_id}/resend"), &key, Some(json!({"webhook_id": dead}))).await;
    assert_eq!(resend.status, 202, "{}", resend.body);
    let log = delivery_log(&server, &key, &dead, 1).await;
    assert_eq!(log["attempts"][0]["status"], Value::Null, "{log}");
    assert!(!log["attempts"][0]["error"].as_str().unwrap().is_empty(), "{log}");

    // Paging and the event filter; the spec's errors.
    let page = server.api("GET", &format!("/webhooks/{webhook}/deliveries?limit=1&offset=3"), &key, None).await;
    assert_eq!((page.body["total"].clone(), page.body["attempts"][0]["attempt"].clone()), (json!(4), json!(1)));
    assert_eq!(page.body["attempts"][0]["manual"], json!(false), "the oldest: the first failed attempt");
    let none = server.api("GET", &format!("/webhooks/{webhook}/deliveries?event_id=evt_other"), &key, None).await;
    assert_eq!(none.body["total"], json!(0));
    let (_, other) = server.account(10.0).await;
    for (method, path, body) in [
        ("GET", format!("/webhooks/{webhook}/deliveries"), None),
        ("POST", format!("/events/{event_id}/resend"), Some(json!({"webhook_id": webhook}))),
    ] {
        let reply = server.api(method, &path, &other, body).await;
        assert_eq!((reply.status, reply.body["code"].clone()), (404, json!("NOT_FOUND")), "{path}");
    }
    let missing = server.api("POST", &format!("/events/{event_id}/resend"), &key, Some(json!({}))).await;
    assert_eq!((missing.status, missing.body["code"].clone()), (400, json!("VALIDATION_ERROR")));
    server.stop().await;
}
