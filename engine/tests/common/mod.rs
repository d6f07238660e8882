//! A small driver for engine tests: holds the engine and a virtual clock, and keeps
//! every emitted event so tests can assert on them.
#![allow(dead_code)]
// Shared by several test crates: `unreachable_pub` (engine/Cargo.toml) is for the
// library's API.
#![allow(unreachable_pub)]

use esim_engine::*;
use rust_decimal::Decimal;
use std::str::FromStr;

/// An event's `data` as receivers get it (the JSON object), for tests that read fields
/// by their wire names.
pub trait Wire {
    fn wire(&self) -> serde_json::Value;
}

impl Wire for EventData {
    fn wire(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("event payloads serialize")
    }
}

pub fn d(text: &str) -> Decimal {
    Decimal::from_str(text).unwrap()
}

pub struct Harness {
    pub engine: Engine,
    pub now: Millis,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    /// The harness plays the shell, which draws keys: a counter stands in for entropy.
    pub keys_drawn: u64,
}

/// A test's stand-in for a sealed signing secret: the engine never looks inside, so the
/// bytes need not be encrypted here (the transport's sealing has tests of its own).
pub fn sealed(secret: &str) -> SealedSecret {
    SealedSecret(secret.as_bytes().to_vec())
}

/// A webhook creation as the shell would send it (with a sealed secret).
pub fn create_webhook(url: &str, events: &[&str]) -> ResellerOp {
    ResellerOp::CreateWebhook {
        url: url.into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        signing_secret: sealed("whsec_test"),
    }
}

pub struct Reseller {
    pub account_id: String,
    pub api_key: String,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_config(EngineConfig { seed: 7, ..EngineConfig::default() })
    }

    pub fn with_config(config: EngineConfig) -> Self {
        Harness {
            engine: Engine::new(config, Millis::VIRTUAL_EPOCH),
            now: Millis::VIRTUAL_EPOCH,
            events: vec![],
            effects: vec![],
            keys_drawn: 0,
        }
    }

    /// A new API key as the shell draws it (here from a counter), with its digest.
    pub fn draw_key(&mut self) -> (String, KeyDigest) {
        self.keys_drawn += 1;
        let key = format!("rsk_{:064x}", self.keys_drawn);
        let digest = KeyDigest::of(&key);
        (key, digest)
    }

    fn drain(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            self.events.push(event);
        }
        while let Some(effect) = self.engine.poll_effect() {
            self.effects.push(effect);
        }
    }

    pub fn run(&mut self, command: Command) -> Response {
        let response = self.engine.handle(self.now, command);
        self.drain();
        response
    }

    pub fn advance_secs(&mut self, seconds: i64) {
        self.now = self.now.plus_ms(seconds * 1_000);
        self.engine.handle_timeout(self.now);
        self.drain();
    }

    pub fn admin(&mut self, op: AdminOp) -> Response {
        self.run(Command::Admin(op))
    }

    pub fn sandbox(&mut self, op: SandboxOp) -> Response {
        self.run(Command::Sandbox(op))
    }

    pub fn call(&mut self, reseller: &Reseller, op: ResellerOp) -> Response {
        self.run(Command::Reseller(ResellerRequest {
            key_digest: KeyDigest::of(&reseller.api_key),
            idempotency_key: None,
            op,
        }))
    }

    /// A new account topped up with `amount` (no top-up when 0).
    pub fn reseller(&mut self, amount: &str) -> Reseller {
        let (api_key, api_key_digest) = self.draw_key();
        let Ok(Reply::AccountCreated(created)) = self.admin(AdminOp::CreateAccount {
            contact_email: "ops@reseller.example".into(),
            company_name: Some("Reseller".into()),
            api_key_digest,
            api_key_prefix: String::new(),
        }) else {
            panic!("account creation failed")
        };
        assert!(created.api_key.is_empty(), "the engine never shows a key: the shell does");
        let reseller = Reseller { account_id: created.account_id, api_key };
        if d(amount) > Decimal::ZERO {
            self.admin(AdminOp::TopUp { account_id: reseller.account_id.clone(), amount_usd: d(amount) }).unwrap();
        }
        reseller
    }

    pub fn provision(&mut self, reseller: &Reseller) -> String {
        match self.call(
            reseller,
            ResellerOp::Provision {
                end_user_reference: Some("order-1".into()),
                label: Some("Trip".into()),
                group_id: None,
            },
        ) {
            Ok(Reply::Provisioned(p)) => p.iccid,
            other => panic!("provision failed: {other:?}"),
        }
    }

    pub fn provision_installed(&mut self, reseller: &Reseller) -> String {
        let iccid = self.provision(reseller);
        self.sandbox(SandboxOp::Install { iccid: iccid.clone() }).unwrap();
        iccid
    }

    pub fn fund(&mut self, reseller: &Reseller, iccid: &str, amount: &str) -> Response {
        self.call(reseller, ResellerOp::Fund { iccid: iccid.into(), amount: d(amount) })
    }

    pub fn usage(&mut self, iccid: &str, mb: &str) -> UsageOut {
        match self.sandbox(SandboxOp::Usage { iccid: iccid.into(), mb: d(mb), country: "DE".into(), operator: None }) {
            Ok(Reply::Usage(u)) => {
                UsageOut { used_mb: u.used_mb, charged_usd: u.charged_usd, data_stopped: u.data_stopped }
            }
            other => panic!("usage failed: {other:?}"),
        }
    }

    pub fn detail(&mut self, reseller: &Reseller, iccid: &str) -> esim_engine::reply::EsimDetail {
        match self.call(reseller, ResellerOp::GetEsim { iccid: iccid.into() }) {
            Ok(Reply::Esim(detail)) => detail,
            other => panic!("detail failed: {other:?}"),
        }
    }

    pub fn balance(&mut self, reseller: &Reseller) -> Decimal {
        match self.call(reseller, ResellerOp::WalletBalance) {
            Ok(Reply::WalletBalance(w)) => w.balance_usd,
            other => panic!("balance failed: {other:?}"),
        }
    }

    pub fn events_named(&self, name: &str) -> Vec<&Event> {
        self.events.iter().filter(|e| e.name.as_str() == name).collect()
    }

    /// Conservation, exact, for every account: the report's every difference is 0.
    pub fn assert_conserved(&self) {
        let report = self.engine.conservation_report(None).unwrap();
        assert!(report.conserved, "not conserved: {}", report.to_markdown());
    }
}

pub mod actions;

pub struct UsageOut {
    pub used_mb: Decimal,
    pub charged_usd: Decimal,
    pub data_stopped: bool,
}

pub fn code(response: Response) -> &'static str {
    match response {
        Err(error) => error.code.as_str(),
        Ok(reply) => panic!("expected an error, got {reply:?}"),
    }
}
