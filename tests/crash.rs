//! Crash recovery of the real binary: `esim serve` is killed with SIGKILL at random
//! moments while several clients fund, provision and defund; after every restart every
//! acknowledged change is there, nothing is half-applied, money is conserved exactly,
//! and at the end the live digest equals an offline `esim replay`.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::process::Command;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod process;
use process::*;

const ROUNDS: usize = 22;
const CLIENTS: usize = 4;

fn dec(value: &Value) -> Decimal {
    Decimal::from_str(&value.to_string()).unwrap()
}

/// What the clients saw acknowledged, per account.
#[derive(Default, Clone)]
struct Acknowledged {
    provisioned: Vec<String>,
    funded_usd: Decimal,
    /// Requests whose outcome is unknown (the server died under them): at most this much more.
    in_doubt_usd: Decimal,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_twenty_times_loses_nothing_acknowledged() {
    let dir = std::env::temp_dir().join(format!("esim-crash-{}", std::process::id()));
    remove_data_dir(&dir);
    let client = unpooled_client();
    let mut accounts: Vec<String> = Vec::new();
    let ledger: Arc<Mutex<Vec<Acknowledged>>> = Arc::new(Mutex::new(vec![Acknowledged::default(); CLIENTS]));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    for round in 0..ROUNDS {
        let mut server = start(&dir, &[]);
        let base = server.base.clone();
        if round == 0 {
            for _ in 0..CLIENTS {
                let (status, created) = call(
                    &client,
                    &base,
                    "POST",
                    "/admin/v1/accounts",
                    ADMIN,
                    Some(json!({"contact_email": "c@x.example"})),
                    None,
                )
                .await
                .unwrap();
                assert_eq!(status, 201);
                let id = created["account_id"].as_str().unwrap();
                let (status, _) = call(
                    &client,
                    &base,
                    "POST",
                    &format!("/admin/v1/accounts/{id}/topups"),
                    ADMIN,
                    Some(json!({"amount_usd": 100000})),
                    None,
                )
                .await
                .unwrap();
                assert_eq!(status, 201);
                accounts.push(created["api_key"].as_str().unwrap().to_string());
            }
        } else {
            // After a restart: every acknowledged change is there, nothing more than
            // what was in doubt, and money is conserved exactly.
            for (index, key) in accounts.iter().enumerate() {
                let acknowledged = ledger.lock().unwrap()[index].clone();
                for iccid in &acknowledged.provisioned {
                    let (status, _) =
                        call(&client, &base, "GET", &format!("/api/v2/reseller/esim/{iccid}"), key, None, None)
                            .await
                            .unwrap();
                    assert_eq!(status, 200, "acknowledged eSIM {iccid} survived round {round}");
                }
                let (_, wallet) =
                    call(&client, &base, "GET", "/api/v2/reseller/wallet/balance", key, None, None).await.unwrap();
                let usage = dec(&wallet["lifetime_usage_usd"]);
                let fees = Decimal::new(175, 2) * Decimal::from(acknowledged.provisioned.len() as u64);
                let floor = acknowledged.funded_usd + fees;
                assert!(usage >= floor, "round {round}: usage {usage} lost acknowledged spend {floor}");
                assert!(
                    usage <= floor + acknowledged.in_doubt_usd,
                    "round {round}: usage {usage} above acknowledged {floor} + in doubt {}",
                    acknowledged.in_doubt_usd
                );
                let mut fixed = ledger.lock().unwrap();
                // What was in doubt is now known: fold it into the acknowledged figures.
                fixed[index].funded_usd = usage - fees;
                fixed[index].in_doubt_usd = Decimal::ZERO;
            }
            let (_, report) =
                call(&client, &base, "GET", "/admin/v1/reports/conservation", ADMIN, None, None).await.unwrap();
            assert_eq!(report["conserved"], json!(true), "round {round}: {report}");
        }
        // Load from several clients, then SIGKILL at a random moment.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut workers = Vec::new();
        for (index, key) in accounts.iter().cloned().enumerate() {
            let (client, base, ledger, stop) = (client.clone(), base.clone(), ledger.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                let mut step = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    step += 1;
                    let known = ledger.lock().unwrap()[index].provisioned.clone();
                    let action = if known.is_empty() { 0 } else { step % 4 };
                    match action {
                        0 => {
                            ledger.lock().unwrap()[index].in_doubt_usd += Decimal::new(175, 2);
                            let reply =
                                call(&client, &base, "POST", "/api/v2/reseller/esim/provision", &key, None, None).await;
                            let mut book = ledger.lock().unwrap();
                            match reply {
                                Some((201, body)) => {
                                    book[index].in_doubt_usd -= Decimal::new(175, 2);
                                    book[index].provisioned.push(body["iccid"].as_str().unwrap().to_string());
                                }
                                Some(_) => book[index].in_doubt_usd -= Decimal::new(175, 2),
                                None => {
                                    // Died under us: the eSIM may exist; its fee is in doubt.
                                    book[index].in_doubt_usd += Decimal::ZERO;
                                    return;
                                }
                            }
                        }
                        1 | 2 => {
                            let iccid = &known[(step as usize / 4) % known.len()];
                            let amount = Decimal::new(100 + (step % 7) as i64, 2);
                            ledger.lock().unwrap()[index].in_doubt_usd += amount;
                            let reply = call(
                                &client,
                                &base,
                                "POST",
                                &format!("/api/v2/reseller/esim/{iccid}/fund"),
                                &key,
                                Some(json!({"amount": amount})),
                                Some(&format!("f-{round}-{index}-{step}-{iccid}")),
                            )
                            .await;
                            let mut book = ledger.lock().unwrap();
                            match reply {
                                Some((200, _)) => {
                                    book[index].in_doubt_usd -= amount;
                                    book[index].funded_usd += amount;
                                }
                                Some(_) => book[index].in_doubt_usd -= amount,
                                None => return,
                            }
                        }
                        _ => {
                            let iccid = &known[(step as usize / 4) % known.len()];
                            if call(
                                &client,
                                &base,
                                "POST",
                                &format!("/api/v2/reseller/esim/{iccid}/defund"),
                                &key,
                                None,
                                None,
                            )
                            .await
                            .is_none()
                            {
                                return;
                            }
                        }
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(40 + random(200))).await;
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for worker in workers {
            worker.await.unwrap();
        }
    }
    // The end: the live digest equals an offline replay of the data dir.
    let mut server = start(&dir, &[]);
    let (_, state) = call(&client, &server.base, "GET", "/admin/v1/state", ADMIN, None, None).await.unwrap();
    let live = state["state_digest"].as_str().unwrap().to_string();
    unsafe_free_sigterm(&mut server.child);
    let replay = Command::new(env!("CARGO_BIN_EXE_esim")).args(["replay", "--data-dir"]).arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.status.success(), "{text}");
    assert!(text.contains(&format!("state_digest {live}")), "live {live}, replay:\n{text}");
    assert!(text.contains("conserved    yes"), "{text}");
    let provisioned: usize = ledger.lock().unwrap().iter().map(|a| a.provisioned.len()).sum();
    assert!(provisioned >= 10, "the clients really worked ({provisioned} eSIMs)");
    remove_data_dir(&dir);
}
