//! The eSIM and money rules of the spec, one test per state-table row or rule.

mod common;
use common::*;
use esim_engine::rates::RateTable;
use esim_engine::*;
use rust_decimal::Decimal;

fn de_per_mb() -> Decimal {
    RateTable::builtin().network("DE", None).unwrap().per_mb_usd
}

#[test]
fn provisioning_takes_the_fee_and_returns_every_field() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let reply = h.call(
        &r,
        ResellerOp::Provision {
            end_user_reference: Some("cust-42".into()),
            label: Some("Paris".into()),
            group_id: None,
        },
    );
    let Ok(Reply::Provisioned(p)) = reply else { panic!("{reply:?}") };
    assert_eq!(p.cost, d("1.75"));
    assert_eq!(p.balance_remaining, d("98.25"));
    assert_eq!(p.status, "pending");
    assert_eq!(p.euicc_state, "RELEASED");
    assert!(p.iccid.starts_with("89") && (19..=20).contains(&p.iccid.len()));
    assert!(codes::luhn_valid(&p.iccid));
    assert!(p.lpa_string.starts_with("LPA:1$") && p.lpa_string.split('$').count() == 3);
    assert_eq!(
        p.direct_install_url,
        format!("https://esimsetup.apple.com/esim_qrcode_provisioning?carddata={}", p.lpa_string)
    );
    uuid::Uuid::parse_str(&p.id).expect("id is a uuid");
    let json = serde_json::to_value(&p).unwrap();
    for field in [
        "id",
        "iccid",
        "lpa_string",
        "qr_code",
        "direct_install_url",
        "status",
        "euicc_state",
        "end_user_reference",
        "label",
        "cost",
        "balance_remaining",
        "created_at",
    ] {
        assert!(json.get(field).is_some(), "missing {field}");
    }
    assert!(json["qr_code"].as_str().unwrap().starts_with("data:image/png;base64,"));
    assert_eq!(json["created_at"], "2026-01-01T00:00:00.000Z");
    let event = &h.events_named("esim.provisioned")[0];
    assert_eq!(event.data.wire()["iccid"], p.iccid.as_str());
    assert_eq!(event.data.wire()["end_user_reference"], "cust-42");
    assert_eq!(event.data.wire()["label"], "Paris");
    assert_eq!(event.data.wire()["lpa_string"], p.lpa_string.as_str());
    assert_eq!(event.data.wire()["status"], "pending");
    h.assert_conserved();
}

#[test]
fn provisioning_refuses_below_the_fee_and_without_inventory_taking_nothing() {
    let mut h = Harness::new();
    let r = h.reseller("0");
    let error =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None }).unwrap_err();
    assert_eq!(error.code, ErrorCode::InsufficientBalance);
    assert_eq!(error.status(), 402);
    assert!(error.message.contains("1.75") && error.message.contains("available 0"), "{}", error.message);

    let r = h.reseller("10");
    h.admin(AdminOp::SetInventory { available: 0 }).unwrap();
    let error =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None }).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::NoEsimsAvailable, 503));
    assert_eq!(h.balance(&r), d("10"), "no fee taken");
    h.admin(AdminOp::SetInventory { available: 1 }).unwrap();
    h.provision(&r);
    assert_eq!(
        code(h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None })),
        "NO_ESIMS_AVAILABLE"
    );
}

