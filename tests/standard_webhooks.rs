//! Standard Webhooks (issue 14): every delivery a real receiver on loopback gets is
//! verified by the official Python library (`standardwebhooks` from PyPI, in a venv this
//! test makes once under the target dir) with its default 5-minute timestamp tolerance,
//! on the sandbox's virtual clock and on the wall clock; and by `X-Service-Signature`
//! as before. A tampered body or a wrong secret must fail the library's check.

mod common;
use base64::Engine as _;
use common::*;
use esim_http::server::ServerOptions;
use esim_http::ClockMode;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The venv's python with `standardwebhooks` installed (made once per target dir).
fn python() -> PathBuf {
    python_venv("standardwebhooks-venv", &["standardwebhooks"], "import standardwebhooks").join("python")
}

/// What the library says of each (secret, delivery): `ok`, or `fail <why>`.
const VERIFY: &str = r#"
import base64, json, sys
from standardwebhooks.webhooks import Webhook
for line in sys.stdin:
    case = json.loads(line)
    try:
        Webhook(case["secret"]).verify(base64.b64decode(case["body"]), case["headers"])
        print("ok", flush=True)
    except Exception as error:
        print("fail " + repr(error), flush=True)
"#;

fn library_verdicts(cases: &[(String, &Received, Option<&[u8]>)]) -> Vec<String> {
    let mut child = Command::new(python())
        .args(["-c", VERIFY])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the venv's python runs");
    let mut input = String::new();
    for (secret, delivery, body) in cases {
        let headers: serde_json::Map<String, serde_json::Value> = delivery
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_string(), json!(value.to_str().unwrap())))
            .collect();
        let body = body.unwrap_or(&delivery.body);
        let case = json!({
            "secret": secret,
            "headers": headers,
            "body": base64::engine::general_purpose::STANDARD.encode(body),
        });
        input.push_str(&format!("{case}\n"));
    }
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().lines().map(str::to_string).collect()
}

async fn deliveries_verify_with_the_library(clock: ClockMode) {
    let server = TestServer::start_on(ServerOptions::new(1, true), clock).await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(100.0).await;
    let hook = server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
    assert_eq!(hook.status, 201, "{}", hook.body);
    let secret = hook.body["signing_secret"].as_str().unwrap().to_string();
    let id = hook.body["id"].as_str().unwrap().to_string();
    let iccid = server.provision(&key, None).await;
    let funded = server.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({"amount": 20}))).await;
    assert_eq!(funded.status, 200, "{}", funded.body);
    let disabled = server.api("POST", &format!("/esim/{iccid}/disable"), &key, None).await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);
    let tested = server.api("POST", &format!("/webhooks/{id}/test"), &key, None).await;
    assert_eq!(tested.body["success"], json!(true), "{}", tested.body);

    let deliveries = receiver.wait_for(3).await;
    assert!(deliveries.len() >= 3, "{:?}", receiver.events());
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    for delivery in &deliveries {
        verify_signature(delivery, &secret);
        let header = |name: &str| delivery.headers.get(name).unwrap().to_str().unwrap().to_string();
        assert_eq!(header("webhook-id"), delivery.json()["id"].as_str().unwrap());
        let signed_at: i64 = header("webhook-timestamp").parse().unwrap();
        assert!((now_s - signed_at).abs() <= 60, "the attempt's wall-clock second: {signed_at} vs {now_s}");
    }
    let cases: Vec<(String, &Received, Option<&[u8]>)> = deliveries.iter().map(|d| (secret.clone(), d, None)).collect();
    let verdicts = library_verdicts(&cases);
    assert_eq!(verdicts, vec!["ok".to_string(); deliveries.len()], "every delivery verifies");

    // The check can fail: a changed body, or another secret.
    let tampered = deliveries[0].body.iter().copied().map(|b| if b == b'1' { b'2' } else { b }).collect::<Vec<u8>>();
    let other_secret = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode([7u8; 32]));
    let refused =
        library_verdicts(&[(secret.clone(), &deliveries[0], Some(&tampered)), (other_secret, &deliveries[0], None)]);
    assert!(refused.iter().all(|v| v.starts_with("fail") && v.contains("No matching signature")), "{refused:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_verify_with_the_standard_webhooks_library_on_the_virtual_clock() {
    deliveries_verify_with_the_library(ClockMode::Virtual).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_verify_with_the_standard_webhooks_library_on_the_wall_clock() {
    deliveries_verify_with_the_library(ClockMode::Wall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_both_secrets_verify_for_24_hours_then_only_the_new_one() {
    let server = TestServer::start().await;
    let receiver = Receiver::start().await;
    let (_, key) = server.account(100.0).await;
    let hook = server.api("POST", "/webhooks", &key, Some(json!({"url": receiver.url, "events": ["*"]}))).await;
    let old = hook.body["signing_secret"].as_str().unwrap().to_string();
    let id = hook.body["id"].as_str().unwrap().to_string();

    let path = format!("/api/v2/reseller/webhooks/{id}/rotate-secret");
    let headers = [("content-type", "application/json"), ("idempotency-key", "rotate-1")];
    let rotated = server.raw("POST", &path, Some(&key), &headers, bytes::Bytes::new()).await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new = rotated.body["signing_secret"].as_str().unwrap().to_string();
    assert!(new.starts_with("whsec_") && new != old);
    assert_eq!(rotated.body["id"], json!(id));
    // The same Idempotency-Key answers the same secret, and rotates nothing more.
    let again = server.raw("POST", &path, Some(&key), &headers, bytes::Bytes::new()).await;
    assert_eq!(again.body["signing_secret"], json!(new), "{} {}", again.status, again.body);
    let unknown = server.api("POST", "/webhooks/wh_0000000000000000/rotate-secret", &key, None).await;
    assert_eq!((unknown.status, unknown.body["code"].clone()), (404, json!("NOT_FOUND")));

    // During the overlap: two signatures, each secret verifies; ours uses the new one.
    server.provision(&key, None).await;
    let during = receiver.wait_for(1).await.pop().unwrap();
    let signatures = during.headers.get("webhook-signature").unwrap().to_str().unwrap().to_string();
    assert_eq!(signatures.split(' ').count(), 2, "{signatures}");
    verify_signature(&during, &new);
    let verdicts = library_verdicts(&[(old.clone(), &during, None), (new.clone(), &during, None)]);
    assert_eq!(verdicts, ["ok", "ok"]);

    // After 24 hours: the new secret only.
    server.advance(24 * 3600).await;
    server.provision(&key, None).await;
    let after = receiver.wait_for(2).await.pop().unwrap();
    let signatures = after.headers.get("webhook-signature").unwrap().to_str().unwrap().to_string();
    assert_eq!(signatures.split(' ').count(), 1, "{signatures}");
    verify_signature(&after, &new);
    let verdicts = library_verdicts(&[(old, &after, None), (new, &after, None)]);
    assert!(verdicts[0].starts_with("fail") && verdicts[1] == "ok", "{verdicts:?}");
    server.stop().await;
}
