//! Groups: every group row of the state table, their errors, and the low-balance loop.

mod common;
use common::*;
use esim_engine::rates::RateTable;
use esim_engine::*;

fn create(h: &mut Harness, r: &Reseller, name: &str) -> String {
    match h.call(
        r,
        ResellerOp::CreateGroup { name: name.into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ) {
        Ok(Reply::GroupCreated(g)) => g.id,
        other => panic!("{other:?}"),
    }
}

fn group(h: &mut Harness, r: &Reseller, id: &str) -> esim_engine::reply::GroupRecord {
    match h.call(r, ResellerOp::GetGroup { group_id: id.into() }) {
        Ok(Reply::Group(g)) => g,
        other => panic!("{other:?}"),
    }
}

fn add(h: &mut Harness, r: &Reseller, gid: &str, iccid: &str) -> Response {
    h.call(r, ResellerOp::AddGroupEsim { group_id: gid.into(), iccid: iccid.into() })
}

#[test]
fn create_defaults_unique_names_and_the_group_limit() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    let id = create(&mut h, &r, "Fleet");
    let g = group(&mut h, &r, &id);
    assert_eq!((g.balance_usd, g.low_balance_threshold_usd, g.refill_amount_usd), (d("0"), d("10"), d("25")));
    let error = h
        .call(
            &r,
            ResellerOp::CreateGroup { name: "Fleet".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
        )
        .unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::GroupNameTaken, 409));
    for i in 1..10 {
        create(&mut h, &r, &format!("G{i}"));
    }
    let error = h
        .call(
            &r,
            ResellerOp::CreateGroup { name: "G10".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
        )
        .unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::GroupLimitReached, 429));
    h.admin(AdminOp::SetLimits { account_id: r.account_id.clone(), max_groups: Some(11), max_group_size: None })
        .unwrap();
    create(&mut h, &r, "G10");
    let Ok(Reply::GroupList(list)) = h.call(&r, ResellerOp::ListGroups) else { panic!() };
    assert_eq!(list.total, 11);
    assert_eq!(list.groups[0].name, "G10", "newest first");
    assert_eq!(
        code(h.call(
            &r,
            ResellerOp::CreateGroup { name: " ".into(), low_balance_threshold_usd: None, refill_amount_usd: None }
        )),
        "VALIDATION_ERROR"
    );
    assert_eq!(code(h.call(&r, ResellerOp::GetGroup { group_id: "nope".into() })), "GROUP_NOT_FOUND");
}

#[test]
fn patch_renames_and_changes_thresholds() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    let a = create(&mut h, &r, "A");
    create(&mut h, &r, "B");
    let Ok(Reply::Group(g)) = h.call(
        &r,
        ResellerOp::UpdateGroup {
            group_id: a.clone(),
            name: Some("C".into()),
            low_balance_threshold_usd: Some(d("3")),
            refill_amount_usd: Some(d("12.5")),
        },
    ) else {
        panic!()
    };
    assert_eq!((g.name.as_str(), g.low_balance_threshold_usd, g.refill_amount_usd), ("C", d("3"), d("12.5")));
    assert_eq!(
        code(h.call(
            &r,
            ResellerOp::UpdateGroup {
                group_id: a.clone(),
                name: Some("B".into()),
                low_balance_threshold_usd: None,
                refill_amount_usd: None
            }
        )),
        "GROUP_NAME_TAKEN"
    );
    assert_eq!(
        code(h.call(
            &r,
            ResellerOp::UpdateGroup {
                group_id: a.clone(),
                name: None,
                low_balance_threshold_usd: None,
                refill_amount_usd: None
            }
        )),
        "VALIDATION_ERROR"
    );
    assert_eq!(
        code(h.call(
            &r,
            ResellerOp::UpdateGroup {
                group_id: "x".into(),
                name: Some("Z".into()),
                low_balance_threshold_usd: None,
                refill_amount_usd: None
            }
        )),
        "GROUP_NOT_FOUND"
    );
}