/// A shard's block of the global pool (decision 185): granted profiles add to the stock
/// exactly, each one provisions once, and a replay of the same commands gives the same
/// digest (the grant is part of the state, so a lost grant would show).
#[test]
fn granted_blocks_add_to_the_stock_and_replay_to_the_same_digest() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    h.admin(AdminOp::SetInventory { available: 0 }).unwrap();
    assert_eq!(h.engine.inventory(), 0);
    let before = h.engine.state_digest();
    let reply = h.admin(AdminOp::GrantInventory { count: 2 }).unwrap();
    let Reply::AdminUpdated(body) = reply else { panic!("{reply:?}") };
    assert_eq!((body["granted"].as_u64(), body["available"].as_u64()), (Some(2), Some(2)));
    assert_ne!(h.engine.state_digest(), before, "the grant is in the digest");
    h.admin(AdminOp::GrantInventory { count: 1 }).unwrap();
    assert_eq!(h.engine.inventory(), 3);
    for _ in 0..3 {
        h.provision(&r);
    }
    assert_eq!(h.engine.inventory(), 0);
    assert_eq!(
        code(h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None })),
        "NO_ESIMS_AVAILABLE"
    );
    h.admin(AdminOp::GrantInventory { count: u64::MAX }).unwrap();
    h.admin(AdminOp::GrantInventory { count: 5 }).unwrap();
    assert_eq!(h.engine.inventory(), u64::MAX, "saturates, never panics");
    h.assert_conserved();
}

#[test]
fn a_journal_with_grants_replays_to_the_same_state() {
    let commands = [AdminOp::SetInventory { available: 0 }, AdminOp::GrantInventory { count: 4 }];
    let run = || {
        let mut h = Harness::new();
        let r = h.reseller("50");
        for op in commands.clone() {
            h.admin(op).unwrap();
        }
        h.provision(&r);
        (h.engine.inventory(), h.engine.state_digest())
    };
    let (first, second) = (run(), run());
    assert_eq!(first.0, 3);
    assert_eq!(first, second);
    // The command survives the journal's encoding (serde) unchanged.
    let command = Command::Admin(AdminOp::GrantInventory { count: 7 });
    let text = serde_json::to_string(&command).unwrap();
    assert_eq!(serde_json::from_str::<Command>(&text).unwrap(), command);
}

#[test]
fn dust_examples_fund_20_reads_19_99_and_9_18_27_read_exactly() {
    let mut h = Harness::new();
    let r = h.reseller("200");
    for (amount, shown) in [("20", "19.99"), ("9", "9"), ("18", "18"), ("27", "27")] {
        let iccid = h.provision(&r);
        let Ok(Reply::Funded(f)) = h.fund(&r, &iccid, amount) else { panic!() };
        assert_eq!(f.wallet_balance_usd, d(shown), "fund {amount}");
        assert_eq!(f.funded_usd, d(amount));
        assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, d(shown));
        let json = serde_json::to_string(&f).unwrap();
        assert!(json.contains(&format!("\"wallet_balance_usd\":{shown}")), "{json}");
    }
    h.assert_conserved();
    let report = h.engine.conservation_report(None).unwrap();
    assert_eq!(report.total.conversion_dust_usd, d("0.002"));
}

#[test]
fn fund_bounds_and_balance_checks_move_nothing_on_error() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision(&r);
    for amount in ["0", "0.001", "10000.01", "-5"] {
        assert_eq!(code(h.fund(&r, &iccid, amount)), "VALIDATION_ERROR", "{amount}");
    }
    let error = h.fund(&r, &iccid, "60").unwrap_err();
    assert_eq!(error.code, ErrorCode::InsufficientBalance);
    assert!(error.message.contains("required 60") && error.message.contains("available 48.25"));
    assert_eq!(h.balance(&r), d("48.25"));
    assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, d("0"));
    assert!(h.fund(&r, &iccid, "0.01").is_ok());
    h.assert_conserved();
}

#[test]
fn display_never_above_exact_and_usage_stops_at_zero() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "20").unwrap();
    let per_mb = de_per_mb();
    let used = h.usage(&iccid, "1000");
    assert_eq!(used.charged_usd, d("1000") * per_mb);
    let exact = d("19.998") - d("1000") * per_mb;
    assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, money::displayed(exact));
    // A huge session: cut off exactly where the credit runs out.
    let out = h.usage(&iccid, "999999");
    assert!(out.data_stopped);
    assert_eq!(out.charged_usd, exact);
    assert!(out.used_mb < d("999999"));
    assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, d("0"));
    let again = h.usage(&iccid, "1");
    assert!(again.data_stopped && again.charged_usd.is_zero());
    h.assert_conserved();
}

