//! The OpenAPI 3.1 document of the reseller API, built from the route table so that
//! every routed path and method is in it, and nothing else (a test checks both ways).

use crate::routes::{full_path, Api, ROUTES};
use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// Per operation: summary, request body schema (if any), success status and schema,
/// and the error statuses the spec lists for it.
fn operation(method: &str, pattern: &str) -> (&'static str, Option<Value>, u16, &'static str, &'static [u16]) {
    let amount = json!({"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number", "minimum": 0.01, "maximum": 10000}}});
    match (method, pattern) {
        ("POST", "/esim/provision") => (
            "Provision an eSIM ($1.75 fee)",
            Some(
                json!({"type": "object", "properties": {"end_user_reference": {"type": "string"}, "label": {"type": "string"}, "group_id": {"type": "string", "format": "uuid"}}}),
            ),
            201,
            "ProvisionedEsim",
            &[400, 402, 403, 404, 429, 503],
        ),
        ("GET", "/esim/list") => ("List eSIMs", None, 200, "EsimPage", &[400]),
        ("GET", "/esim/{iccid}") => ("eSIM detail (live euicc_state)", None, 200, "EsimDetail", &[404]),
        ("POST", "/esim/{iccid}/enable") => ("Enable data", None, 200, "DataToggled", &[400, 402, 403, 404, 409]),
        ("POST", "/esim/{iccid}/disable") => ("Disable data", None, 200, "DataToggled", &[400, 404]),
        ("POST", "/esim/{iccid}/terminate") => {
            ("Terminate (remaining wallet forfeited)", None, 200, "Terminated", &[400, 404])
        }
        ("POST", "/esim/{iccid}/throttle") => (
            "Throttle speed",
            Some(
                json!({"type": "object", "required": ["speed"], "properties": {"speed": {"type": "string", "description": "NO_LIMIT, SPEED_100_KBPS to SPEED_3000_KBPS in 100 Kbps steps, SPEED_3500_KBPS, SPEED_4000_KBPS, SPEED_4500_KBPS, SPEED_5000_KBPS"}}}),
            ),
            200,
            "Throttled",
            &[400, 404],
        ),
        ("POST", "/esim/{iccid}/fund") => {
            ("Fund the eSIM wallet", Some(amount), 200, "Funded", &[400, 402, 403, 404, 409])
        }
        ("POST", "/esim/{iccid}/defund") => (
            "Return the unused balance (settles in about 15 minutes)",
            None,
            202,
            "DefundAccepted",
            &[400, 404, 409, 502],
        ),
        ("GET", "/groups") => ("List groups, newest first", None, 200, "GroupList", &[]),
        ("POST", "/groups") => (
            "Create a group",
            Some(
                json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "low_balance_threshold_usd": {"type": "number"}, "refill_amount_usd": {"type": "number"}}}),
            ),
            201,
            "Group",
            &[400, 409, 429],
        ),
        ("GET", "/groups/{id}") => ("Group detail", None, 200, "Group", &[404]),
        ("PATCH", "/groups/{id}") => (
            "Rename or change thresholds",
            Some(
                json!({"type": "object", "minProperties": 1, "properties": {"name": {"type": "string"}, "low_balance_threshold_usd": {"type": "number"}, "refill_amount_usd": {"type": "number"}}}),
            ),
            200,
            "Group",
            &[400, 404, 409],
        ),
        ("POST", "/groups/{id}/fund") => {
            ("Fund the group", Some(amount), 200, "GroupFunded", &[400, 402, 403, 404, 409])
        }
        ("POST", "/groups/{id}/defund") => {
            ("Return the group balance", None, 200, "GroupDefundAccepted", &[400, 404, 409, 502])
        }
        ("GET", "/groups/{id}/esims") => ("List group members", None, 200, "GroupMembers", &[400, 404]),
        ("POST", "/groups/{id}/esims") => (
            "Add an eSIM (200, or 202 move_pending)",
            Some(json!({"type": "object", "required": ["iccid"], "properties": {"iccid": {"type": "string"}}})),
            200,
            "GroupMemberChange",
            &[400, 404, 409, 429, 502],
        ),
        ("DELETE", "/groups/{id}/esims/{iccid}") => {
            ("Remove an eSIM from the group", None, 200, "GroupMemberChange", &[404])
        }
        ("GET", "/wallet/balance") => ("Reseller wallet balance", None, 200, "WalletBalance", &[]),
        ("GET", "/rates") => ("Data rates (10% below retail)", None, 200, "Rates", &[]),
        ("GET", "/account") => ("Account", None, 200, "Account", &[]),
        ("GET", "/webhooks") => ("List webhooks and subscribable events", None, 200, "WebhookList", &[]),
        ("POST", "/webhooks") => (
            "Register a webhook (secret shown once)",
            Some(
                json!({"type": "object", "required": ["url", "events"], "properties": {"url": {"type": "string", "format": "uri"}, "events": {"type": "array", "items": {"type": "string"}}}}),
            ),
            201,
            "WebhookWithSecret",
            &[400, 429],
        ),
        ("GET", "/webhooks/{id}") => ("Webhook", None, 200, "Webhook", &[404]),
        ("PUT", "/webhooks/{id}") => (
            "Update a webhook (active true resets failure_count)",
            Some(
                json!({"type": "object", "properties": {"url": {"type": "string", "format": "uri"}, "events": {"type": "array", "items": {"type": "string"}}, "active": {"type": "boolean"}}}),
            ),
            200,
            "Webhook",
            &[400, 404],
        ),
        ("DELETE", "/webhooks/{id}") => ("Delete a webhook", None, 200, "Success", &[404]),
        ("POST", "/webhooks/{id}/test") => {
            ("Send a test event; answers with the receiver's status", None, 200, "WebhookTestResult", &[404])
        }
        ("GET", "/openapi.json") => ("This document", None, 200, "OpenApi", &[]),
        _ => unreachable!("every reseller route has an operation: {method} {pattern}"),
    }
}