#[test]
fn provisioning_into_a_group_and_shared_balance_stops_every_member_at_zero() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let gid = create(&mut h, &r, "Team");
    let mut members = vec![];
    for _ in 0..2 {
        let Ok(Reply::Provisioned(p)) =
            h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
        else {
            panic!()
        };
        h.sandbox(SandboxOp::Install { iccid: p.iccid.clone() }).unwrap();
        members.push(p.iccid);
    }
    assert_eq!(code(h.fund(&r, &members[0], "5")), "ESIM_IN_GROUP");
    let Ok(Reply::GroupFunded(f)) = h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("9") }) else {
        panic!()
    };
    assert_eq!((f.balance_usd, f.account_balance_remaining), (d("9"), d("87.5")));
    assert_eq!(h.events_named("group.funded").len(), 1);
    let Ok(Reply::WalletBalance(w)) = h.call(&r, ResellerOp::WalletBalance) else { panic!() };
    assert_eq!(w.lifetime_usage_usd, d("12.5"), "group funds count as usage");
    let per_mb = RateTable::builtin().network("DE", None).unwrap().per_mb_usd;
    let first = h.usage(&members[0], "100");
    let second = h.usage(&members[1], "100");
    assert_eq!(first.charged_usd + second.charged_usd, d("200") * per_mb);
    assert_eq!(group(&mut h, &r, &gid).balance_usd, money::displayed(d("9") - d("200") * per_mb));
    // Drain: both members stop.
    assert!(h.usage(&members[0], "999999").data_stopped);
    assert!(h.usage(&members[1], "1").data_stopped);
    assert_eq!(h.events_named("group.balance_depleted").len(), 1);
    let detail = h.detail(&r, &members[0]);
    assert_eq!(detail.item.group_id.as_deref(), Some(gid.as_str()));
    assert_eq!(detail.item.total_data_charged_usd, None);
    assert_eq!(detail.item.wallet_balance_usd, d("0"));
    assert_eq!(detail.group_total_data_charged_usd, Some(d("0")), "reported after the pause");
    h.advance_secs(17 * 60);
    assert_eq!(h.detail(&r, &members[0]).group_total_data_charged_usd, Some(d("9")));
    h.assert_conserved();
}

#[test]
fn group_low_balance_once_per_crossing_rearmed_by_fund() {
    let mut h = Harness::new();
    let r = h.reseller("200");
    let gid = create(&mut h, &r, "Low");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    h.sandbox(SandboxOp::Install { iccid: p.iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("27") }).unwrap();
    let per_mb = RateTable::builtin().network("DE", None).unwrap().per_mb_usd;
    let mb = (d("18") / per_mb).round(); // leaves about 9 < 10
    h.usage(&p.iccid, &mb.to_string());
    h.usage(&p.iccid, "1");
    let low = h.events_named("group.balance_low");
    assert_eq!(low.len(), 1);
    assert_eq!(low[0].data.wire()["suggested_amount_usd"], 25.0);
    assert_eq!(low[0].data.wire()["account_underfunded"], false);
    assert_eq!(low[0].data.wire()["group_id"], gid.as_str());
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("0.01") }).unwrap();
    h.usage(&p.iccid, "1");
    assert_eq!(h.events_named("group.balance_low").len(), 2, "re-armed by a group fund");
    // A lower threshold puts the balance (about 9) above it again: re-armed, so the next
    // crossing of the new threshold notifies.
    let patch = |t: &str| ResellerOp::UpdateGroup {
        group_id: gid.clone(),
        name: None,
        low_balance_threshold_usd: Some(d(t)),
        refill_amount_usd: None,
    };
    h.call(&r, patch("5")).unwrap();
    assert_eq!(h.events_named("group.balance_low").len(), 2, "above the new threshold: nothing to say");
    h.usage(&p.iccid, &(d("5") / per_mb).round().to_string());
    let low = h.events_named("group.balance_low");
    assert_eq!(low.len(), 3, "re-armed by the lower threshold");
    assert_eq!(low[2].data.wire()["threshold_usd"], 5.0);
    // A threshold raised above the balance is a crossing too.
    h.call(&r, patch("0")).unwrap();
    h.call(&r, patch("8")).unwrap();
    assert_eq!(h.events_named("group.balance_low").len(), 4);
}

