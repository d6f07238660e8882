//! The finance report over periods, on real traffic: two accounts top up, provision,
//! fund, use data, send balances back, run a group and an auto-refill over five virtual
//! days through the real HTTP server (virtual clock, a real journal with frequent
//! snapshots). Then:
//! - every period, cut anywhere, opens with what the previous one closed with and its
//!   opening plus movements equals its closing, per account, exactly;
//! - the HTML report shows the JSON report's figures, every one;
//! - a restart (snapshot + replay) and the offline `esim report` give the same report.

use esim_engine::finance::Period;
use esim_engine::EngineConfig;
use esim_http::journal::{self, RecoverOptions};
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod common;
use common::{JournaledServer, TestServer};

const DAY_S: u64 = 86_400;

fn dec(value: &Value) -> Decimal {
    Decimal::from_str(&value.to_string()).unwrap_or_else(|_| panic!("not a number: {value}"))
}

async fn start(dir: &Path) -> JournaledServer {
    JournaledServer::start(dir, EngineConfig { seed: 16, allow_insecure_webhooks: true, ..EngineConfig::default() })
        .await
}

/// One account of the traffic: its id, key, and the manual top-ups made.
struct Reseller {
    id: String,
    key: String,
    top_ups_usd: Decimal,
}

async fn reseller(server: &TestServer, company: &str) -> Reseller {
    let created = server
        .admin(
            "POST",
            "/admin/v1/accounts",
            Some(json!({"contact_email": "finance@example.com", "company_name": company})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    Reseller {
        id: created.body["account_id"].as_str().unwrap().into(),
        key: created.body["api_key"].as_str().unwrap().into(),
        top_ups_usd: Decimal::ZERO,
    }
}

async fn top_up(server: &TestServer, who: &mut Reseller, amount: u32) {
    let reply = server
        .admin("POST", &format!("/admin/v1/accounts/{}/topups", who.id), Some(json!({"amount_usd": amount})))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    who.top_ups_usd += Decimal::from(amount);
}

async fn ok(server: &TestServer, method: &str, path: &str, key: &str, body: Option<Value>) -> Value {
    let reply = server.api(method, path, key, body).await;
    assert!((200..300).contains(&reply.status), "{method} {path}: {} {}", reply.status, reply.body);
    reply.body
}

async fn use_data(server: &TestServer, iccid: &str, mb: u32) {
    let reply = server
        .admin("POST", &format!("/sandbox/v1/esims/{iccid}/usage"), Some(json!({"mb": mb, "country": "DE"})))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Five virtual days of traffic (2026-01-01 to 2026-01-05), with a return on its way
/// across a midnight and a day with no request and no movement.
async fn traffic(server: &TestServer) -> Vec<Reseller> {
    let mut acme = reseller(server, "Acme \"Roam\" Travel, Inc.").await;
    let mut nomad = reseller(server, "Nomad SIMs").await;
    let mut elapsed_s = 0;
    // Day 1 (2026-01-01).
    top_up(server, &mut acme, 500).await;
    top_up(server, &mut nomad, 10).await;
    let refill = server
        .admin(
            "PUT",
            &format!("/admin/v1/accounts/{}/auto-refill", nomad.id),
            Some(json!({"enabled": true, "amount_usd": 25, "card": "ok"})),
        )
        .await;
    assert_eq!(refill.status, 200, "{}", refill.body);
    let mut nomad_sims = Vec::new();
    for _ in 0..3 {
        nomad_sims.push(server.provision(&nomad.key, None).await); // leaves 4.75: an auto-refill
    }
    let a1 = server.provision(&acme.key, None).await;
    let a2 = server.provision(&acme.key, None).await;
    ok(server, "POST", &format!("/esim/{a1}/fund"), &acme.key, Some(json!({"amount": 20.01}))).await;
    ok(server, "POST", &format!("/esim/{a2}/fund"), &acme.key, Some(json!({"amount": 7.77}))).await;
    server.admin("POST", &format!("/sandbox/v1/esims/{a1}/install"), None).await;
    use_data(server, &a1, 300).await;
    let group = ok(server, "POST", "/groups", &acme.key, Some(json!({"name": "Field team"}))).await;
    let gid = group["id"].as_str().unwrap().to_string();
    ok(server, "POST", &format!("/groups/{gid}/fund"), &acme.key, Some(json!({"amount": 30}))).await;
    server.advance(23 * 3_600 + 55 * 60).await;
    elapsed_s += 23 * 3_600 + 55 * 60;
    // 23:55: a defund whose return settles after midnight.
    ok(server, "POST", &format!("/esim/{a2}/defund"), &acme.key, None).await;
    server.advance(DAY_S - elapsed_s + 3_600).await;
    elapsed_s = DAY_S + 3_600;
    // Day 2 (2026-01-02).
    top_up(server, &mut acme, 200).await;
    let b1 = &nomad_sims[0];
    ok(server, "POST", &format!("/esim/{b1}/fund"), &nomad.key, Some(json!({"amount": 10}))).await;
    server.admin("POST", &format!("/sandbox/v1/esims/{b1}/install"), None).await;
    use_data(server, b1, 200).await;
    use_data(server, &a1, 500).await;
    server.advance(6 * 3_600).await;
    elapsed_s += 6 * 3_600;
    ok(server, "POST", &format!("/esim/{a1}/terminate"), &acme.key, None).await;
    use_data(server, b1, 100).await;
    // Day 3 (2026-01-03): no request; day 4 (2026-01-04).
    server.advance(3 * DAY_S - elapsed_s + 9 * 3_600).await;
    elapsed_s = 3 * DAY_S + 9 * 3_600;
    let a3 = server.provision(&acme.key, None).await;
    ok(server, "POST", &format!("/esim/{a3}/fund"), &acme.key, Some(json!({"amount": 12.34}))).await;
    ok(server, "POST", &format!("/groups/{gid}/fund"), &acme.key, Some(json!({"amount": 15}))).await;
    top_up(server, &mut nomad, 50).await;
    ok(server, "POST", &format!("/groups/{gid}/defund"), &acme.key, None).await;
    // Day 5 (2026-01-05).
    server.advance(4 * DAY_S - elapsed_s + 2 * 3_600).await;
    server.admin("POST", &format!("/sandbox/v1/esims/{a3}/install"), None).await;
    use_data(server, &a3, 250).await;
    server.advance(3_600).await;
    vec![acme, nomad]
}

async fn report(server: &TestServer, query: &str) -> Value {
    let reply = server.admin("GET", &format!("/admin/v1/reports/conservation?{query}"), None).await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.body);
    assert_eq!(reply.body["conserved"], json!(true), "{query}: {}", reply.body);
    reply.body
}

async fn text(server: &TestServer, query: &str) -> String {
    let reply = server.admin("GET", &format!("/admin/v1/reports/conservation?{query}"), None).await;
    assert_eq!(reply.status, 200, "{query}: {}", String::from_utf8_lossy(&reply.raw));
    String::from_utf8(reply.raw.to_vec()).unwrap()
}

fn row<'a>(report: &'a Value, account_id: &str) -> &'a Value {
    report["accounts"].as_array().unwrap().iter().find(|r| r["account_id"] == account_id).expect("the account's row")
}

