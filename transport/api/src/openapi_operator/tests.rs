use super::*;
use crate::openapi::tests::{check, walk};
use crate::routes::{find, Match};
use crate::service::{ClockMode, Outcome, Service};
use esim_engine::{Engine, EngineConfig, Millis};
use std::collections::BTreeSet;

fn parsed(api: Api) -> Value {
    serde_json::from_slice(&served(api)).expect("the document is JSON")
}

const OPERATOR_APIS: [Api; 2] = [Api::Admin, Api::Sandbox];

#[test]
fn each_document_lists_exactly_the_routes_of_its_api() {
    for api in OPERATOR_APIS {
        let doc = parsed(api);
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["servers"][0]["url"], base(api));
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                let full = format!("{}{path}", base(api));
                item.as_object().unwrap().keys().map(move |method| (method.to_uppercase(), full.clone()))
            })
            .collect();
        let routed: BTreeSet<(String, String)> = Endpoint::ALL
            .iter()
            .filter(|endpoint| endpoint.documented_in() == api)
            .map(|endpoint| (endpoint.method().to_string(), endpoint.full_pattern()))
            .collect();
        assert_eq!(documented, routed, "{api:?}");
        // Every route of the API is in it, the document itself too.
        let of_api = Endpoint::ALL.iter().filter(|e| e.api() == api).count();
        assert_eq!(routed.len(), of_api + 1, "{api:?}: its routes and its document");
    }
    assert!(served(Api::Admin).len() > 10_000 && served(Api::Sandbox).len() > 5_000);
}

#[test]
fn every_reference_resolves_and_every_schema_is_used() {
    for api in OPERATOR_APIS {
        let doc = parsed(api);
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut values = Vec::new();
        walk(&doc, String::new(), &mut values);
        let mut referenced = BTreeSet::new();
        for (at, value) in &values {
            if let Some(target) = value.get("$ref").and_then(Value::as_str) {
                let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{at}: {target}"));
                assert!(schemas.contains_key(name), "{api:?}: dangling $ref at {at}: {target}");
                referenced.insert(name.to_string());
            }
        }
        // A schema is used by an operation, or only from another schema: walk both.
        let unused: Vec<&String> = schemas.keys().filter(|name| !referenced.contains(*name)).collect();
        assert!(unused.is_empty(), "{api:?}: unreferenced schemas: {unused:?}");
    }
}

#[test]
fn operations_are_complete_and_their_errors_match_their_codes() {
    for api in OPERATOR_APIS {
        let doc = parsed(api);
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let name = format!("{api:?} {method} {path}");
                assert!(ids.insert(op["operationId"].as_str().unwrap().to_string()), "duplicate id: {name}");
                assert!(op["summary"].is_string() && op["tags"][0].is_string(), "{name}");
                let in_path: BTreeSet<&str> =
                    path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect();
                let declared: BTreeSet<&str> = op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["in"] == "path")
                    .map(|p| p["name"].as_str().unwrap())
                    .collect();
                assert_eq!(in_path, declared, "{name}");
                let responses = op["responses"].as_object().unwrap();
                assert!(responses.keys().any(|s| s.starts_with('2')), "{name} has no success");
                for (status, response) in responses.iter().filter(|(status, _)| !status.starts_with('2')) {
                    let content = &response["content"]["application/json"];
                    assert_eq!(content["schema"]["$ref"], "#/components/schemas/Error", "{name} {status}");
                    for code in content["examples"].as_object().unwrap().keys() {
                        let code: ErrorCode = serde_json::from_value(json!(code)).unwrap();
                        assert_eq!(code.http_status().to_string(), *status, "{name}: {code:?}");
                    }
                }
                if path == "/openapi.json" {
                    assert_eq!(op["security"], json!([]), "{name}: public");
                    continue;
                }
                assert!(op.get("security").is_none(), "{name}: the document's admin token applies");
                let unauthorized = &responses["401"]["content"]["application/json"]["examples"];
                assert!(unauthorized["INVALID_ADMIN_TOKEN"].is_object(), "{name}");
                let write = method != "get";
                assert_eq!(responses.contains_key("503"), write, "{name}: a write may be refused for durability");
            }
        }
    }
}

/// The real service on the virtual clock, each answer checked against its document.
struct Operator {
    service: Service,
    docs: [(Api, Value); 2],
    /// (API, METHOD, relative path pattern, status) of every answer checked.
    seen: BTreeSet<(String, String, String, u16)>,
}

impl Operator {
    fn new() -> Operator {
        let engine = Engine::new(EngineConfig { seed: 5, ..EngineConfig::default() }, Millis::VIRTUAL_EPOCH);
        let service = Service::new(engine, "admin".into(), ClockMode::Virtual, crate::secrets::Secrets::seeded(5));
        Operator { service, docs: OPERATOR_APIS.map(|api| (api, parsed(api))), seen: BTreeSet::new() }
    }