#[test]
fn add_without_balance_is_immediate_and_with_balance_is_a_pending_move() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let gid = create(&mut h, &r, "Move");
    let empty = h.provision_installed(&r);
    let funded = h.provision_installed(&r);
    h.fund(&r, &funded, "20").unwrap();
    let Ok(reply @ Reply::GroupMemberAdded(_)) = add(&mut h, &r, &gid, &empty) else { panic!() };
    assert_eq!(reply.status(), 200);
    assert_eq!(h.events_named("esim.group_assigned").len(), 1);
    assert_eq!(code(add(&mut h, &r, &gid, &empty)), "ESIM_ALREADY_IN_GROUP");

    let balance_before = h.balance(&r);
    let Ok(reply @ Reply::GroupMovePending(_)) = add(&mut h, &r, &gid, &funded) else { panic!() };
    assert_eq!(reply.status(), 202);
    let Reply::GroupMovePending(m) = reply else { unreachable!() };
    assert_eq!((m.status, m.settles_in_minutes, m.estimated_return_usd), ("move_pending", Some(15), Some(d("19.99"))));
    assert!(h.usage(&funded, "1").data_stopped, "paused while moving");
    assert_eq!(code(add(&mut h, &r, &gid, &funded)), "MOVE_PENDING");
    assert_eq!(h.events_named("esim.group_assigned").len(), 1);
    h.assert_conserved();
    h.advance_secs(15 * 60);
    assert_eq!(h.balance(&r), balance_before + d("19.99"));
    assert_eq!(h.events_named("esim.group_assigned").len(), 2);
    assert_eq!(h.detail(&r, &funded).item.group_id.as_deref(), Some(gid.as_str()));
    let Ok(Reply::GroupMembers(page)) =
        h.call(&r, ResellerOp::ListGroupEsims { group_id: gid.clone(), limit: None, offset: None })
    else {
        panic!()
    };
    assert_eq!(page.total, 2);
    assert_eq!(code(add(&mut h, &r, "nope", &funded)), "GROUP_NOT_FOUND");
    assert_eq!(code(add(&mut h, &r, &gid, "8900")), "ESIM_NOT_FOUND");
    h.assert_conserved();
}

#[test]
fn remove_leaves_the_esim_standalone_at_zero_with_no_money_moving() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let gid = create(&mut h, &r, "R");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("20") }).unwrap();
    let before = h.engine.conservation_report(None).unwrap();
    h.call(&r, ResellerOp::RemoveGroupEsim { group_id: gid.clone(), iccid: p.iccid.clone() }).unwrap();
    let after = h.engine.conservation_report(None).unwrap();
    assert_eq!(before.total, after.total, "no money moves");
    let detail = h.detail(&r, &p.iccid);
    assert_eq!((detail.item.group_id, detail.item.wallet_balance_usd), (None, d("0")));
    assert_eq!(h.events_named("esim.group_removed").len(), 1);
    assert_eq!(
        code(h.call(&r, ResellerOp::RemoveGroupEsim { group_id: gid.clone(), iccid: p.iccid.clone() })),
        "ESIM_NOT_FOUND"
    );
    assert!(h.fund(&r, &p.iccid, "9").is_ok(), "funded with the normal endpoint");
}

