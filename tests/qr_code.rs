//! QR codes over real HTTP: drawn by the connection task (off the owner task, issue 15),
//! byte for byte what the engine draws in place, in the provisioning answer, its
//! Idempotency-Key replay and `GET /esim/{iccid}/qr-code` (decision 130).

mod common;

use common::TestServer;

#[tokio::test]
async fn qr_codes_drawn_off_the_owner_task_are_the_engines_own() {
    let server = TestServer::start().await;
    let (_, key) = server.account(20.0).await;
    let headers = [("content-type", "application/json"), ("idempotency-key", "qr-1")];
    let body = bytes::Bytes::from_static(b"{\"label\":\"qr\"}");
    let first = server.raw("POST", "/api/v2/reseller/esim/provision", Some(&key), &headers, body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let lpa = first.body["lpa_string"].as_str().unwrap();
    let expected = esim_engine::codes::qr_png_data_url(lpa).unwrap();
    assert!(expected.len() > 500, "a real PNG");
    assert_eq!(first.body["qr_code"].as_str(), Some(expected.as_str()), "drawn in the connection task");

    let replay = server.raw("POST", "/api/v2/reseller/esim/provision", Some(&key), &headers, body).await;
    assert_eq!((replay.status, &replay.raw), (201, &first.raw), "the replay is byte for byte the first answer");

    let iccid = first.body["iccid"].as_str().unwrap();
    let again = server.api("GET", &format!("/esim/{iccid}/qr-code"), &key, None).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["qr_code"].as_str(), Some(expected.as_str()));
    assert_eq!(again.body["lpa_string"], first.body["lpa_string"]);
    assert_eq!(again.body["direct_install_url"], first.body["direct_install_url"]);
    let missing = server.api("GET", "/esim/8944000000000000000/qr-code", &key, None).await;
    assert_eq!((missing.status, missing.body["code"].as_str()), (404, Some("ESIM_NOT_FOUND")));
    server.stop().await;
}