fn money() -> Value {
    json!({"type": "number"})
}
fn text() -> Value {
    json!({"type": "string"})
}
fn nullable_text() -> Value {
    json!({"type": ["string", "null"]})
}
fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}
fn nullable_time() -> Value {
    json!({"type": ["string", "null"], "format": "date-time"})
}
fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}
fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn schemas() -> Value {
    let esim_item = object(
        &[
            "id",
            "iccid",
            "status",
            "euicc_state",
            "end_user_reference",
            "label",
            "wallet_balance_usd",
            "total_data_charged_usd",
            "activated_at",
            "terminated_at",
            "created_at",
        ],
        json!({
            "id": {"type": "string", "format": "uuid"}, "iccid": text(),
            "status": {"type": "string", "enum": ["pending", "active", "suspended", "terminated"]},
            "euicc_state": {"type": ["string", "null"], "enum": ["RELEASED", "DOWNLOADED", "INSTALLED", "ENABLED", null]},
            "end_user_reference": nullable_text(), "label": nullable_text(), "wallet_balance_usd": money(),
            "total_data_charged_usd": {"type": ["number", "null"]}, "activated_at": nullable_time(),
            "terminated_at": nullable_time(), "created_at": time(), "group_id": text(),
        }),
    );
    let mut detail = esim_item.clone();
    let props = detail["properties"].as_object_mut().unwrap();
    props.insert("lpa_string".into(), text());
    props.insert("data_enabled".into(), json!({"type": "boolean"}));
    props.insert("throttle".into(), text());
    props.insert("group_total_data_charged_usd".into(), money());
    props.insert("pending".into(), json!({"type": "string", "enum": ["defund_pending", "move_pending"]}));
    detail["required"].as_array_mut().unwrap().push(json!("lpa_string"));
    let group = object(
        &[
            "id",
            "name",
            "balance_usd",
            "low_balance_threshold_usd",
            "refill_amount_usd",
            "esim_count",
            "total_data_charged_usd",
            "status",
            "created_at",
            "updated_at",
        ],
        json!({"id": {"type": "string", "format": "uuid"}, "name": text(), "balance_usd": money(), "low_balance_threshold_usd": money(), "refill_amount_usd": money(), "esim_count": {"type": "integer"}, "total_data_charged_usd": money(), "status": {"type": "string", "enum": ["active", "defund_pending"]}, "created_at": time(), "updated_at": time()}),
    );
    let webhook = object(
        &["id", "url", "events", "active", "failure_count", "last_triggered_at", "last_failure_at", "created_at"],
        json!({"id": text(), "url": {"type": "string", "format": "uri"}, "events": {"type": "array", "items": text()}, "active": {"type": "boolean"}, "failure_count": {"type": "integer", "maximum": 10}, "last_triggered_at": nullable_time(), "last_failure_at": nullable_time(), "created_at": time()}),
    );
    let mut with_secret = webhook.clone();
    with_secret["properties"]["signing_secret"] = text();
    with_secret["properties"]["note"] = text();
    with_secret["required"].as_array_mut().unwrap().extend([json!("signing_secret"), json!("note")]);
    let page = |items: &str| {
        object(
            &["esims", "total", "limit", "offset"],
            json!({"esims": {"type": "array", "items": reference(items)}, "total": {"type": "integer"}, "limit": {"type": "integer"}, "offset": {"type": "integer"}}),
        )
    };
    let mut members = page("EsimItem");
    members["properties"]["group_id"] = text();
    json!({
        "Error": object(&["error", "code"], json!({"error": text(), "code": text(), "message": text()})),
        "EsimItem": esim_item,
        "EsimDetail": detail,
        "EsimPage": page("EsimItem"),
        "ProvisionedEsim": object(
            &["id", "iccid", "lpa_string", "qr_code", "direct_install_url", "status", "euicc_state", "end_user_reference", "label", "cost", "balance_remaining", "created_at"],
            json!({"id": {"type": "string", "format": "uuid"}, "iccid": text(), "lpa_string": text(), "qr_code": {"type": "string", "description": "data:image/png;base64,..."}, "direct_install_url": {"type": "string", "format": "uri"}, "status": text(), "euicc_state": text(), "end_user_reference": nullable_text(), "label": nullable_text(), "cost": money(), "balance_remaining": money(), "created_at": time(), "group_id": text()}),
        ),
        "DataToggled": object(&["success", "iccid", "data_enabled"], json!({"success": {"type": "boolean"}, "iccid": text(), "data_enabled": {"type": "boolean"}})),
        "Terminated": object(&["success", "iccid", "status"], json!({"success": {"type": "boolean"}, "iccid": text(), "status": {"const": "terminated"}})),
        "Throttled": object(&["success", "iccid", "throttle"], json!({"success": {"type": "boolean"}, "iccid": text(), "throttle": text()})),
        "Funded": object(&["success", "iccid", "funded_usd", "wallet_balance_usd", "account_balance_remaining"], json!({"success": {"type": "boolean"}, "iccid": text(), "funded_usd": money(), "wallet_balance_usd": money(), "account_balance_remaining": money()})),
        "DefundAccepted": object(&["success", "iccid", "status", "estimated_return_usd", "settles_in_minutes"], json!({"success": {"type": "boolean"}, "iccid": text(), "status": {"const": "defund_pending"}, "estimated_return_usd": money(), "settles_in_minutes": {"type": "integer"}})),
        "Group": group,
        "GroupList": object(&["groups", "total"], json!({"groups": {"type": "array", "items": reference("Group")}, "total": {"type": "integer"}})),
        "GroupFunded": object(&["success", "group_id", "funded_usd", "balance_usd", "account_balance_remaining"], json!({"success": {"type": "boolean"}, "group_id": text(), "funded_usd": money(), "balance_usd": money(), "account_balance_remaining": money()})),
        "GroupDefundAccepted": object(&["success", "group_id", "status", "estimated_return_usd", "settles_in_minutes"], json!({"success": {"type": "boolean"}, "group_id": text(), "status": {"const": "defund_pending"}, "estimated_return_usd": money(), "settles_in_minutes": {"type": "integer"}})),
        "GroupMembers": members,
        "GroupMemberChange": object(&["success", "group_id", "iccid", "status"], json!({"success": {"type": "boolean"}, "group_id": text(), "iccid": text(), "status": {"type": "string", "enum": ["assigned", "move_pending", "removed"]}, "settles_in_minutes": {"type": "integer"}, "estimated_return_usd": money()})),
        "WalletBalance": object(&["balance_usd", "lifetime_topup_usd", "lifetime_usage_usd", "data_suspended", "currency"], json!({"balance_usd": money(), "lifetime_topup_usd": money(), "lifetime_usage_usd": money(), "data_suspended": {"type": "boolean"}, "currency": {"const": "USD"}})),
        "NetworkRate": object(&["operator", "per_mb_usd", "per_gb_usd"], json!({"operator": text(), "per_mb_usd": money(), "per_gb_usd": money()})),
        "Country": object(&["name", "iso2", "iso3", "flag", "continent", "has_data", "cheapest_per_gb_usd", "cheapest_operator", "networks"], json!({"name": text(), "iso2": text(), "iso3": text(), "flag": text(), "continent": text(), "has_data": {"type": "boolean"}, "cheapest_per_gb_usd": money(), "cheapest_operator": text(), "networks": {"type": "array", "items": reference("NetworkRate")}})),
        "Rates": object(&["total_countries", "discount", "countries"], json!({"total_countries": {"type": "integer"}, "discount": text(), "countries": {"type": "array", "items": reference("Country")}})),
        "Account": object(&["company_name", "contact_email", "balance_usd", "esim_count", "account_status", "created_at", "auto_refill_last_error"], json!({"id": text(), "company_name": nullable_text(), "contact_email": text(), "balance_usd": money(), "esim_count": object(&["active", "total"], json!({"active": {"type": "integer"}, "total": {"type": "integer"}})), "account_status": {"type": "string", "enum": ["active", "suspended"]}, "data_suspended": {"type": "boolean"}, "created_at": time(), "auto_refill_enabled": {"type": "boolean"}, "auto_refill_last_error": {"type": ["object", "null"], "properties": {"code": text(), "message": text(), "at": time()}}})),
        "Webhook": webhook,
        "WebhookWithSecret": with_secret,
        "WebhookList": object(&["webhooks", "available_events"], json!({"webhooks": {"type": "array", "items": reference("Webhook")}, "available_events": {"type": "array", "items": text()}})),
        "Success": object(&["success"], json!({"success": {"type": "boolean"}})),
        "WebhookTestResult": object(&["success", "status"], json!({"success": {"type": "boolean"}, "status": {"type": "integer"}, "error": text()})),
        "OpenApi": {"type": "object"},
    })
}