#[test]
fn reporting_pauses_after_fund_then_reports_on_the_next_cycle() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "9").unwrap();
    let out = h.usage(&iccid, "100");
    assert!(out.charged_usd > Decimal::ZERO);
    // Live balance moves at once; reporting waits for the pause.
    assert_eq!(h.detail(&r, &iccid).item.total_data_charged_usd, Some(d("0")));
    h.advance_secs(14 * 60);
    assert_eq!(h.detail(&r, &iccid).item.total_data_charged_usd, Some(d("0")));
    h.advance_secs(2 * 60 + 60);
    assert_eq!(h.detail(&r, &iccid).item.total_data_charged_usd, Some(out.charged_usd));
    h.assert_conserved();
}

#[test]
fn esim_low_and_depleted_events_follow_the_pipeline_once_per_crossing() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "9").unwrap();
    let per_mb = de_per_mb();
    // Spend down to about 4 USD: below 5, but the pause holds the event back.
    let mb = (d("5") / per_mb).round();
    h.usage(&iccid, &mb.to_string());
    assert!(h.events_named("esim.balance_low").is_empty());
    h.advance_secs(16 * 60 + 60);
    let low = h.events_named("esim.balance_low");
    assert_eq!(low.len(), 1);
    assert_eq!(low[0].data.wire()["threshold_usd"], 5.0);
    assert_eq!(low[0].data.wire()["iccid"], iccid.as_str());
    assert!(low[0].data.wire()["wallet_balance_usd"].as_f64().unwrap() < 5.0);
    // More usage below 5: no second low event.
    h.usage(&iccid, "10");
    h.advance_secs(120);
    assert_eq!(h.events_named("esim.balance_low").len(), 1);
    // Run dry: depleted once.
    h.usage(&iccid, "999999");
    h.advance_secs(120);
    assert_eq!(h.events_named("esim.balance_depleted").len(), 1);
    // A fund re-arms both.
    h.fund(&r, &iccid, "9").unwrap();
    h.usage(&iccid, "999999");
    h.advance_secs(20 * 60);
    assert_eq!(h.events_named("esim.balance_low").len(), 2);
    assert_eq!(h.events_named("esim.balance_depleted").len(), 2);
}

#[test]
fn install_activates_once() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    let iccid = h.provision(&r);
    h.advance_secs(30);
    h.sandbox(SandboxOp::Install { iccid: iccid.clone() }).unwrap();
    h.sandbox(SandboxOp::Install { iccid: iccid.clone() }).unwrap();
    let detail = h.detail(&r, &iccid);
    assert_eq!(detail.item.status, "active");
    assert_eq!(detail.item.euicc_state, Some("ENABLED"));
    assert_eq!(detail.item.activated_at, Some(Millis::VIRTUAL_EPOCH.plus_ms(30_000)));
    let activated = h.events_named("esim.activated");
    assert_eq!(activated.len(), 1);
    assert_eq!(activated[0].data.wire()["euicc_state"], "ENABLED");
    assert_eq!(activated[0].data.wire()["activated_at"], "2026-01-01T00:00:30.000Z");
}

#[test]
fn detail_falls_back_to_cached_euicc_state_when_the_network_read_fails() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    let iccid = h.provision_installed(&r);
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: None, network_read_fails: Some(true) }).unwrap();
    assert_eq!(h.detail(&r, &iccid).item.euicc_state, Some("ENABLED"));
}

