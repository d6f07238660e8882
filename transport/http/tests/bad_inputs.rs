//! No input, however bad, gives a 5xx, panics, or breaks the money invariants: random
//! methods, paths built on every route, random bodies and credentials, through the
//! same API layer production uses.

use bytes::Bytes;
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, Reply};
use esim_http::routes::Endpoint;
use esim_http::{ClockMode, Outcome, Service};
use proptest::prelude::*;

const ADMIN: &str = "admin";

fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("{".to_string()),
        Just("null".to_string()),
        Just("[]".to_string()),
        "[ -~]{0,40}",
        (
            prop::sample::select(vec![
                "amount",
                "speed",
                "iccid",
                "name",
                "url",
                "events",
                "mb",
                "country",
                "seconds",
                "amount_usd",
                "frozen",
                "available",
                "contact_email",
                "active",
                "group_id",
                "low_balance_threshold_usd"
            ]),
            prop_oneof![
                Just("1".to_string()),
                Just("-1".to_string()),
                Just("0.001".to_string()),
                Just("1e400".to_string()),
                Just("99999999999999999999999999999999".to_string()),
                Just("\"x\"".to_string()),
                Just("true".to_string()),
                Just("[\"*\"]".to_string()),
                Just("{}".to_string()),
                Just("null".to_string()),
                Just("\"https://hooks.example.com\"".to_string()),
                Just("\"DE\"".to_string()),
            ],
        )
            .prop_map(|(field, value)| format!("{{\"{field}\": {value}}}")),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![Just("89".to_string()), Just("%ZZ".to_string()), Just("..".to_string()), "[a-z0-9_%-]{1,12}"]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_never_give_5xx(requests in prop::collection::vec((0..Endpoint::ALL.len(), prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE"]), segment(), body(), 0..3u8), 1..30)) {
        let mut service = Service::new(Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH), ADMIN.into(), ClockMode::Virtual, esim_http::secrets::Secrets::seeded(1));
        service.set_render_qr(false);
        let now = Millis::VIRTUAL_EPOCH;
        let Ok(Reply::AccountCreated(account)) = service.apply_command(now, Command::Admin(AdminOp::CreateAccount { contact_email: "a@b.c".into(), company_name: None, api_key_digest: Default::default(), api_key_prefix: String::new() })) else { panic!() };
        let _ = service.apply_command(now, Command::Admin(AdminOp::TopUp { account_id: account.account_id.clone(), amount_usd: 100.into() }));
        for (route, method, param, body, credential) in requests {
            let path: String = Endpoint::ALL[route].full_pattern()
                .split('/')
                .map(|s| if s.starts_with('{') { param.clone() } else { s.to_string() })
                .collect::<Vec<_>>()
                .join("/");
            let token = match credential { 0 => account.api_key.clone(), 1 => ADMIN.to_string(), _ => "rsk_bad".to_string() };
            let request = http::Request::builder()
                .method(method)
                .uri(path.as_str())
                .header("authorization", format!("Bearer {token}"))
                .body(Bytes::from(body.clone()))
                .unwrap();
            if let Outcome::Respond(response) = service.handle(now, &request) {
                prop_assert!(response.status().as_u16() < 500, "{method} {path} {body}: {}", response.status());
                let parsed: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
                if !response.status().is_success() {
                    prop_assert!(parsed["code"].is_string() && parsed["error"].is_string(), "error body of {method} {path}");
                }
            }
            while service.poll_effect().is_some() {}
            let violations = service.engine().money_violations();
            prop_assert!(violations.is_empty(), "{violations:?}");
        }
    }
}
