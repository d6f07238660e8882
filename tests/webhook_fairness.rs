//! Webhook delivery that a slow receiver cannot turn against others (issue 14): a test
//! call answers within its own short limit against a receiver that never answers; a slow
//! receiver holds only its webhook's share of the delivery slots, so another account's
//! test call answers at once; a receiver answering 410 Gone disables its webhook.

mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A receiver on loopback that reads each request and answers 200 after `delay`
/// (`None`: never answers, holding the connection).
async fn slow_receiver(delay: Option<Duration>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buffer = [0u8; 16 * 1024];
                let _ = stream.read(&mut buffer).await;
                match delay {
                    Some(delay) => {
                        tokio::time::sleep(delay).await;
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(3_600)).await,
                }
            });
        }
    });
    format!("http://{address}/hooks")
}

async fn webhook(server: &TestServer, key: &str, url: &str) -> String {
    let made = server.api("POST", "/webhooks", key, Some(json!({"url": url, "events": ["*"]}))).await;
    assert_eq!(made.status, 201, "{}", made.body);
    made.body["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_call_answers_before_a_ten_second_client_gives_up() {
    let server = TestServer::start().await;
    let (_, key) = server.account(10.0).await;
    let silent = slow_receiver(None).await;
    let id = webhook(&server, &key, &silent).await;
    let started = Instant::now();
    let tested = server.api("POST", &format!("/webhooks/{id}/test"), &key, None).await;
    let took = started.elapsed();
    assert_eq!(tested.status, 200, "{}", tested.body);
    assert_eq!((tested.body["success"].clone(), tested.body["status"].clone()), (json!(false), json!(0)));
    assert_eq!(tested.body["error"], json!("timeout"));
    let limit = esim_http::sender::TEST_CALL_TIMEOUT;
    assert!(took >= limit && took < limit + Duration::from_secs(2), "answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_delays_only_its_own_deliveries() {
    let server = TestServer::start().await;
    // Account A: five webhooks on a receiver that answers after 9 s, and many events.
    let (_, slow_key) = server.account(100.0).await;
    let slow = slow_receiver(Some(Duration::from_secs(9))).await;
    let mut slow_hooks = Vec::new();
    for _ in 0..5 {
        slow_hooks.push(webhook(&server, &slow_key, &slow).await);
    }
    for _ in 0..20 {
        server.provision(&slow_key, None).await;
    }
    // A's own test calls pile up too (each bounded by the test-call limit).
    for hook in &slow_hooks {
        let server = TestServer::attach(server.base.clone());
        let (hook, key) = (hook.clone(), slow_key.clone());
        tokio::spawn(async move { server.api("POST", &format!("/webhooks/{hook}/test"), &key, None).await });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Account B, on a receiver that answers at once.
    let (_, key) = server.account(10.0).await;
    let receiver = Receiver::start().await;
    let id = webhook(&server, &key, &receiver.url).await;
    let started = Instant::now();
    let tested = server.api("POST", &format!("/webhooks/{id}/test"), &key, None).await;
    let took = started.elapsed();
    assert_eq!(tested.body["success"], json!(true), "{}", tested.body);
    assert!(took < Duration::from_secs(2), "the other account's test call took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_410_gone_disables_its_webhook_at_once() {
    let server = TestServer::start().await;
    let (_, key) = server.account(10.0).await;
    let receiver = Receiver::start().await;
    receiver.status.store(410, std::sync::atomic::Ordering::SeqCst);
    let id = webhook(&server, &key, &receiver.url).await;
    server.provision(&key, None).await;
    receiver.wait_for(1).await;
    let mut shown = json!(null);
    for _ in 0..100 {
        shown = server.api("GET", &format!("/webhooks/{id}"), &key, None).await.body;
        if shown["active"] == json!(false) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((shown["active"].clone(), shown["failure_count"].clone()), (json!(false), json!(1)), "{shown}");
    // A 500 instead only counts a failure.
    let (_, other) = server.account(10.0).await;
    let failing = Receiver::start().await;
    failing.status.store(500, std::sync::atomic::Ordering::SeqCst);
    let kept = webhook(&server, &other, &failing.url).await;
    server.provision(&other, None).await;
    failing.wait_for(1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let shown = server.api("GET", &format!("/webhooks/{kept}"), &other, None).await.body;
    assert_eq!((shown["active"].clone(), shown["failure_count"].clone()), (json!(true), json!(1)), "{shown}");
}