#[test]
fn disable_and_enable_switch_data_and_status() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "5").unwrap();
    let Ok(Reply::DataToggled(t)) = h.call(&r, ResellerOp::Disable { iccid: iccid.clone() }) else { panic!() };
    assert!(!t.data_enabled);
    assert_eq!(h.detail(&r, &iccid).item.status, "suspended");
    assert!(h.usage(&iccid, "1").data_stopped);
    let Ok(Reply::DataToggled(t)) = h.call(&r, ResellerOp::Enable { iccid: iccid.clone() }) else { panic!() };
    assert!(t.data_enabled);
    assert_eq!(h.detail(&r, &iccid).item.status, "active");
    assert!(!h.usage(&iccid, "1").data_stopped);
    assert_eq!(h.events_named("esim.data_suspended").len(), 1);
    assert_eq!(h.events_named("esim.data_resumed").len(), 1);
}

#[test]
fn enable_needs_a_reseller_balance_above_zero_but_a_zero_balance_does_not_stop_running_esims() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "8.25").unwrap();
    assert_eq!(h.balance(&r), d("0"));
    assert!(!h.usage(&iccid, "10").data_stopped, "a zero reseller balance does not suspend eSIMs");
    h.call(&r, ResellerOp::Disable { iccid: iccid.clone() }).unwrap();
    let error = h.call(&r, ResellerOp::Enable { iccid: iccid.clone() }).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::InsufficientBalance, 402));
    assert_eq!(h.events_named("balance.depleted").len(), 1);
}

#[test]
fn throttle_accepts_exactly_the_spec_speeds() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    let iccid = h.provision(&r);
    let Ok(Reply::Throttled(t)) =
        h.call(&r, ResellerOp::Throttle { iccid: iccid.clone(), speed: "SPEED_3500_KBPS".into() })
    else {
        panic!()
    };
    assert_eq!(t.throttle, "SPEED_3500_KBPS");
    assert_eq!(
        code(h.call(&r, ResellerOp::Throttle { iccid: iccid.clone(), speed: "SPEED_3600_KBPS".into() })),
        "VALIDATION_ERROR"
    );
    assert_eq!(h.detail(&r, &iccid).throttle, "SPEED_3500_KBPS");
}

#[test]
fn terminate_forfeits_the_wallet_and_is_final() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "20").unwrap();
    let Ok(Reply::Terminated(t)) = h.call(&r, ResellerOp::Terminate { iccid: iccid.clone() }) else { panic!() };
    assert_eq!(t.status, "terminated");
    let detail = h.detail(&r, &iccid);
    assert_eq!(detail.item.status, "terminated");
    assert!(detail.item.terminated_at.is_some());
    assert_eq!(detail.item.wallet_balance_usd, d("0"));
    assert!(h.usage(&iccid, "1").data_stopped);
    for op in [
        ResellerOp::Terminate { iccid: iccid.clone() },
        ResellerOp::Defund { iccid: iccid.clone() },
        ResellerOp::Fund { iccid: iccid.clone(), amount: d("5") },
    ] {
        let error = h.call(&r, op).unwrap_err();
        assert_eq!((error.code, error.status()), (ErrorCode::EsimAlreadyTerminated, 400));
    }
    let report = h.engine.conservation_report(None).unwrap();
    assert_eq!(report.total.forfeited_usd, d("19.998"));
    assert_eq!(h.events_named("esim.terminated").len(), 1);
    h.assert_conserved();
}