    fn raw(&mut self, method: &str, uri: &str, token: Option<&str>, body: Option<Value>) -> http::Response<Bytes> {
        let mut builder = http::Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        match self.service.handle(Millis::VIRTUAL_EPOCH, &builder.body(body).unwrap()) {
            Outcome::Respond(response) => response,
            Outcome::AwaitDelivery(_) => panic!("no operator call waits for a delivery"),
        }
    }

    /// An operator call with `token`, checked strictly against its API's document.
    fn call_as(&mut self, method: &str, uri: &str, token: Option<&str>, body: Option<Value>) -> (u16, Value) {
        let response = self.raw(method, uri, token, body);
        let status = response.status().as_u16();
        let bare = uri.split('?').next().unwrap();
        let Match::Found(endpoint, _) = find(method, bare) else { panic!("{method} {bare} is not routed") };
        let api = endpoint.documented_in();
        let doc = &self.docs.iter().find(|(of, _)| *of == api).expect("an operator document").1;
        let relative = endpoint.full_pattern().strip_prefix(base(api)).unwrap().to_string();
        let documented = &doc["paths"][&relative][method.to_ascii_lowercase()]["responses"][status.to_string()];
        assert!(documented.is_object(), "{method} {relative} answered an undocumented {status}");
        let media_type = response.headers()[http::header::CONTENT_TYPE].to_str().unwrap().to_string();
        let content = &documented["content"][&media_type];
        assert!(content.is_object(), "{method} {relative} {status}: {media_type} is not documented");
        if media_type != "application/json" {
            self.seen.insert((format!("{api:?}"), method.into(), relative, status));
            return (status, Value::String(String::from_utf8_lossy(response.body()).into_owned()));
        }
        let value: Value = serde_json::from_slice(response.body()).unwrap();
        let mut problems = Vec::new();
        check(doc, &content["schema"], &value, "body", &mut problems);
        assert!(problems.is_empty(), "{method} {relative} {status}: {problems:#?}\n{value:#}");
        if status >= 400 {
            let code = value["code"].as_str().unwrap();
            assert!(content["examples"][code].is_object(), "{method} {relative}: {status} {code} is not documented");
        }
        self.seen.insert((format!("{api:?}"), method.into(), relative, status));
        (status, value)
    }

    fn call(&mut self, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(method, uri, Some("admin"), body)
    }

    fn expect(&mut self, method: &str, uri: &str, body: Option<Value>, status: u16) -> Value {
        let (got, value) = self.call(method, uri, body);
        assert_eq!(got, status, "{method} {uri}: {value}");
        value
    }

    fn expect_code(&mut self, method: &str, uri: &str, body: Option<Value>, code: &str) {
        let (_, value) = self.call(method, uri, body);
        assert_eq!(value["code"], code, "{method} {uri}: {value}");
    }
}

#[test]
fn every_answer_of_the_admin_api_matches_its_document() {
    let mut o = Operator::new();
    assert_eq!(o.call_as("GET", "/admin/v1/openapi.json", None, None).0, 200);
    assert_eq!(o.call_as("GET", "/admin/v1/state", Some("wrong"), None).0, 401);
    let created = o.expect("POST", "/admin/v1/accounts", Some(json!({ "contact_email": "ops@example.com" })), 201);
    let account = created["account_id"].as_str().unwrap().to_string();
    let key = created["api_key"].as_str().unwrap().to_string();
    o.expect_code("POST", "/admin/v1/accounts", Some(json!({ "contact_email": 5 })), "VALIDATION_ERROR");
    o.expect("GET", "/admin/v1/accounts?limit=5", None, 200);
    o.expect_code("GET", "/admin/v1/accounts?limit=0", None, "VALIDATION_ERROR");
    let at = |path: &str| format!("/admin/v1/accounts/{account}/{path}");
    o.expect("POST", &at("topups"), Some(json!({ "amount_usd": 50 })), 201);
    o.expect_code("POST", &at("topups"), Some(json!({ "amount_usd": 1 })), "VALIDATION_ERROR");
    o.expect_code(
        "POST",
        "/admin/v1/accounts/acc_0000000000000000/topups",
        Some(json!({ "amount_usd": 50 })),
        "ACCOUNT_NOT_FOUND",
    );
    o.expect("POST", &at("keys"), None, 201);
    o.expect("PUT", &at("freeze"), Some(json!({ "frozen": true })), 200);
    o.expect("PUT", &at("freeze"), Some(json!({ "frozen": false })), 200);
    o.expect("PUT", &at("auto-refill"), Some(json!({ "enabled": true, "amount_usd": 20, "card": "declined" })), 200);
    o.expect_code("PUT", &at("auto-refill"), Some(json!({})), "VALIDATION_ERROR");
    o.expect("PUT", &at("limits"), Some(json!({ "max_groups": 3 })), 200);
    o.expect_code("PUT", &at("limits"), Some(json!({ "max_groups": 0 })), "VALIDATION_ERROR");
    o.expect("PUT", "/admin/v1/inventory", Some(json!({ "available": 1000 })), 200);
    o.expect_code("PUT", "/admin/v1/inventory", Some(json!({ "available": -1 })), "VALIDATION_ERROR");
    for format in ["json", "csv", "md", "html"] {
        o.expect("GET", &format!("/admin/v1/reports/conservation?format={format}"), None, 200);
    }
    o.expect("GET", &format!("/admin/v1/reports/conservation?account_id={account}"), None, 200);
    o.expect_code("GET", "/admin/v1/reports/conservation?format=pdf", None, "VALIDATION_ERROR");
    o.expect_code("GET", "/admin/v1/reports/conservation?account_id=acc_0000000000000000", None, "ACCOUNT_NOT_FOUND");
    o.expect("GET", "/admin/v1/state", None, 200);
    o.expect("DELETE", &format!("/admin/v1/keys/{key}"), None, 200);
    o.expect_code("DELETE", "/admin/v1/keys/rsk_nope", None, "NOT_FOUND");
    every_success_was_seen(&o, Api::Admin);
}