fn sum_fields(section: &Value) -> Decimal {
    section.as_object().unwrap().iter().filter(|(k, _)| *k != "total_usd").map(|(_, v)| dec(v)).sum()
}

/// A row's identity, recomputed from its lines (not from its difference line).
fn assert_balances(row: &Value, what: &str) {
    for section in ["opening", "money_in", "closing", "spent"] {
        assert_eq!(sum_fields(&row[section]), dec(&row[section]["total_usd"]), "{what}: {section} total");
    }
    let opening = dec(&row["opening"]["total_usd"]);
    let movements = dec(&row["money_in"]["total_usd"]) - dec(&row["spent"]["total_usd"]);
    assert_eq!(opening + movements, dec(&row["closing"]["total_usd"]), "{what}: opening + movements = closing");
    assert_eq!(dec(&row["difference_usd"]), Decimal::ZERO, "{what}");
}

fn query(from: Option<&str>, until: Option<&str>) -> String {
    let mut q = String::from("format=json");
    if let Some(from) = from {
        q += &format!("&from={from}");
    }
    if let Some(until) = until {
        q += &format!("&until={until}");
    }
    q
}

const BOUNDS: [Option<&str>; 7] = [
    None,
    Some("2026-01-01"),
    Some("2026-01-02"),
    Some("2026-01-03"),
    Some("2026-01-04"),
    Some("2026-01-05"),
    Some("2026-01-06"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_period_opens_with_the_last_close_and_balances_exactly_per_account() {
    let dir = std::env::temp_dir().join(format!("esim-finance-periods-{}", std::process::id()));
    let running = start(&dir).await;
    let server = &running.server;
    let resellers = traffic(server).await;
    let whole = report(server, "format=json").await;

    // The whole history against what the API says: money in, and the reseller balance now.
    for who in &resellers {
        let line = row(&whole, &who.id);
        assert_eq!(dec(&line["money_in"]["top_ups_usd"]), who.top_ups_usd, "{}", who.id);
        let balance = ok(server, "GET", "/wallet/balance", &who.key, None).await;
        assert_eq!(dec(&line["money_in"]["total_usd"]), dec(&balance["lifetime_topup_usd"]), "{balance}");
        assert_eq!(dec(&line["closing"]["reseller_balance_usd"]), dec(&balance["balance_usd"]), "{balance}");
        assert_eq!(dec(&line["opening"]["total_usd"]), Decimal::ZERO);
    }
    let nomad = row(&whole, &resellers[1].id);
    assert!(dec(&nomad["money_in"]["auto_refills_usd"]) >= Decimal::from(25), "an auto-refill settled: {nomad}");
    assert_eq!(nomad["company_name"], json!("Nomad SIMs"));
    let days: Vec<&str> = whole["days"].as_array().unwrap().iter().map(|d| d["date"].as_str().unwrap()).collect();
    // 2026-01-03 saw no movement (usage is reported within minutes): no row for it.
    assert_eq!(days, ["2026-01-01", "2026-01-02", "2026-01-04", "2026-01-05"]);
    let acme = row(&whole, &resellers[0].id);
    assert!(dec(&acme["spent"]["forfeited_usd"]) > Decimal::ZERO, "the terminate forfeited: {acme}");

    // Every period: per account and in total, opening + movements = closing, exactly.
    let mut reports = BTreeMap::new();
    for (i, from) in BOUNDS.iter().enumerate() {
        for until in BOUNDS[i + 1..].iter().chain([&None]) {
            let q = query(*from, *until);
            let body = report(server, &q).await;
            for who in &resellers {
                assert_balances(row(&body, &who.id), &format!("{q} {}", who.id));
            }
            assert_balances(&body["total"], &format!("{q} total"));
            reports.insert((*from, *until), body);
        }
    }
    // A return was on its way at the end of 2026-01-01 (defunded at 23:55).
    let first_day = &reports[&(None, Some("2026-01-02"))];
    assert!(dec(&row(first_day, &resellers[0].id)["closing"]["returns_pending_usd"]) > Decimal::ZERO);

    // Tiled periods: each opens with the previous close, and their movements add up to
    // the whole history's, line by line.
    let tiles = [(None, Some("2026-01-02")), (Some("2026-01-02"), Some("2026-01-04")), (Some("2026-01-04"), None)];
    for who in &resellers {
        let mut previous_closing: Option<&Value> = None;
        let mut sums: BTreeMap<String, Decimal> = BTreeMap::new();
        for tile in tiles {
            let line = row(&reports[&tile], &who.id);
            if let Some(closing) = previous_closing {
                assert_eq!(&line["opening"], closing, "{tile:?} opens with the previous close");
            }
            previous_closing = Some(&line["closing"]);
            for section in ["money_in", "spent"] {
                for (field, value) in line[section].as_object().unwrap() {
                    *sums.entry(format!("{section}.{field}")).or_default() += dec(value);
                }
            }
        }
        assert_eq!(previous_closing.unwrap(), &row(&whole, &who.id)["closing"]);
        for (name, sum) in sums {
            let (section, field) = name.split_once('.').unwrap();
            assert_eq!(sum, dec(&row(&whole, &who.id)[section][field]), "{name} of {}", who.id);
        }
    }

    // The per-day table: each day's closing is the last one's plus its movements.
    for ((from, until), body) in &reports {
        let mut held = dec(&body["total"]["opening"]["total_usd"]);
        for day in body["days"].as_array().unwrap() {
            held += dec(&day["money_in"]["total_usd"]) - dec(&day["spent"]["total_usd"]);
            assert_eq!(held, dec(&day["closing"]["total_usd"]), "{from:?}..{until:?} {}", day["date"]);
            let date = day["date"].as_str().unwrap();
            assert!(from.is_none_or(|f| date >= f) && until.is_none_or(|u| date < u), "{date} in {from:?}..{until:?}");
        }
        assert_eq!(held, dec(&body["total"]["closing"]["total_usd"]), "{from:?}..{until:?}");
    }

    // An instant counts as its UTC day; bad bounds are refused with the spec's error body.
    let by_instant = report(server, "from=2026-01-02T13:00:00Z&until=2026-01-04T00:00:00%2B00:00").await;
    assert_eq!(by_instant["accounts"], reports[&(Some("2026-01-02"), Some("2026-01-04"))]["accounts"]);
    for bad in ["from=2026-02-30", "until=yesterday", "from=2026-01-04&until=2026-01-02", "format=pdf"] {
        let reply = server.admin("GET", &format!("/admin/v1/reports/conservation?{bad}"), None).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
        assert_eq!(reply.body["code"], json!("VALIDATION_ERROR"), "{bad}");
    }
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// USD with two decimals and thousands separators, written independently of the report's
/// own formatting.
fn two_decimals(value: Decimal) -> String {
    let rounded = value.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    let negative = rounded < Decimal::ZERO;
    let plain = format!("{:.2}", rounded.abs());
    let (whole, cents) = plain.split_at(plain.len() - 3);
    let digits: Vec<char> = whole.chars().rev().collect();
    let grouped: Vec<String> = digits.chunks(3).map(|c| c.iter().rev().collect()).rev().collect();
    format!("{}{}{cents}", if negative { "-" } else { "" }, grouped.join(","))
}

/// Every figure cell of the HTML: ((data-account or data-date, data-field), (data-value, text)).
fn html_figures(html: &str) -> BTreeMap<(String, String), (Decimal, String)> {
    let attribute = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
        Some(tag[start..start + tag[start..].find('"')?].to_string())
    };
    let mut out = BTreeMap::new();
    for cell in html.split("<td ").skip(1) {
        let tag = &cell[..cell.find('>').unwrap()];
        let Some(field) = attribute(tag, "data-field") else { continue };
        let id = attribute(tag, "data-account").or_else(|| attribute(tag, "data-date")).expect("an account or a date");
        let value = Decimal::from_str(&attribute(tag, "data-value").unwrap()).unwrap();
        let shown = cell[tag.len() + 1..cell.find("</td>").unwrap()].to_string();
        assert!(out.insert((id.clone(), field.clone()), (value, shown)).is_none(), "{id} {field} twice");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_html_shows_every_figure_of_the_json_report() {
    let dir = std::env::temp_dir().join(format!("esim-finance-html-{}", std::process::id()));
    let running = start(&dir).await;
    let server = &running.server;
    traffic(server).await;
    for period in ["from=2026-01-02&until=2026-01-05", "until=2026-01-04", ""] {
        let json = report(server, &format!("format=json&{period}")).await;
        let html = text(server, &format!("format=html&{period}")).await;
        let reply = server.admin("GET", &format!("/admin/v1/reports/conservation?format=html&{period}"), None).await;
        assert_eq!(reply.headers["content-type"], "text/html; charset=utf-8");
        let mut figures = html_figures(&html);
        let with_opening = !json["period"]["from"].is_null();
        let rows = json["accounts"].as_array().unwrap().iter().chain([&json["total"]]);
        for line in rows {
            let id = line["account_id"].as_str().unwrap();
            let mut expected = vec![("difference_usd".to_string(), dec(&line["difference_usd"]))];
            for section in ["opening", "money_in", "closing", "spent"] {
                if section == "opening" && !with_opening {
                    continue;
                }
                for (field, value) in line[section].as_object().unwrap() {
                    expected.push((format!("{section}.{field}"), dec(value)));
                }
            }
            for (field, value) in expected {
                let (shown_value, shown) = figures
                    .remove(&(id.to_string(), field.clone()))
                    .unwrap_or_else(|| panic!("{period}: {id} {field}"));
                assert_eq!(shown_value, value, "{period}: {id} {field}");
                assert_eq!(shown, two_decimals(value), "{period}: {id} {field}");
            }
        }
        for day in json["days"].as_array().unwrap() {
            let date = day["date"].as_str().unwrap();
            let on_day: Vec<_> = figures.keys().filter(|(id, _)| id == date).cloned().collect();
            assert!(on_day.len() >= 10, "{period}: {date} has its movements: {on_day:?}");
            for key in on_day {
                let (value, shown) = figures.remove(&key).unwrap();
                let (section, field) = key.1.split_once('.').unwrap();
                assert_eq!(value, dec(&day[section][field]), "{period}: {date} {}", key.1);
                assert_eq!(shown, two_decimals(value), "{period}: {date} {}", key.1);
            }
        }
        assert!(figures.is_empty(), "{period}: figures the JSON report does not have: {figures:?}");
        // Self-contained and readable without a script.
        assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"), "{period}");
        for outside in ["<script", "src=", "href=", "@import", "url("] {
            assert!(!html.contains(outside), "{period}: {outside} in the HTML");
        }
        assert!(html.contains("Acme &quot;Roam&quot; Travel, Inc."), "{period}: the company name, escaped");
    }
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn esim_report(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["report", "conservation", "--data-dir"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_and_the_offline_report_give_the_same_report() {
    let dir: PathBuf = std::env::temp_dir().join(format!("esim-finance-restart-{}", std::process::id()));
    let running = start(&dir).await;
    traffic(&running.server).await;
    let periods = [Period::ALL, Period::parse(Some("2026-01-02"), Some("2026-01-04")).unwrap()];
    let mut live = Vec::new();
    for q in ["format=json", "format=json&from=2026-01-02&until=2026-01-04"] {
        live.push(report(&running.server, q).await);
    }
    let live_csv = text(&running.server, "format=csv&from=2026-01-02&until=2026-01-04").await;
    running.stop().await;

    let recovery = journal::recover(&dir, &RecoverOptions { repair: false, until: None }).unwrap();
    assert!(recovery.from_snapshot > 0, "a snapshot (with the ledger's history) was used");
    assert!(recovery.replayed > 0, "entries after it were replayed");
    let engine = recovery.engine.unwrap();
    for (period, live) in periods.iter().zip(&live) {
        let rebuilt: Value = serde_json::from_str(&engine.finance_report(None, *period).unwrap().to_json()).unwrap();
        assert_eq!(&rebuilt, live, "{period:?}");
    }

    let offline = esim_report(&dir, &["--format", "json", "--from", "2026-01-02", "--until", "2026-01-04"]);
    assert!(offline.status.success(), "{}", String::from_utf8_lossy(&offline.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&offline.stdout).unwrap(), live[1]);
    let offline = esim_report(&dir, &["--format", "csv", "--from", "2026-01-02", "--until", "2026-01-04"]);
    assert_eq!(String::from_utf8(offline.stdout).unwrap(), live_csv);
    let mut reader = csv::Reader::from_reader(live_csv.as_bytes());
    let names: Vec<String> = reader.records().map(|r| r.unwrap()[1].to_string()).collect();
    assert_eq!(names, ["Acme \"Roam\" Travel, Inc.", "Nomad SIMs", ""], "company names survive CSV quoting");
    let bad = esim_report(&dir, &["--from", "2026-02-30"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("from must be a date"), "{bad:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