#[test]
fn defund_pauses_data_and_credits_the_displayed_balance_at_settlement() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "20").unwrap();
    assert_eq!(h.balance(&r), d("28.25"));
    let Ok(Reply::DefundAccepted(a)) = h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }) else { panic!() };
    assert_eq!(a.estimated_return_usd, d("19.99"));
    assert_eq!(a.status, "defund_pending");
    assert_eq!(a.settles_in_minutes, 15);
    assert_eq!(Reply::DefundAccepted(a).status(), 202);
    // Pending: paused, the wallet shows what is on its way, fund/enable/defund refused.
    assert!(h.usage(&iccid, "1").data_stopped);
    assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, d("19.99"));
    assert_eq!(code(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() })), "DEFUND_ALREADY_PENDING");
    assert_eq!(code(h.fund(&r, &iccid, "5")), "DEFUND_PENDING");
    assert_eq!(code(h.call(&r, ResellerOp::Enable { iccid: iccid.clone() })), "DEFUND_PENDING");
    h.assert_conserved();
    h.advance_secs(15 * 60);
    assert_eq!(h.balance(&r), d("48.24"));
    assert_eq!(h.detail(&r, &iccid).item.wallet_balance_usd, d("0"));
    let defunded = h.events_named("esim.defunded");
    assert_eq!(defunded[0].data.wire()["returned_usd"], 19.99);
    // The SIM stays installed and can be funded again.
    h.fund(&r, &iccid, "9").unwrap();
    assert!(!h.usage(&iccid, "1").data_stopped);
    assert!(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }).is_ok(), "a funded SIM can defund again");
}

#[test]
fn defund_errors_move_nothing() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision_installed(&r);
    assert_eq!(code(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() })), "WALLET_NOT_READY");
    h.fund(&r, &iccid, "0.01").unwrap(); // 0.009 of credit: displays 0.00
    assert_eq!(code(h.call(&r, ResellerOp::Defund { iccid: iccid.clone() })), "NO_BALANCE_TO_RETURN");
    h.fund(&r, &iccid, "10").unwrap();
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: Some(true), network_read_fails: None }).unwrap();
    let error = h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::UpstreamError, 502));
    assert!(!h.usage(&iccid, "1").data_stopped, "nothing paused");
    assert_eq!(h.detail(&r, &iccid).pending, None);
    h.assert_conserved();
}

#[test]
fn another_accounts_esim_is_not_found() {
    let mut h = Harness::new();
    let a = h.reseller("20");
    let b = h.reseller("20");
    let iccid = h.provision(&a);
    for op in [
        ResellerOp::GetEsim { iccid: iccid.clone() },
        ResellerOp::Fund { iccid: iccid.clone(), amount: d("1") },
        ResellerOp::Terminate { iccid: iccid.clone() },
        ResellerOp::Disable { iccid: iccid.clone() },
    ] {
        let error = h.call(&b, op).unwrap_err();
        assert_eq!((error.code, error.status()), (ErrorCode::EsimNotFound, 404));
    }
    let Ok(Reply::EsimPage(page)) = h.call(&b, ResellerOp::ListEsims { status: None, limit: None, offset: None })
    else {
        panic!()
    };
    assert_eq!(page.total, 0);
}

#[test]
fn list_filters_pages_and_clamps() {
    let mut h = Harness::new();
    let r = h.reseller("300");
    let iccids: Vec<String> = (0..120)
        .map(|_| {
            h.advance_secs(1); // stay under the rate limit
            h.provision(&r)
        })
        .collect();
    h.sandbox(SandboxOp::Install { iccid: iccids[3].clone() }).unwrap();
    let Ok(Reply::EsimPage(page)) = h.call(&r, ResellerOp::ListEsims { status: None, limit: None, offset: None })
    else {
        panic!()
    };
    assert_eq!((page.esims.len(), page.total, page.limit, page.offset), (50, 120, 50, 0));
    let Ok(Reply::EsimPage(page)) =
        h.call(&r, ResellerOp::ListEsims { status: None, limit: Some(500), offset: Some(100) })
    else {
        panic!()
    };
    assert_eq!((page.esims.len(), page.limit), (20, 100));
    assert_eq!(page.esims[0].iccid, iccids[100]);
    let Ok(Reply::EsimPage(page)) =
        h.call(&r, ResellerOp::ListEsims { status: Some("active".into()), limit: None, offset: None })
    else {
        panic!()
    };
    assert_eq!(page.total, 1);
    assert_eq!(
        code(h.call(&r, ResellerOp::ListEsims { status: Some("gone".into()), limit: None, offset: None })),
        "VALIDATION_ERROR"
    );
    assert_eq!(
        code(h.call(&r, ResellerOp::ListEsims { status: None, limit: Some(0), offset: None })),
        "VALIDATION_ERROR"
    );
}