#[test]
fn group_full_is_429_and_raisable() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    h.admin(AdminOp::SetLimits { account_id: r.account_id.clone(), max_groups: None, max_group_size: Some(2) })
        .unwrap();
    let gid = create(&mut h, &r, "Small");
    for _ in 0..2 {
        let iccid = h.provision(&r);
        add(&mut h, &r, &gid, &iccid).unwrap();
    }
    let iccid = h.provision(&r);
    let error = add(&mut h, &r, &gid, &iccid).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::GroupFull, 429));
    assert_eq!(
        code(h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })),
        "GROUP_FULL"
    );
}

#[test]
fn group_defund_pauses_members_and_settles_with_group_defunded() {
    let mut h = Harness::new();
    let r = h.reseller("100");
    let gid = create(&mut h, &r, "D");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    h.sandbox(SandboxOp::Install { iccid: p.iccid.clone() }).unwrap();
    assert_eq!(code(h.call(&r, ResellerOp::DefundGroup { group_id: gid.clone() })), "NO_BALANCE_TO_RETURN");
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("20") }).unwrap();
    let Ok(Reply::GroupDefundAccepted(a)) = h.call(&r, ResellerOp::DefundGroup { group_id: gid.clone() }) else {
        panic!()
    };
    assert_eq!(a.estimated_return_usd, d("19.99"));
    assert!(h.usage(&p.iccid, "1").data_stopped);
    let error = h.call(&r, ResellerOp::DefundGroup { group_id: gid.clone() }).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::GroupDefundPending, 409));
    assert_eq!(
        code(h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("5") })),
        "GROUP_DEFUND_PENDING"
    );
    // Enabling a member is refused too (it would answer data_enabled while data stays paused).
    h.call(&r, ResellerOp::Disable { iccid: p.iccid.clone() }).unwrap();
    assert_eq!(code(h.call(&r, ResellerOp::Enable { iccid: p.iccid.clone() })), "GROUP_DEFUND_PENDING");
    assert!(h.events_named("group.defunded").is_empty());
    let before = h.balance(&r);
    h.advance_secs(15 * 60);
    assert_eq!(h.balance(&r), before + d("19.99"));
    assert_eq!(h.events_named("group.defunded").len(), 1);
    assert_eq!(group(&mut h, &r, &gid).balance_usd, d("0"));
    h.call(&r, ResellerOp::Enable { iccid: p.iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("9") }).unwrap();
    assert!(!h.usage(&p.iccid, "1").data_stopped, "members resume when the group is funded");
    // Reuse: rename after moving out and defunding.
    h.call(
        &r,
        ResellerOp::UpdateGroup {
            group_id: gid.clone(),
            name: Some("Reused".into()),
            low_balance_threshold_usd: None,
            refill_amount_usd: None,
        },
    )
    .unwrap();
    h.assert_conserved();
}

#[test]
fn group_fund_errors() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    let gid = create(&mut h, &r, "F");
    assert_eq!(code(h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("0") })), "VALIDATION_ERROR");
    let error = h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("10.01") }).unwrap_err();
    assert_eq!((error.code, error.status()), (ErrorCode::InsufficientBalance, 402));
    assert_eq!(code(h.call(&r, ResellerOp::FundGroup { group_id: "x".into(), amount: d("1") })), "GROUP_NOT_FOUND");
    assert_eq!(h.balance(&r), d("10"));
}

#[test]
fn low_group_with_underfunded_account_charges_the_card_first() {
    let mut h = Harness::new();
    let r = h.reseller("40");
    h.admin(AdminOp::SetAutoRefill {
        account_id: r.account_id.clone(),
        enabled: Some(true),
        amount_usd: Some(d("50")),
        card: Some(CardBehavior::Ok),
    })
    .unwrap();
    let gid = create(&mut h, &r, "Auto");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    h.sandbox(SandboxOp::Install { iccid: p.iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("27") }).unwrap();
    assert!(h.events_named("balance.auto_refill_succeeded").is_empty(), "a group fund is a transfer, never a charge");
    // Reseller now has 11.25 < 25 (refill): a dip below 10 charges the card and waits.
    h.usage(&p.iccid, "999999");
    assert!(h.events_named("group.balance_low").is_empty(), "waits for the credit");
    h.advance_secs(120);
    let succeeded = h.events_named("balance.auto_refill_succeeded");
    assert_eq!(succeeded.len(), 1);
    assert!(succeeded[0].data.wire()["payment_intent_id"].as_str().unwrap().starts_with("pi_"));
    assert_eq!(h.events_named("balance.topped_up").len(), 2);
    let low = h.events_named("group.balance_low");
    assert_eq!(low.len(), 1);
    assert_eq!(low[0].data.wire()["account_underfunded"], false);
    assert_eq!(h.balance(&r), d("61.25"));
    h.assert_conserved();
}

