//! The paths made cheap for large accounts (decision 125) answer exactly what a scan of
//! the account's eSIMs answers: the eSIM list's pages and totals, with and without a
//! status filter, at every offset, and the account record's active count; before and
//! after a snapshot (the status counts are not part of the state and are rebuilt).

mod common;
use common::*;
use esim_engine::reply::EsimPage;
use esim_engine::state::EsimStatus;
use esim_engine::*;

/// What a scan of the account's eSIMs shows: the page's ICCIDs and the total.
fn scanned(engine: &Engine, account: usize, status: Option<EsimStatus>, limit: u64, offset: u64) -> (Vec<String>, u64) {
    let matching: Vec<String> = engine.accounts()[account]
        .esims
        .iter()
        .map(|esim| &engine.esims()[esim.0 as usize])
        .filter(|record| status.is_none_or(|s| record.status == s))
        .map(|record| record.iccid.to_string())
        .collect();
    let page = matching.iter().skip(offset.min(usize::MAX as u64) as usize).take(limit as usize).cloned().collect();
    (page, matching.len() as u64)
}

fn listed(engine: &mut Engine, key: &str, status: Option<EsimStatus>, limit: u64, offset: u64) -> (Vec<String>, u64) {
    let op = ResellerOp::ListEsims {
        status: status.map(|s| s.as_str().to_string()),
        limit: Some(limit),
        offset: Some(offset),
    };
    let request = ResellerRequest { key_digest: KeyDigest::of(key), idempotency_key: None, op };
    match engine.handle(engine.now(), Command::Reseller(request)) {
        Ok(Reply::EsimPage(EsimPage { esims, total, .. })) => (esims.into_iter().map(|e| e.iccid).collect(), total),
        other => panic!("list failed: {other:?}"),
    }
}

fn active_shown(engine: &mut Engine, key: &str) -> u64 {
    let request = ResellerRequest { key_digest: KeyDigest::of(key), idempotency_key: None, op: ResellerOp::Account };
    match engine.handle(engine.now(), Command::Reseller(request)) {
        Ok(Reply::Account(record)) => record.esim_count.active,
        other => panic!("account failed: {other:?}"),
    }
}

/// Every page and total of every account and filter equals the scan's.
fn check_all(engine: &mut Engine, resellers: &[(usize, String)]) {
    for (account, key) in resellers {
        let filters = [None].into_iter().chain(EsimStatus::ALL.map(Some));
        for status in filters {
            let (_, total) = scanned(engine, *account, status, 1, 0);
            let offsets = [0, 1, 2, 7, 49, 50, total / 2, total.saturating_sub(1), total, total + 3, u64::MAX];
            for offset in offsets {
                for limit in [1, 3, 50, 100] {
                    let expected = scanned(engine, *account, status, limit, offset);
                    let got = listed(engine, key, status, limit, offset);
                    assert_eq!(got, expected, "account {account}, status {status:?}, limit {limit}, offset {offset}");
                }
            }
        }
        let (_, active) = scanned(engine, *account, Some(EsimStatus::Active), 1, 0);
        assert_eq!(active_shown(engine, key), active, "account {account}: active count");
    }
}

#[test]
fn counted_pages_and_active_counts_match_a_scan_before_and_after_a_snapshot() {
    let mut h = Harness::new();
    let big = h.reseller("10000");
    let small = h.reseller("100");
    let mut esims_of_account = Vec::new();
    for n in 0..160 {
        let iccid = if n % 9 == 4 { h.provision(&big) } else { h.provision_installed(&big) };
        esims_of_account.push(iccid);
        if n % 40 == 0 {
            h.provision_installed(&small);
        }
    }
    // Every transition: disable, enable (back to active, or to pending if never
    // installed), terminate (from each status), install of a pending one.
    for (n, iccid) in esims_of_account.iter().enumerate() {
        let iccid = iccid.clone();
        match n % 7 {
            0 | 3 => {
                h.call(&big, ResellerOp::Disable { iccid }).unwrap();
            }
            1 => {
                h.call(&big, ResellerOp::Disable { iccid: iccid.clone() }).unwrap();
                h.call(&big, ResellerOp::Enable { iccid }).unwrap();
            }
            2 => {
                h.call(&big, ResellerOp::Terminate { iccid }).unwrap();
            }
            5 if n % 9 == 4 => {
                h.sandbox(SandboxOp::Install { iccid }).unwrap();
            }
            6 => {
                h.call(&big, ResellerOp::Disable { iccid: iccid.clone() }).unwrap();
                h.call(&big, ResellerOp::Terminate { iccid }).unwrap();
            }
            _ => {}
        }
    }
    let index = |h: &Harness, id: &str| h.engine.accounts().iter().position(|a| a.id == id).unwrap();
    let resellers =
        vec![(index(&h, &big.account_id), big.api_key.clone()), (index(&h, &small.account_id), small.api_key.clone())];
    let statuses: Vec<EsimStatus> = h.engine.esims().iter().map(|e| e.status).collect();
    for status in EsimStatus::ALL {
        assert!(statuses.contains(&status), "the test reaches {status:?}");
    }
    check_all(&mut h.engine, &resellers);

    // A snapshot holds no counts: read back, the engine answers the same (by a scan on
    // the first read, from counts rebuilt by the first command after it), and its state
    // digest is the same.
    let text = serde_json::to_string(&h.engine).unwrap();
    let mut back: Engine = serde_json::from_str(&text).unwrap();
    assert_eq!(back.state_digest(), h.engine.state_digest());
    check_all(&mut back, &resellers);
    // Changes after the rebuild keep the counts.
    let more = {
        let mut h2 = Harness { engine: back, ..Harness::new() };
        h2.now = h2.engine.now();
        let fresh = h2.provision_installed(&big);
        h2.call(&big, ResellerOp::Disable { iccid: esims_of_account[10].clone() }).unwrap();
        h2.call(&big, ResellerOp::Terminate { iccid: fresh }).unwrap();
        h2.engine
    };
    let mut more = more;
    check_all(&mut more, &resellers);
}

/// The events of a burst leave a few per new event, never all in one command (decision
/// 113): the reads show none of them from the moment they expire, and they all leave.
#[test]
fn expired_events_leave_a_few_per_new_event_and_reads_never_show_them() {
    let mut h = Harness::new();
    let reseller = h.reseller("1000");
    for _ in 0..40 {
        h.provision(&reseller);
    }
    let kept = |engine: &Engine| serde_json::to_value(engine).unwrap()["event_log"]["events"].as_array().unwrap().len();
    let burst = kept(&h.engine);
    assert!(burst >= 40, "every provisioning's event is kept");
    h.advance_secs(31 * 24 * 3600);
    let events = |h: &mut Harness| match h
        .call(&reseller, ResellerOp::ListEvents { filter: Default::default(), limit: Some(100), offset: None })
    {
        Ok(Reply::EventPage(page)) => page.total,
        other => panic!("events failed: {other:?}"),
    };
    assert_eq!(events(&mut h), 0, "expired events are never shown");
    h.provision(&reseller);
    let after_one = kept(&h.engine);
    assert!(after_one > 1 && after_one < burst + 1, "a few left with the new event, not all: {burst} then {after_one}");
    assert_eq!(events(&mut h), 1);
    for n in 2..=20 {
        h.provision(&reseller);
        assert_eq!(events(&mut h), n);
    }
    assert_eq!(kept(&h.engine), 20, "every expired event has left");
}