#[test]
fn api_keys_are_68_chars_and_revocable() {
    let mut h = Harness::new();
    let r = h.reseller("20");
    assert!(r.api_key.starts_with("rsk_") && r.api_key.len() == 68);
    let (key, api_key_digest) = h.draw_key();
    let created = h.admin(AdminOp::CreateKey {
        account_id: r.account_id.clone(),
        api_key_digest,
        api_key_prefix: key[..12].to_string(),
    });
    let Ok(Reply::KeyCreated(k)) = created else { panic!() };
    assert!(k.api_key.is_empty(), "the shell shows the key it drew; the engine has only its digest");
    let second = Reseller { account_id: r.account_id.clone(), api_key: key };
    assert!(h.call(&second, ResellerOp::WalletBalance).is_ok());
    assert_eq!(h.engine.key_account(&api_key_digest), h.engine.key_account(&KeyDigest::of(&r.api_key)));
    h.admin(AdminOp::RevokeKey { api_key_digest }).unwrap();
    assert_eq!(h.engine.key_account(&api_key_digest), None);
    assert_eq!(code(h.admin(AdminOp::RevokeKey { api_key_digest: KeyDigest::of("rsk_unknown") })), "NOT_FOUND");
    let error = h.call(&second, ResellerOp::WalletBalance).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::InvalidApiKey, 401));
    assert!(h.call(&r, ResellerOp::WalletBalance).is_ok());
    let wrong = Reseller { account_id: String::new(), api_key: "rsk_nope".into() };
    assert_eq!(code(h.call(&wrong, ResellerOp::WalletBalance)), "INVALID_API_KEY");
}

#[test]
fn idempotent_fund_replays_without_applying_again() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision(&r);
    let fund = |amount: &str| {
        Command::Reseller(ResellerRequest {
            key_digest: KeyDigest::of(&r.api_key),
            idempotency_key: Some("fund-1".into()),
            op: ResellerOp::Fund { iccid: iccid.clone(), amount: d(amount) },
        })
    };
    let first = render(&h.run(fund("10")));
    let second = render(&h.run(fund("10")));
    assert_eq!(first, second, "byte-identical replay");
    assert_eq!(h.balance(&r), d("38.25"), "applied once");
    let error = h.run(fund("11")).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::IdempotencyKeyReused, 409));
    // After 24 hours the key is forgotten.
    h.advance_secs(24 * 3600);
    h.run(fund("10")).unwrap();
    assert_eq!(h.balance(&r), d("28.25"));
}

#[test]
fn wallet_and_account_reads_carry_every_field() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.provision(&r);
    h.fund(&r, &iccid, "20").unwrap();
    let Ok(Reply::WalletBalance(w)) = h.call(&r, ResellerOp::WalletBalance) else { panic!() };
    assert_eq!((w.balance_usd, w.lifetime_topup_usd, w.lifetime_usage_usd), (d("76.5"), d("100"), d("23.5")));
    assert!(!w.data_suspended);
    assert_eq!(w.currency, "USD");
    let Ok(Reply::Account(a)) = h.call(&r, ResellerOp::Account) else { panic!() };
    assert_eq!((a.esim_count.active, a.esim_count.total), (1, 2));
    assert_eq!(a.account_status, "active");
    let json = serde_json::to_value(&a).unwrap();
    for field in [
        "company_name",
        "contact_email",
        "balance_usd",
        "esim_count",
        "account_status",
        "created_at",
        "auto_refill_last_error",
    ] {
        assert!(json.get(field).is_some(), "missing {field}");
    }
    h.admin(AdminOp::Freeze { account_id: r.account_id.clone(), frozen: true }).unwrap();
    let Ok(Reply::WalletBalance(w)) = h.call(&r, ResellerOp::WalletBalance) else { panic!() };
    assert!(w.data_suspended);
    assert!(h.usage(&iccid, "1").data_stopped, "a frozen account's eSIMs stop");
    assert_eq!(code(h.fund(&r, &iccid, "1")), "ACCOUNT_SUSPENDED");
}