#[test]
fn a_declined_card_turns_auto_refill_off_and_sends_the_low_event_underfunded() {
    let mut h = Harness::new();
    let r = h.reseller("40");
    h.admin(AdminOp::SetAutoRefill {
        account_id: r.account_id.clone(),
        enabled: Some(true),
        amount_usd: Some(d("50")),
        card: Some(CardBehavior::Declined),
    })
    .unwrap();
    let gid = create(&mut h, &r, "Auto");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    h.sandbox(SandboxOp::Install { iccid: p.iccid.clone() }).unwrap();
    h.call(&r, ResellerOp::FundGroup { group_id: gid.clone(), amount: d("27") }).unwrap();
    h.usage(&p.iccid, "999999");
    h.advance_secs(120);
    let failed = h.events_named("balance.auto_refill_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].data.wire()["error_code"], "card_declined");
    assert!(failed[0].data.wire()["error_message"].is_string());
    assert_eq!(h.events_named("group.balance_low")[0].data.wire()["account_underfunded"], true);
    let Ok(Reply::Account(a)) = h.call(&r, ResellerOp::Account) else { panic!() };
    assert!(!a.auto_refill_enabled);
    assert_eq!(a.auto_refill_last_error.unwrap().code, "card_declined");
}

#[test]
fn auto_refill_stops_after_ten_charges_in_a_day() {
    let mut h = Harness::new();
    let r = h.reseller("10");
    h.admin(AdminOp::SetAutoRefill {
        account_id: r.account_id.clone(),
        enabled: Some(true),
        amount_usd: Some(d("10")),
        card: Some(CardBehavior::Ok),
    })
    .unwrap();
    // Each provisioning below $5 is real spend: charge, wait for the card, repeat.
    let mut provisioned = 0;
    for _ in 0..200 {
        if h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: None }).is_ok() {
            provisioned += 1;
        }
        h.advance_secs(150);
    }
    assert!(provisioned > 10);
    assert_eq!(h.events_named("balance.auto_refill_succeeded").len(), 10);
    let failed = h.events_named("balance.auto_refill_failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].data.wire()["error_code"], "daily_limit_reached");
    let Ok(Reply::Account(a)) = h.call(&r, ResellerOp::Account) else { panic!() };
    assert!(!a.auto_refill_enabled);
    h.assert_conserved();
}

#[test]
fn terminating_a_member_removes_it_from_its_group_with_the_event() {
    let mut h = Harness::new();
    let r = h.reseller("50");
    let gid = create(&mut h, &r, "Fleet");
    let Ok(Reply::Provisioned(p)) =
        h.call(&r, ResellerOp::Provision { end_user_reference: None, label: None, group_id: Some(gid.clone()) })
    else {
        panic!()
    };
    let before = h.events.len();
    h.call(&r, ResellerOp::Terminate { iccid: p.iccid.clone() }).unwrap();
    let names: Vec<&str> = h.events[before..].iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["esim.group_removed", "esim.terminated"]);
    let removed = &h.events[before];
    assert_eq!(
        (removed.data.wire()["group_id"].as_str(), removed.data.wire()["group_name"].as_str()),
        (Some(gid.as_str()), Some("Fleet"))
    );
    assert_eq!(group(&mut h, &r, &gid).esim_count, 0);
}
