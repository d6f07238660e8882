//! The wire form of a webhook delivery: the headers its POST carries, signed. Pure (the
//! sender in the HTTP shell makes the request; the OpenAPI document lists these headers).

use esim_engine::Delivery;

/// The headers of a delivery's POST, beside `Content-Type: application/json`, signed
/// with the webhook's secret (opened by the sender just for this): ours (`X-Service-*`,
/// the event's service time) and Standard Webhooks' (`webhook-*`, signed with the wall
/// clock's Unix seconds `now_unix_s` of this attempt, as receivers check it against
/// theirs; decision 114). During a rotation's overlap `previous` (the secret before it)
/// signs too: `webhook-signature` carries both, space-separated, the new one first;
/// `X-Service-Signature` uses the new one only (decision 116).
pub fn delivery_headers(
    delivery: &Delivery,
    secret: &str,
    previous: Option<&str>,
    now_unix_s: i64,
) -> [(&'static str, String); 7] {
    let body = delivery.body.as_bytes();
    let standard =
        |secret: &str| esim_engine::webhook::standard_signature(secret, &delivery.event_id, now_unix_s, body);
    let signatures = match previous {
        Some(previous) => format!("{} {}", standard(secret), standard(previous)),
        None => standard(secret),
    };
    [
        ("X-Service-Signature", esim_engine::webhook::sign(secret, body)),
        ("X-Service-Event-Id", delivery.event_id.clone()),
        ("X-Service-Timestamp", delivery.timestamp.to_rfc3339()),
        ("X-Service-Delivery-Attempt", delivery.attempt.to_string()),
        ("webhook-id", delivery.event_id.clone()),
        ("webhook-timestamp", now_unix_s.to_string()),
        ("webhook-signature", signatures),
    ]
}