#[test]
fn every_answer_of_the_sandbox_api_matches_its_document() {
    let mut o = Operator::new();
    assert_eq!(o.call_as("GET", "/sandbox/v1/openapi.json", None, None).0, 200);
    assert_eq!(o.call_as("GET", "/sandbox/v1/clock", None, None).0, 401);
    let clock = o.expect("GET", "/sandbox/v1/clock", None, 200);
    assert_eq!(clock["mode"], json!(ClockMode::Virtual), "the documented enum is ClockMode's serde form");
    assert_eq!(json!(ClockMode::Wall), "wall");
    o.expect("POST", "/sandbox/v1/clock/advance", Some(json!({ "seconds": 60 })), 200);
    o.expect_code("POST", "/sandbox/v1/clock/advance", Some(json!({ "seconds": 0 })), "VALIDATION_ERROR");
    let created = o.expect("POST", "/admin/v1/accounts", Some(json!({ "contact_email": "ops@example.com" })), 201);
    let (account, key) = (created["account_id"].as_str().unwrap(), created["api_key"].as_str().unwrap().to_string());
    o.expect("POST", &format!("/admin/v1/accounts/{account}/topups"), Some(json!({ "amount_usd": 50 })), 201);
    let provision = o.raw("POST", "/api/v2/reseller/esim/provision", Some(&key), None);
    assert_eq!(provision.status(), 201);
    let iccid = serde_json::from_slice::<Value>(provision.body()).unwrap()["iccid"].as_str().unwrap().to_string();
    let fund = json!({ "amount": 10 });
    assert_eq!(o.raw("POST", &format!("/api/v2/reseller/esim/{iccid}/fund"), Some(&key), Some(fund)).status(), 200);
    let esim = |path: &str| format!("/sandbox/v1/esims/{iccid}/{path}");
    o.expect("POST", &esim("install"), None, 200);
    o.expect_code("POST", "/sandbox/v1/esims/8944000000000000000/install", None, "ESIM_NOT_FOUND");
    o.expect("POST", &esim("usage"), Some(json!({ "mb": 5, "country": "FR" })), 200);
    let stopped = o.expect("POST", &esim("usage"), Some(json!({ "mb": 100000, "country": "FR" })), 200);
    assert_eq!(stopped["data_stopped"], true, "the credit ran out: {stopped}");
    // The usage waits for its report: the pending timers list it (every field checked).
    let pending = o.expect("GET", "/sandbox/v1/pending?limit=5", None, 200);
    assert!(pending["timers"].as_array().is_some_and(|timers| !timers.is_empty()), "{pending}");
    o.expect_code("GET", "/sandbox/v1/pending?limit=x", None, "VALIDATION_ERROR");
    o.expect_code("POST", &esim("usage"), Some(json!({ "mb": 5, "country": "XX" })), "VALIDATION_ERROR");
    o.expect("PUT", "/sandbox/v1/faults", Some(json!({ "upstream_pause_fails": true })), 200);
    o.expect_code("PUT", "/sandbox/v1/faults", Some(json!({ "network_read_fails": "yes" })), "VALIDATION_ERROR");
    every_success_was_seen(&o, Api::Sandbox);

    // On the wall clock, an advance is refused with its documented code.
    let engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
    o.service = Service::new(engine, "admin".into(), ClockMode::Wall, crate::secrets::Secrets::seeded(5));
    o.expect_code("POST", "/sandbox/v1/clock/advance", Some(json!({ "seconds": 1 })), "CLOCK_NOT_VIRTUAL");
}

fn every_success_was_seen(o: &Operator, api: Api) {
    let doc = &o.docs.iter().find(|(of, _)| *of == api).unwrap().1;
    let mut missing = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for status in op["responses"].as_object().unwrap().keys().filter(|s| s.starts_with('2')) {
                let key = (format!("{api:?}"), method.to_uppercase(), path.clone(), status.parse().unwrap());
                if !o.seen.contains(&key) {
                    missing.push(key);
                }
            }
        }
    }
    assert!(missing.is_empty(), "successes never exercised: {missing:?}");
}
