//! API keys at scale and in trouble: a revoked key's record is dropped after its
//! retention (decision 231), key operations read only the account's own index of active
//! keys (decision 232), and a frozen account changes no key, secret or refill and sends
//! nothing, while its reads go on (decision 233).

mod common;
use common::*;
use esim_engine::state::AccountIx;
use esim_engine::*;

/// Makes a key with `by`'s key and returns it as a reseller of the same account.
fn make_key(h: &mut Harness, by: &Reseller) -> (Reseller, String) {
    let (key, api_key_digest) = h.draw_key();
    let made = h.call(by, ResellerOp::CreateApiKey { api_key_digest, api_key_prefix: key[..12].to_string() });
    let Ok(Reply::ApiKeyCreated(made)) = made else { panic!("{made:?}") };
    (Reseller { account_id: by.account_id.clone(), api_key: key }, made.id)
}

fn listed(h: &mut Harness, by: &Reseller) -> Vec<String> {
    let Ok(Reply::ApiKeyList(list)) = h.call(by, ResellerOp::ListApiKeys) else { panic!("the key list") };
    list.keys.into_iter().map(|k| k.id).collect()
}

fn account_ix(h: &Harness, r: &Reseller) -> AccountIx {
    AccountIx(h.engine.accounts().iter().position(|a| a.id == r.account_id).unwrap() as u32)
}

/// The engine read back from its written state, as a restart from a snapshot does.
fn reread(engine: &Engine) -> Engine {
    serde_json::from_slice(&serde_json::to_vec(engine).unwrap()).unwrap()
}

#[test]
fn a_revoked_key_is_kept_for_its_retention_then_dropped_by_a_timer() {
    let mut h = Harness::new();
    let first = h.reseller("10");
    let first_id = listed(&mut h, &first).remove(0);
    let (second, _) = make_key(&mut h, &first);
    h.call(&second, ResellerOp::RevokeApiKey { key_id: first_id.clone() }).unwrap();
    let revoked_at = h.now;
    let first_digest = KeyDigest::of(&first.api_key);
    assert_eq!(h.engine.api_keys().len(), 2, "kept while its retention lasts");
    assert_eq!(h.engine.poll_timeout(), Some(revoked_at.plus_ms(limits::REVOKED_KEY_RETENTION_MS)));
    // Within the retention a repeated revocation answers as the first did.
    h.admin(AdminOp::RevokeKey { api_key_digest: first_digest }).unwrap();
    assert_eq!(code(h.call(&first, ResellerOp::WalletBalance)), "INVALID_API_KEY");

    // A restart from a snapshot now keeps the record and its drop timer: both engines
    // drop it at the same moment and end in the same state.
    let mut restarted = reread(&h.engine);
    assert_eq!(restarted.state_digest(), h.engine.state_digest());
    h.advance_secs(limits::REVOKED_KEY_RETENTION_MS / 1_000 - 1);
    assert_eq!(h.engine.api_keys().len(), 2, "not a second early");
    h.advance_secs(1);
    assert_eq!(h.engine.api_keys().len(), 1, "dropped when the retention ends");
    assert!(h.engine.api_keys().get(&first_digest.id()).is_none());
    restarted.handle_timeout(h.now);
    assert_eq!(restarted.state_digest(), h.engine.state_digest(), "the same drop after a restart");

    // Afterwards the key is as unknown as one never issued; the account goes on.
    assert_eq!(code(h.admin(AdminOp::RevokeKey { api_key_digest: first_digest })), "NOT_FOUND");
    assert_eq!(code(h.call(&first, ResellerOp::WalletBalance)), "INVALID_API_KEY");
    assert_eq!(code(h.call(&second, ResellerOp::RevokeApiKey { key_id: first_id })), "NOT_FOUND");
    assert_eq!(listed(&mut h, &second).len(), 1);
    assert_eq!(h.engine.pending_timer_count(), 0, "nothing left waiting");
}

#[test]
fn an_operator_revocation_is_dropped_after_the_retention_too() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    let (key, api_key_digest) = h.draw_key();
    h.admin(AdminOp::CreateKey { account_id: r.account_id.clone(), api_key_digest, api_key_prefix: key[..12].into() })
        .unwrap();
    h.admin(AdminOp::RevokeKey { api_key_digest }).unwrap();
    h.advance_secs(3_600);
    // A second revocation does not start the retention again.
    h.admin(AdminOp::RevokeKey { api_key_digest }).unwrap();
    assert_eq!(h.engine.pending_timer_count(), 1, "one drop timer per revoked key");
    h.advance_secs(limits::REVOKED_KEY_RETENTION_MS / 1_000 - 3_600);
    assert!(h.engine.api_keys().get(&api_key_digest.id()).is_none());
    assert_eq!(h.engine.api_keys().active_ids(account_ix(&h, &r)).len(), 1);
}