fn build() -> String {
    let mut paths = Map::new();
    for (api, method, pattern) in ROUTES.iter().filter(|(api, _, _)| matches!(api, Api::Reseller | Api::Public)) {
        let (summary, body, status, schema, errors) = operation(method, pattern);
        let mut parameters: Vec<Value> = pattern
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": text()}))
            .collect();
        let query: &[(&str, Value)] = match *pattern {
            "/esim/list" => &[
                ("status", json!({"type": "string", "enum": ["pending", "active", "suspended", "terminated"]})),
                ("limit", json!({"type": "integer", "default": 50, "maximum": 100})),
                ("offset", json!({"type": "integer", "default": 0})),
            ],
            "/groups/{id}/esims" => &[
                ("limit", json!({"type": "integer", "default": 50, "maximum": 100})),
                ("offset", json!({"type": "integer", "default": 0})),
            ],
            "/rates" => &[
                ("country", json!({"type": "string", "description": "ISO2, ISO3, slug or name"})),
                ("continent", text()),
            ],
            _ => &[],
        };
        parameters.extend(query.iter().map(|(name, schema)| json!({"name": name, "in": "query", "schema": schema})));
        if *method == "POST" {
            parameters.push(json!({"name": "Idempotency-Key", "in": "header", "required": false, "schema": text(), "description": "Replays the stored response for 24 hours"}));
        }
        let mut responses = Map::new();
        responses.insert(
            status.to_string(),
            json!({"description": "success", "content": {"application/json": {"schema": reference(schema)}}}),
        );
        if *pattern == "/groups/{id}/esims" && *method == "POST" {
            responses.insert(
                "202".into(),
                json!({"description": "move_pending", "content": {"application/json": {"schema": reference(schema)}}}),
            );
        }
        let keyed = *api == Api::Reseller;
        let mut error_statuses: Vec<u16> = errors.to_vec();
        if keyed {
            error_statuses.extend([401, 429]);
        }
        for code in error_statuses {
            let mut response =
                json!({"description": "error", "content": {"application/json": {"schema": reference("Error")}}});
            if code == 429 {
                response["headers"] =
                    json!({"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}});
            }
            responses.insert(code.to_string(), response);
        }
        let operation_id = format!("{}{}", method.to_lowercase(), pattern.replace(['/', '{', '}', '.'], "_"));
        let mut op =
            json!({"operationId": operation_id, "summary": summary, "parameters": parameters, "responses": responses});
        if let Some(body) = body {
            op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": body}}});
        }
        if !keyed {
            op["security"] = json!([]);
        }
        let entry = paths.entry(full_path(*api, pattern)).or_insert_with(|| json!({}));
        entry[method.to_lowercase()] = op;
    }
    let document = json!({
        "openapi": "3.1.0",
        "info": {"title": "Reseller eSIM Connectivity Service", "version": "2.0"},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "API key: rsk_ followed by 64 characters (68 in all)"}},
            "schemas": schemas(),
        },
        "paths": paths,
    });
    serde_json::to_string_pretty(&document).expect("the document serializes")
}

/// The document, built once.
pub fn document() -> String {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(build).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_routed_reseller_path_and_method_is_documented_and_nothing_else() {
        let document: Value = serde_json::from_str(&document()).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        let documented: BTreeSet<(String, String)> = document["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| item.as_object().unwrap().keys().map(move |m| (m.to_uppercase(), path.clone())))
            .collect();
        let routed: BTreeSet<(String, String)> = ROUTES
            .iter()
            .filter(|(api, _, _)| matches!(api, Api::Reseller | Api::Public))
            .map(|(api, method, pattern)| (method.to_string(), full_path(*api, pattern)))
            .collect();
        assert_eq!(documented, routed);
        assert_eq!(routed.len(), 28);
    }

    #[test]
    fn every_reference_points_at_a_schema() {
        let text = document();
        let document: Value = serde_json::from_str(&text).unwrap();
        let schemas = document["components"]["schemas"].as_object().unwrap();
        let mut found = 0;
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| c.is_alphanumeric()).collect();
            assert!(schemas.contains_key(&name), "dangling $ref {name}");
            found += 1;
        }
        assert!(found > 40);
    }
}