#[test]
fn top_up_minimum_is_10() {
    let mut h = Harness::new();
    let r = h.reseller("0");
    assert_eq!(
        code(h.admin(AdminOp::TopUp { account_id: r.account_id.clone(), amount_usd: d("9.99") })),
        "VALIDATION_ERROR"
    );
    let Ok(Reply::ToppedUp(t)) = h.admin(AdminOp::TopUp { account_id: r.account_id.clone(), amount_usd: d("10") })
    else {
        panic!()
    };
    assert_eq!(t.balance_usd, d("10"));
    assert!(t.topup_id.starts_with("top_"));
    let event = &h.events_named("balance.topped_up")[0];
    assert_eq!(event.data.wire()["amount_usd"], 10.0);
    assert_eq!(event.data.wire()["new_balance_usd"], 10.0);
}

#[test]
fn rates_table_filters() {
    let mut h = Harness::new();
    let r = h.reseller("0");
    let Ok(Reply::Rates(all)) = h.call(&r, ResellerOp::Rates { country: None, continent: None }) else { panic!() };
    assert_eq!(all.total_countries as usize, all.countries.len());
    let Ok(Reply::Rates(de)) = h.call(&r, ResellerOp::Rates { country: Some("de".into()), continent: None }) else {
        panic!()
    };
    assert_eq!(de.countries.len(), 1);
    assert_eq!(de.countries[0].iso2, "DE");
    let Ok(Reply::Rates(none)) = h.call(&r, ResellerOp::Rates { country: Some("atlantis".into()), continent: None })
    else {
        panic!()
    };
    assert_eq!(none.total_countries, 0);
}

#[test]
fn idempotent_provisioning_keeps_no_picture_and_replays_the_same_bytes() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let provision = || {
        Command::Reseller(ResellerRequest {
            key_digest: KeyDigest::of(&r.api_key),
            idempotency_key: Some("order-7".into()),
            op: ResellerOp::Provision { end_user_reference: None, label: None, group_id: None },
        })
    };
    let first = render(&h.run(provision()));
    let state = serde_json::to_string(&h.engine).unwrap();
    assert!(!state.contains("iVBORw0KGgo"), "the stored answer holds no PNG (the QR code is drawn on the way out)");
    let second = render(&h.run(provision()));
    assert_eq!(first, second, "the replay draws the same QR code");
    let body: serde_json::Value = serde_json::from_slice(&first.1).unwrap();
    assert!(body["qr_code"].as_str().unwrap().starts_with("data:image/png;base64,iVBORw0KGgo"));
    assert_eq!(h.balance(&r), d("48.25"), "one fee");
}

#[test]
fn a_wallet_never_funded_to_five_dollars_sends_no_balance_low() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "3").unwrap();
    h.usage(&iccid, "100");
    h.advance_secs(20 * 60);
    assert!(h.events_named("esim.balance_low").is_empty(), "never high, so no high-to-low crossing");
    // Funded to $5 or more, the next crossing notifies once.
    h.fund(&r, &iccid, "5").unwrap();
    h.usage(&iccid, "1000");
    h.advance_secs(20 * 60);
    assert_eq!(h.events_named("esim.balance_low").len(), 1);
}

#[test]
fn the_json_finance_report_writes_amounts_without_trailing_zeros() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "20").unwrap();
    let json = h.engine.conservation_report(None).unwrap().to_json();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["total"]["difference_usd"].to_string(), "0", "{json}");
    assert_eq!(report["total"]["reseller_balance_usd"].to_string(), "78.25", "{json}");
    assert_eq!(report["total"]["conversion_dust_usd"].to_string(), "0.002", "exact, sub-cent: {json}");
}