/// 60,000 revoked keys of one account (all within their retention, so all still held)
/// and other accounts' keys beside them: the account's index holds its one active key,
/// and every key operation answers from it.
#[test]
fn key_operations_read_the_accounts_own_active_keys_only() {
    const CHURNED: usize = 60_000;
    let mut h = Harness::new();
    let mut current = h.reseller("10");
    let others: Vec<Reseller> = (0..3).map(|_| h.reseller("0")).collect();
    let mut current_id = listed(&mut h, &current).remove(0);
    for _ in 0..CHURNED {
        let (next, next_id) = make_key(&mut h, &current);
        h.call(&next, ResellerOp::RevokeApiKey { key_id: current_id }).unwrap();
        (current, current_id) = (next, next_id);
    }
    let account = account_ix(&h, &current);
    assert_eq!(h.engine.api_keys().len(), CHURNED + 1 + others.len(), "the revoked keys are all still held");
    assert_eq!(h.engine.api_keys().active_ids(account), [KeyDigest::of(&current.api_key).id()]);
    assert_eq!(listed(&mut h, &current), [current_id.clone()]);
    // The cap and the last-key rule count the index: the one active key cannot go,
    // and 19 more can come.
    assert_eq!(code(h.call(&current, ResellerOp::RevokeApiKey { key_id: current_id })), "LAST_API_KEY");
    for _ in 1..limits::API_KEYS_PER_ACCOUNT_MAX {
        make_key(&mut h, &current);
    }
    let one_more = ResellerOp::CreateApiKey { api_key_digest: h.draw_key().1, api_key_prefix: String::new() };
    assert_eq!(code(h.call(&current, one_more)), "API_KEY_LIMIT_REACHED");
    for other in &others {
        assert_eq!(listed(&mut h, other).len(), 1, "another account's list is its own");
        assert_eq!(h.engine.api_keys().active_ids(account_ix(&h, other)).len(), 1);
    }
    // The index is rebuilt exactly when the state is read back.
    let back = reread(&h.engine);
    assert_eq!(back.api_keys().active_ids(account), h.engine.api_keys().active_ids(account));
    assert_eq!(back.state_digest(), h.engine.state_digest());
}

#[test]
fn a_frozen_account_reads_but_makes_no_key_secret_refill_or_delivery() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    let Ok(Reply::WebhookCreated(webhook)) = h.call(&r, create_webhook("https://hooks.example.com", &["*"])) else {
        panic!("the webhook")
    };
    let webhook_id = webhook.webhook.id;
    h.provision(&r);
    let event_id = h.events_named("esim.provisioned")[0].id.clone();
    let (second, second_id) = make_key(&mut h, &r);
    h.admin(AdminOp::Freeze { account_id: r.account_id.clone(), frozen: true }).unwrap();

    h.effects.clear();
    let before = h.engine.state_digest();
    let refused = [
        ResellerOp::CreateApiKey { api_key_digest: h.draw_key().1, api_key_prefix: String::new() },
        ResellerOp::RotateWebhookSecret { webhook_id: webhook_id.clone(), signing_secret: sealed("whsec_new") },
        ResellerOp::UpdateAutoRefill { enabled: Some(true), amount_usd: None },
        ResellerOp::UpdateAutoRefill { enabled: Some(true), amount_usd: Some(d("20")) },
        ResellerOp::ResendEvent { event_id: event_id.clone(), webhook_id: webhook_id.clone() },
        ResellerOp::TestWebhook { webhook_id: webhook_id.clone() },
    ];
    for op in refused {
        let error = h.call(&r, op.clone()).unwrap_err();
        assert_eq!((error.code, error.status()), (ErrorCode::AccountSuspended, 403), "{op:?}");
    }
    assert_eq!(h.engine.state_digest(), before, "a refusal changes nothing");
    assert!(h.effects.is_empty(), "nothing was sent");
    // Unknown ids are 404 before the freeze is looked at; a bad body 400.
    let unknown = ResellerOp::RotateWebhookSecret { webhook_id: "wh_missing".into(), signing_secret: sealed("x") };
    assert_eq!(code(h.call(&r, unknown)), "NOT_FOUND");
    let resend = ResellerOp::ResendEvent { event_id: "evt_missing".into(), webhook_id: webhook_id.clone() };
    assert_eq!(code(h.call(&r, resend)), "NOT_FOUND");
    let bad = ResellerOp::UpdateAutoRefill { enabled: Some(true), amount_usd: Some(d("1")) };
    assert_eq!(code(h.call(&r, bad)), "VALIDATION_ERROR");

    // Reads go on; what only spends less or takes access away is allowed.
    for read in [ResellerOp::ListApiKeys, ResellerOp::GetAutoRefill, ResellerOp::ListWebhooks, ResellerOp::Account] {
        assert!(h.call(&r, read.clone()).is_ok(), "{read:?}");
    }
    let off = h.call(&r, ResellerOp::UpdateAutoRefill { enabled: Some(false), amount_usd: Some(d("25")) });
    let Ok(Reply::AutoRefill(settings)) = off else { panic!("{off:?}") };
    assert_eq!((settings.enabled, settings.amount_usd), (false, d("25")));
    h.call(&r, ResellerOp::RevokeApiKey { key_id: second_id }).unwrap();
    assert_eq!(code(h.call(&second, ResellerOp::WalletBalance)), "INVALID_API_KEY");

    // Thawed, every one of them works again.
    h.admin(AdminOp::Freeze { account_id: r.account_id.clone(), frozen: false }).unwrap();
    make_key(&mut h, &r);
    h.call(&r, ResellerOp::RotateWebhookSecret { webhook_id: webhook_id.clone(), signing_secret: sealed("whsec_new") })
        .unwrap();
    h.call(&r, ResellerOp::UpdateAutoRefill { enabled: Some(true), amount_usd: None }).unwrap();
    h.call(&r, ResellerOp::ResendEvent { event_id, webhook_id: webhook_id.clone() }).unwrap();
    h.call(&r, ResellerOp::TestWebhook { webhook_id }).unwrap();
}
