//! The read-ahead pass over a batch (`Engine::warm`, issue 15) changes nothing: the same
//! commands, applied with a warm pass before each batch and without, give the same
//! answers, events and state digest, whatever the batch holds (unknown keys and ICCIDs,
//! text that is no ICCID, group members, more commands than one pass reads ahead).

mod common;
use common::*;
use esim_engine::*;

/// The commands of the test: every kind `warm` reads ahead for, and some it does not.
fn commands(h: &mut Harness) -> Vec<Command> {
    let first = h.reseller("500");
    let second = h.reseller("500");
    let mut sims = Vec::new();
    for reseller in [&first, &second] {
        for _ in 0..4 {
            let iccid = h.provision_installed(reseller);
            h.fund(reseller, &iccid, "20").unwrap();
            sims.push((reseller, iccid));
        }
    }
    let Ok(Reply::GroupCreated(group)) = h.call(
        &second,
        ResellerOp::CreateGroup { name: "fleet".into(), low_balance_threshold_usd: None, refill_amount_usd: None },
    ) else {
        panic!("group creation failed")
    };
    h.call(&second, ResellerOp::FundGroup { group_id: group.id.clone(), amount: d("50") }).unwrap();
    let member = h.provision_installed(&second);
    h.call(&second, ResellerOp::AddGroupEsim { group_id: group.id.clone(), iccid: member.clone() }).unwrap();

    let reseller = |who: &Reseller, op: ResellerOp| {
        Command::Reseller(ResellerRequest { key_digest: KeyDigest::of(&who.api_key), idempotency_key: None, op })
    };
    let usage = |iccid: &str, mb: &str| {
        Command::Sandbox(SandboxOp::Usage { iccid: iccid.into(), mb: d(mb), country: "DE".into(), operator: None })
    };
    let mut commands = Vec::new();
    for round in 0..12 {
        for (who, iccid) in &sims {
            commands.push(reseller(who, ResellerOp::Fund { iccid: iccid.clone(), amount: d("0.01") }));
            commands.push(usage(iccid, if round == 11 { "100000" } else { "1" }));
            commands.push(reseller(who, ResellerOp::GetEsim { iccid: iccid.clone() }));
        }
        commands.push(usage(&member, "2"));
        commands.push(reseller(&second, ResellerOp::GetEsim { iccid: member.clone() }));
        // Another account's eSIM, an ICCID nobody holds, text that is no ICCID, a key
        // nobody holds, and commands that name no eSIM.
        commands.push(reseller(&first, ResellerOp::GetEsim { iccid: member.clone() }));
        commands.push(reseller(&first, ResellerOp::GetEsim { iccid: "8944100000000000000".into() }));
        commands.push(usage("99999999999999999999", "1"));
        commands.push(usage("not an iccid", "1"));
        let stranger = Reseller { account_id: String::new(), api_key: "rsk_nobody".into() };
        commands.push(reseller(&stranger, ResellerOp::Fund { iccid: sims[0].1.clone(), amount: d("1") }));
        commands.push(reseller(&first, ResellerOp::WalletBalance));
        commands.push(Command::Admin(AdminOp::TopUp { account_id: first.account_id.clone(), amount_usd: d("1") }));
    }
    commands
}

/// Applies `commands` in batches of `batch` (warming each first when asked), five
/// seconds of service time apart, so that report timers fire between them: every answer
/// and event as JSON, and the state digest.
fn run(mut engine: Engine, start: Millis, commands: &[Command], batch: usize, warm: bool) -> (Vec<String>, String) {
    let mut seen = Vec::new();
    let mut now = start;
    for group in commands.chunks(batch) {
        if warm {
            engine.warm(group.iter().map(Command::warm_target));
        }
        for command in group {
            now = now.plus_ms(5_000);
            let answer = match engine.handle(now, command.clone()) {
                Ok(reply) => serde_json::to_string(&reply).unwrap(),
                Err(error) => format!("{} {}", error.code.as_str(), error.message),
            };
            seen.push(answer);
            while let Some(event) = engine.poll_event() {
                seen.push(serde_json::to_string(&event).unwrap());
            }
        }
    }
    (seen, engine.state_digest())
}

#[test]
fn a_warmed_batch_answers_and_leaves_the_state_exactly_as_without() {
    let mut h = Harness::new();
    let commands = commands(&mut h);
    assert!(commands.len() > 2 * WARM_COMMANDS_MAX, "some batches are longer than one pass reads ahead");
    let (plain, plain_digest) = run(h.engine.clone(), h.now, &commands, 1, false);
    assert!(plain.iter().any(|seen| seen.contains("ESIM_NOT_FOUND")), "the unknown eSIMs are refused");
    assert!(plain.iter().any(|seen| seen.contains("INVALID_API_KEY")), "the unknown key is refused");
    assert!(plain.iter().any(|seen| seen.contains("\"data_stopped\":true")), "the big usage runs a wallet dry");
    for batch in [1, 7, 32, WARM_COMMANDS_MAX + 9, commands.len()] {
        let (warmed, warmed_digest) = run(h.engine.clone(), h.now, &commands, batch, true);
        assert_eq!(warmed.len(), plain.len(), "batches of {batch}");
        for (at, (warmed, plain)) in warmed.iter().zip(&plain).enumerate() {
            assert_eq!(warmed, plain, "answer or event {at}, batches of {batch}");
        }
        assert_eq!(warmed_digest, plain_digest, "batches of {batch}");
    }
}

#[test]
fn warm_targets_name_the_key_and_the_esim_a_command_reads_first() {
    let key = KeyDigest::of("rsk_a");
    let reseller = |op| Command::Reseller(ResellerRequest { key_digest: key, idempotency_key: None, op });
    let iccid = || "8944100000000000017".to_string();
    for op in [
        ResellerOp::GetEsim { iccid: iccid() },
        ResellerOp::Fund { iccid: iccid(), amount: d("1") },
        ResellerOp::Defund { iccid: iccid() },
        ResellerOp::Throttle { iccid: iccid(), speed: "NO_LIMIT".into() },
        ResellerOp::RemoveGroupEsim { group_id: "g".into(), iccid: iccid() },
    ] {
        let command = reseller(op);
        assert_eq!(command.warm_target(), (Some(&key), Some("8944100000000000017")), "{command:?}");
    }
    let command = reseller(ResellerOp::WalletBalance);
    assert_eq!(command.warm_target(), (Some(&key), None));
    let usage = Command::Sandbox(SandboxOp::Usage { iccid: iccid(), mb: d("1"), country: "DE".into(), operator: None });
    assert_eq!(usage.warm_target(), (None, Some("8944100000000000017")));
    let top_up = Command::Admin(AdminOp::TopUp { account_id: "acc_x".into(), amount_usd: d("1") });
    assert_eq!(top_up.warm_target(), (None, None));
}
