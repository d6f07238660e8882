//! The engine alone, on one core: a fund / usage / read mix (criterion).
//!
//! `cargo bench --bench engine`. 100 accounts with 10 installed eSIMs each; the measured
//! batch cycles fund (0.01), metered usage (1 MB in DE) and eSIM detail reads, moving the
//! service clock a minute every 1,000 commands so the per-key rate limit (100 a minute)
//! never refuses one. Every command of the batch must succeed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, Reply, ResellerOp, ResellerRequest, SandboxOp};
use rust_decimal::Decimal;

const BATCH: usize = 30_000;

fn setup() -> (Engine, Vec<Command>) {
    let mut engine = Engine::new(EngineConfig { seed: 1, ..EngineConfig::default() }, Millis::VIRTUAL_EPOCH);
    let now = Millis::VIRTUAL_EPOCH;
    let mut sims = Vec::new();
    for _ in 0..100 {
        let Ok(Reply::AccountCreated(account)) = engine.handle(
            now,
            Command::Admin(AdminOp::CreateAccount { contact_email: "bench@x.example".into(), company_name: None }),
        ) else {
            panic!("account")
        };
        engine
            .handle(
                now,
                Command::Admin(AdminOp::TopUp {
                    account_id: account.account_id.clone(),
                    amount_usd: Decimal::from(1_000_000),
                }),
            )
            .unwrap();
        for _ in 0..10 {
            let request = ResellerRequest {
                api_key: account.api_key.clone(),
                idempotency_key: None,
                op: ResellerOp::Provision { end_user_reference: None, label: None, group_id: None },
            };
            let Ok(Reply::Provisioned(esim)) = engine.handle(now, Command::Reseller(request)) else {
                panic!("provision")
            };
            engine.handle(now, Command::Sandbox(SandboxOp::Install { iccid: esim.iccid.clone() })).unwrap();
            engine
                .handle(
                    now,
                    Command::Reseller(ResellerRequest {
                        api_key: account.api_key.clone(),
                        idempotency_key: None,
                        op: ResellerOp::Fund { iccid: esim.iccid.clone(), amount: Decimal::from(9_000) },
                    }),
                )
                .unwrap();
            sims.push((account.api_key.clone(), esim.iccid));
        }
    }
    while engine.poll_event().is_some() {}
    let commands = (0..BATCH)
        .map(|i| {
            let (key, iccid) = &sims[i % sims.len()];
            match i % 3 {
                0 => Command::Reseller(ResellerRequest {
                    api_key: key.clone(),
                    idempotency_key: None,
                    op: ResellerOp::Fund { iccid: iccid.clone(), amount: Decimal::new(1, 2) },
                }),
                1 => Command::Sandbox(SandboxOp::Usage {
                    iccid: iccid.clone(),
                    mb: Decimal::ONE,
                    country: "DE".into(),
                    operator: None,
                }),
                _ => Command::Reseller(ResellerRequest {
                    api_key: key.clone(),
                    idempotency_key: None,
                    op: ResellerOp::GetEsim { iccid: iccid.clone() },
                }),
            }
        })
        .collect();
    (engine, commands)
}

fn mix(c: &mut Criterion) {
    let (engine, commands) = setup();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    group.bench_function("fund_usage_read_mix", |b| {
        b.iter_batched(
            || (engine.clone(), commands.clone()),
            |(mut engine, commands)| {
                let mut now = Millis::VIRTUAL_EPOCH.plus_ms(60_000);
                let mut failed = 0;
                for (i, command) in commands.into_iter().enumerate() {
                    if i % 1_000 == 0 {
                        now = now.plus_ms(60_000);
                    }
                    failed += usize::from(engine.handle(now, command).is_err());
                    while engine.poll_event().is_some() {}
                }
                assert_eq!(failed, 0, "every command of the mix succeeds");
                engine
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, mix);
criterion_main!(benches);