#[test]
fn only_final_answers_are_kept_for_an_idempotency_key() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision(&r);
    h.call(&r, ResellerOp::Fund { iccid: iccid.clone(), amount: d("10") }).unwrap();
    let defund = Command::Reseller(ResellerRequest {
        key_digest: KeyDigest::of(&r.api_key),
        idempotency_key: Some("defund-1".into()),
        op: ResellerOp::Defund { iccid: iccid.clone() },
    });
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: Some(true), network_read_fails: None }).unwrap();
    let failed = h.run(defund.clone()).unwrap_err();
    assert_eq!(failed.status(), 502);
    h.sandbox(SandboxOp::SetFaults { upstream_pause_fails: Some(false), network_read_fails: None }).unwrap();
    // The 502 was not stored: the retry is applied, and its answer is the one kept.
    let accepted = h.run(defund.clone()).unwrap();
    assert_eq!(accepted.status(), 202);
    assert_eq!(render(&h.run(defund)), render(&Ok(accepted)));
}

#[test]
fn the_idempotency_store_of_an_account_is_bounded_oldest_first() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let iccid = h.provision(&r);
    let request = |key: usize, op: ResellerOp| {
        Command::Reseller(ResellerRequest {
            key_digest: KeyDigest::of(&r.api_key),
            idempotency_key: Some(format!("k{key}")),
            op,
        })
    };
    let digest_before = h.engine.state_digest();
    for key in 0..=limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX {
        h.run(request(key, ResellerOp::Disable { iccid: iccid.clone() })).unwrap();
    }
    assert_ne!(h.engine.state_digest(), digest_before);
    // The newest keys are still kept (another request under one is refused) ...
    let newest = limits::IDEMPOTENCY_KEYS_PER_ACCOUNT_MAX;
    assert_eq!(code(h.run(request(newest, ResellerOp::Enable { iccid: iccid.clone() }))), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(code(h.run(request(1, ResellerOp::Enable { iccid: iccid.clone() }))), "IDEMPOTENCY_KEY_REUSED");
    // ... and the oldest was dropped: the key is free again.
    assert!(h.run(request(0, ResellerOp::Enable { iccid: iccid.clone() })).is_ok());
    // Expiry after 24 h still works through the bounded queue.
    h.advance_secs(24 * 3600 + 1);
    assert!(h.run(request(newest, ResellerOp::Enable { iccid: iccid.clone() })).is_ok());
}

#[test]
fn pending_timers_list_the_usage_report_and_the_return_until_they_fall_due() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let iccid = h.provision_installed(&r);
    h.fund(&r, &iccid, "9").unwrap();
    assert_eq!(h.engine.pending_timers(50).total, 0, "nothing used, nothing to report");
    let out = h.usage(&iccid, "100");
    let pending = h.engine.pending_timers(50);
    assert_eq!(pending.total, 1, "{pending:?}");
    let report = &pending.timers[0];
    assert_eq!((report.kind, report.iccid.as_deref()), ("usage_report", Some(iccid.as_str())));
    assert_eq!(report.amount_usd, Some(out.charged_usd));
    // Reported by the first sync cycle after the 15-minute reporting pause.
    assert!(report.due_in_seconds > 15 * 60 && report.due_in_seconds <= 17 * 60, "{report:?}");
    h.call(&r, ResellerOp::Defund { iccid: iccid.clone() }).unwrap();
    let kinds: Vec<&str> = h.engine.pending_timers(50).timers.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, ["usage_report", "esim_return"], "the return waits for the report");
    let first = h.engine.pending_timers(1);
    assert_eq!((first.total, first.timers.len()), (2, 1), "the limit bounds the list, not the total");
    h.advance_secs(20 * 60);
    assert_eq!(h.engine.pending_timers(50).total, 0, "both fell due");
}
