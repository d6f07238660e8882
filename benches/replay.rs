//! Replay speed: how many journal entries per second recovery applies.
//!
//! `cargo bench --bench replay` writes a journal of fund, usage and provisioning
//! commands into a temporary data dir, then times `journal::recover` over it.
//! Set `REPLAY_ENTRIES` to change the size (default 300,000).

use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, Reply, ResellerOp, ResellerRequest, SandboxOp};
use esim_http::journal::{recover, FileJournal, RecoverOptions, SegmentHeader, SnapshotPolicy};
use esim_http::server::JournalSink;
use esim_http::{ClockMode, Service};
use rust_decimal::Decimal;
use std::time::Instant;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --benches` runs bench binaries without --bench: stay quick.
    }
    let entries: u64 = std::env::var("REPLAY_ENTRIES").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000);
    let dir = std::env::temp_dir().join(format!("esim-replay-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = EngineConfig { seed: 1, ..EngineConfig::default() };
    let header = SegmentHeader {
        version: esim_http::journal::FORMAT_VERSION,
        config: config.clone(),
        clock: ClockMode::Virtual,
        start: Millis::VIRTUAL_EPOCH,
        first_index: 0,
    };
    let policy = SnapshotPolicy { every_entries: u64::MAX, every_bytes: u64::MAX };
    let mut journal = FileJournal::open(&dir, header, policy).unwrap();
    let mut service = Service::new(
        Engine::new(config, Millis::VIRTUAL_EPOCH),
        "t".into(),
        ClockMode::Virtual,
        esim_http::secrets::Secrets::seeded(1),
    );
    let mut now = Millis::VIRTUAL_EPOCH;
    // 200 accounts x 5 installed eSIMs, then a fund/usage mix; one append per 100 entries.
    let mut sims = Vec::new();
    for _ in 0..200 {
        let Ok(Reply::AccountCreated(account)) = service.apply_command(
            now,
            Command::Admin(AdminOp::CreateAccount {
                contact_email: "b@x.example".into(),
                company_name: None,
                api_key_digest: Default::default(),
                api_key_prefix: String::new(),
            }),
        ) else {
            panic!("account")
        };
        let _ = service.apply_command(
            now,
            Command::Admin(AdminOp::TopUp {
                account_id: account.account_id.clone(),
                amount_usd: Decimal::from(1_000_000),
            }),
        );
        for _ in 0..5 {
            let request = ResellerRequest {
                key_digest: esim_engine::KeyDigest::of(&account.api_key),
                idempotency_key: None,
                op: ResellerOp::Provision { end_user_reference: None, label: None, group_id: None },
            };
            if let Ok(Reply::Provisioned(p)) = service.apply_command(now, Command::Reseller(request)) {
                let _ = service.apply_command(now, Command::Sandbox(SandboxOp::Install { iccid: p.iccid.clone() }));
                sims.push((account.api_key.clone(), p.iccid));
            }
        }
    }
    journal.append(&service.drain_journal()).unwrap();
    let mut written = 0u64;
    let mut step = 0usize;
    while written < entries {
        for _ in 0..100 {
            step += 1;
            let (key, iccid) = &sims[step % sims.len()];
            now = now.plus_ms(700);
            let command = if step.is_multiple_of(2) {
                Command::Reseller(ResellerRequest {
                    key_digest: esim_engine::KeyDigest::of(key),
                    idempotency_key: None,
                    op: ResellerOp::Fund { iccid: iccid.clone(), amount: Decimal::new(150, 2) },
                })
            } else {
                Command::Sandbox(SandboxOp::Usage {
                    iccid: iccid.clone(),
                    mb: Decimal::from(10),
                    country: "DE".into(),
                    operator: None,
                })
            };
            let _ = service.apply_command(now, command);
            while service.poll_effect().is_some() {}
            while service.poll_event().is_some() {}
        }
        let batch = service.drain_journal();
        written += batch.len() as u64;
        journal.append(&batch).unwrap();
    }
    let live = service.engine().state_digest();
    let bytes: u64 =
        std::fs::read_dir(dir.join("journal")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let started = Instant::now();
    let recovery = recover(&dir, &RecoverOptions { repair: false, until: None }).unwrap();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(recovery.engine.unwrap().state_digest(), live, "replay rebuilds the exact state");
    println!(
        "replay: {} entries ({:.1} MB) in {:.3} s = {:.0} entries/s",
        recovery.replayed,
        bytes as f64 / 1e6,
        seconds,
        recovery.replayed as f64 / seconds
    );
    // Where the time goes: decoding alone.
    let started = Instant::now();
    let mut decoded = 0u64;
    for entry in std::fs::read_dir(dir.join("journal")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let mut offset = 8;
        while offset + 8 <= bytes.len() {
            let length = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
            let payload = &bytes[offset + 8..offset + 8 + length];
            if offset > 8 {
                let _: esim_http::JournalEntry = serde_json::from_slice(payload).unwrap();
                decoded += 1;
            }
            offset += 8 + length;
        }
    }
    println!("decode only: {decoded} entries in {:.3} s", started.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&dir);
}
