//! What a start continues from or makes: the journal header of a new state, the engine
//! and service of each shard, the demo account and the admin token.

use super::ServeOptions;
use crate::journal::{self, SegmentHeader};
use crate::secrets::{self, SealingKey, Secrets};
use crate::server::{self, ServerOptions};
use crate::store_pg::StoreOptions;
use crate::{ClockMode, Service};
use esim_engine::{AdminOp, Command, Engine, EngineConfig, Millis, Reply};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The contact of the demo account (how a restart knows it exists already).
pub const DEMO_EMAIL: &str = "demo@reseller.example";

/// The journal header of a new data dir or store: the seed and configuration of this
/// start (the seed from the OS when none is given).
pub fn new_header(options: &ServeOptions) -> SegmentHeader {
    let config = EngineConfig {
        // The seed draws ids and serials only, never a secret (secrets come from the OS
        // random source), so it may sit in every segment header.
        seed: options.seed.unwrap_or_else(|| u64::from_le_bytes(secrets::os_random::<8>())),
        allow_insecure_webhooks: options.allow_insecure_webhooks,
        ..EngineConfig::default()
    };
    let start = match options.clock {
        ClockMode::Virtual => Millis::VIRTUAL_EPOCH,
        ClockMode::Wall => Millis(server::real_now_ms()),
    };
    SegmentHeader { version: journal::FORMAT_VERSION, config, clock: options.clock, start, first_index: 0 }
}

/// Shard k's header on a new sharded data dir or store: the start's seed plus k (each
/// shard its own streams), its index and the count, and no eSIM of its own: the initial
/// inventory is in the global pool (the data dir's or the store's), from which it takes
/// its first block at start (decisions 187, 190); the same start time, so every shard's
/// clock starts together (decision 170).
pub fn shard_header(fresh: &SegmentHeader, shard: u32, shards: u32) -> SegmentHeader {
    assert!(shard < shards, "shard {shard} of {shards}");
    let config = EngineConfig {
        seed: fresh.config.seed.wrapping_add(u64::from(shard)),
        shard,
        shard_count: shards,
        initial_inventory: 0,
        ..fresh.config.clone()
    };
    SegmentHeader { config, ..fresh.clone() }
}

/// [`continue_or_start`] of shard `shard` of `shards`: a new one starts from
/// [`shard_header`] of this start's header.
pub(crate) fn continue_or_start_shard(
    recovery: journal::Recovery,
    clock: ClockMode,
    fresh: &SegmentHeader,
    (shard, shards): (u32, u32),
) -> (Engine, SegmentHeader, bool) {
    continue_or_start((recovery.engine, recovery.header), recovery.next_index, clock, &format!("shard {shard}"), || {
        shard_header(fresh, shard, shards)
    })
}

/// The engine and journal header a start continues from: what was recovered (`what`:
/// "this data dir", "shard 2"), on this start's clock, or a new one from `new`; and
/// whether it is new.
pub(crate) fn continue_or_start(
    recovered: (Option<Engine>, Option<SegmentHeader>),
    next_index: u64,
    clock: ClockMode,
    what: &str,
    new: impl FnOnce() -> SegmentHeader,
) -> (Engine, SegmentHeader, bool) {
    match recovered {
        (Some(engine), Some(mut header)) => {
            header.first_index = next_index;
            if header.clock != clock {
                // Allowed (every journal entry carries its own service time), but rarely
                // meant: a virtual clock is usually far ahead of the wall clock, and then
                // service time stands still until the wall clock catches up.
                tracing::warn!(
                    from = clock_name(header.clock),
                    to = clock_name(clock),
                    "{what} ran on the {} clock; it continues on the {} clock from service time {}",
                    clock_name(header.clock),
                    clock_name(clock),
                    engine.now()
                );
                header.clock = clock;
            }
            (engine, header, false)
        }
        _ => {
            let header = new();
            (Engine::new(header.config.clone(), header.start), header, true)
        }
    }
}

fn clock_name(clock: ClockMode) -> &'static str {
    match clock {
        ClockMode::Wall => "wall",
        ClockMode::Virtual => "virtual",
    }
}

esim_engine::with_test_switches! {
    /// Test-only switch (the fail-fast test), compiled only into the builds of `cargo
    /// test` (decision 84): with this environment variable at 1, every eSIM fund panics
    /// inside the engine, so a test can see the process end.
    const TEST_PANIC_ON_FUND: &str = "ESIM_TEST_PANIC_ON_FUND";

    /// The engine with every fund panicking when [`TEST_PANIC_ON_FUND`] is 1.
    fn panic_on_fund_if_asked(mut engine: Engine) -> Engine {
        if std::env::var_os(TEST_PANIC_ON_FUND).is_some_and(|v| v == "1") {
            eprintln!("esim: {TEST_PANIC_ON_FUND}=1: every fund panics (a test of fail-fast)");
            engine.inject_bug_for_test(Some(esim_engine::InjectedBug::PanicOnFund));
        }
        engine
    }
}

/// The service one engine (shard `shard` of `shards`; `(0, 1)` unsharded) starts with:
/// the sealing key (checked against it before), the test switch, and this start's
/// `--allow-insecure-webhooks`.
pub(crate) fn start_service(
    options: &ServeOptions,
    engine: Engine,
    (key, admin_token): (Arc<SealingKey>, String),
    (shard, shards): (u32, u32),
) -> Result<Service, String> {
    esim_engine::with_test_switches! {
        let engine = panic_on_fund_if_asked(engine);
    }
    let mut secrets = Secrets::from_os(key);
    secrets.set_shard(shard, shards);
    let mut service = Service::new(engine, admin_token, options.clock, secrets);
    if service.engine().config().allow_insecure_webhooks != options.allow_insecure_webhooks {
        // The flag of this start rules from now on (journaled: earlier registrations
        // replay under the setting they were made with).
        let now = service.now(Millis(server::real_now_ms()));
        let allowed = options.allow_insecure_webhooks;
        service
            .apply_command(now, Command::Admin(AdminOp::SetInsecureWebhooks { allowed }))
            .map_err(|e| e.to_string())?;
    }
    Ok(service)
}

/// The demo account of this start: made now (its key, shown once), or made before.
pub(crate) enum Demo {
    Created(String),
    Exists(String),
}

/// The demo account among `services`' accounts, if one was made before.
pub(crate) fn existing_demo<'a>(services: impl IntoIterator<Item = &'a Service>) -> Option<String> {
    services.into_iter().find_map(|service| {
        service.engine().accounts().iter().find(|a| a.contact_email == DEMO_EMAIL).map(|a| a.id.clone())
    })
}

/// The demo account of this start: made on `first` (shard 0, decision 169) when asked,
/// or by default on a new state; one made before is shown unless `--demo=false`.
pub(crate) fn settle_demo(
    existing: Option<String>,
    asked: Option<bool>,
    new: bool,
    first: &mut Service,
) -> Result<Option<Demo>, String> {
    Ok(match existing {
        None if asked.unwrap_or(new) => Some(Demo::Created(create_demo_account(first)?)),
        None => None,
        Some(account_id) => (asked != Some(false)).then_some(Demo::Exists(account_id)),
    })
}

fn create_demo_account(service: &mut Service) -> Result<String, String> {
    let now = service.now(Millis(server::real_now_ms()));
    let created = service.apply_command(
        now,
        Command::Admin(AdminOp::CreateAccount {
            contact_email: DEMO_EMAIL.into(),
            company_name: Some("Demo Reseller".into()),
            // Drawn by the service.
            api_key_digest: Default::default(),
            api_key_prefix: String::new(),
        }),
    );
    let Ok(Reply::AccountCreated(created)) = created else { return Err("demo account creation failed".into()) };
    service
        .apply_command(
            now,
            Command::Admin(AdminOp::TopUp { account_id: created.account_id.clone(), amount_usd: 100.into() }),
        )
        .map_err(|e| e.to_string())?;
    Ok(created.api_key)
}

/// What a start says of the demo account: its key the first time, else how to get one.
pub(crate) fn print_demo(demo: Option<Demo>, address: std::net::SocketAddr, data_dir: &Path) {
    match demo {
        Some(Demo::Created(key)) => println!("demo account API key (shown once): {key}"),
        Some(Demo::Exists(account_id)) => println!(
            "demo account {account_id} (its key was shown at its first start); a new key:\n  \
             curl -s -XPOST http://{address}/admin/v1/accounts/{account_id}/keys \
             -H \"Authorization: Bearer $(cat {})\"",
            data_dir.join("admin-token").display()
        ),
        None => {}
    }
}

/// The admin token of this start: the one given, else the data dir's file (made with a
/// new token when missing).
pub(crate) fn admin_token(options: &ServeOptions) -> Result<String, String> {
    match options.admin_token.clone() {
        Some(token) if !token.is_empty() => Ok(token),
        _ => {
            let existing =
                std::fs::read_to_string(options.data_dir.join("admin-token")).ok().map(|t| t.trim().to_string());
            let token = existing.filter(|t| !t.is_empty()).unwrap_or_else(random_token);
            write_admin_token(&options.data_dir, &token)
                .map_err(|e| format!("cannot write the admin token file: {e}"))?;
            Ok(token)
        }
    }
}

/// A new admin token: `adm_` and 48 hex characters from the OS random source.
fn random_token() -> String {
    format!("adm_{}", secrets::hex(&secrets::os_random::<24>()))
}

/// Writes the admin token file, mode 0600 whatever the umask (and an existing file is
/// made 0600 too).
fn write_admin_token(dir: &Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = secrets::private_file(&dir.join("admin-token"))?;
    file.write_all(token.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// The server's options from the serve flags (one engine or several shards alike).
pub(crate) fn server_options(options: &ServeOptions) -> ServerOptions {
    let mut server = ServerOptions::new(options.speed.unwrap_or(1), options.allow_insecure_webhooks);
    server.edge.connections_max = options.max_connections;
    server.edge.connections_per_address_max = options.max_connections_per_address;
    server.append_deadline = Duration::from_millis(options.append_deadline_ms);
    server
}

/// How this process uses a `--store` (lease, append deadline, `--take-over`).
pub(crate) fn store_options(options: &ServeOptions) -> StoreOptions {
    StoreOptions {
        lease: Duration::from_millis(options.lease_ms),
        append_deadline: Duration::from_millis(options.append_deadline_ms),
        take_over: options.take_over,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn virtual_clock() -> ServeOptions {
        ServeOptions { clock: ClockMode::Virtual, seed: Some(7), ..ServeOptions::default() }
    }

    #[test]
    fn a_new_header_carries_the_start_settings() {
        let header = new_header(&ServeOptions { allow_insecure_webhooks: true, ..virtual_clock() });
        assert_eq!((header.version, header.first_index), (journal::FORMAT_VERSION, 0));
        assert_eq!((header.clock, header.start), (ClockMode::Virtual, Millis::VIRTUAL_EPOCH));
        assert_eq!(header.config.seed, 7);
        assert!(header.config.allow_insecure_webhooks);
        let wall = new_header(&ServeOptions { seed: None, ..ServeOptions::default() });
        assert_eq!(wall.clock, ClockMode::Wall);
        assert!(wall.start.0 >= 1_700_000_000_000, "the wall clock's now");
        assert!(!wall.config.allow_insecure_webhooks);
    }

    #[test]
    fn each_shard_header_has_its_own_seed_and_no_inventory_of_its_own() {
        let fresh = new_header(&virtual_clock());
        assert!(fresh.config.initial_inventory > 0, "the pool's inventory");
        for shard in 0..3 {
            let header = shard_header(&fresh, shard, 3);
            assert_eq!(header.config.seed, 7 + u64::from(shard));
            assert_eq!((header.config.shard, header.config.shard_count), (shard, 3));
            assert_eq!(header.config.initial_inventory, 0, "taken from the global pool at start");
            assert_eq!((header.start, header.clock), (fresh.start, fresh.clock), "every shard's clock starts together");
        }
    }

    #[test]
    fn a_start_continues_what_was_recovered_on_this_starts_clock() {
        let fresh = new_header(&virtual_clock());
        let (engine, header, new) =
            continue_or_start((None, None), 0, ClockMode::Virtual, "this data dir", || fresh.clone());
        assert!(new);
        assert_eq!(header.config.seed, 7);
        let recovered = (Some(engine), Some(header));
        let never = || -> SegmentHeader { panic!("a recovered state is continued, not made") };
        let (_, header, new) = continue_or_start(recovered, 42, ClockMode::Wall, "this data dir", never);
        assert!(!new);
        assert_eq!((header.first_index, header.clock), (42, ClockMode::Wall), "the next entry, on the new clock");
    }

    #[test]
    fn the_demo_account_is_made_once_and_shown_unless_turned_off() {
        let key = Arc::new(SealingKey::from_bytes([9; 32]));
        let header = new_header(&virtual_clock());
        let engine = Engine::new(header.config.clone(), header.start);
        let mut service = Service::new(engine, "adm".into(), ClockMode::Virtual, Secrets::from_os(key));
        assert!(settle_demo(None, None, false, &mut service).unwrap().is_none(), "not on an old state by default");
        assert!(settle_demo(None, Some(false), true, &mut service).unwrap().is_none(), "--demo=false");
        let Some(Demo::Created(api_key)) = settle_demo(None, None, true, &mut service).unwrap() else { panic!() };
        assert!(!api_key.is_empty());
        let existing = existing_demo([&service]).expect("found by its contact");
        let shown = settle_demo(Some(existing.clone()), None, false, &mut service).unwrap();
        assert!(matches!(shown, Some(Demo::Exists(id)) if id == existing));
        assert!(settle_demo(Some(existing), Some(false), false, &mut service).unwrap().is_none());
        assert_eq!(service.engine().accounts().len(), 1, "made once");
    }

    #[test]
    fn the_admin_token_is_the_one_given_else_the_data_dirs_file() {
        let dir = tempfile::tempdir().unwrap();
        let given =
            ServeOptions { admin_token: Some("adm_given".into()), data_dir: dir.path().into(), ..virtual_clock() };
        assert_eq!(admin_token(&given).unwrap(), "adm_given");
        assert!(!dir.path().join("admin-token").exists(), "a given token is not written");
        let generated = ServeOptions { admin_token: Some(String::new()), ..given };
        let token = admin_token(&generated).unwrap();
        assert!(token.starts_with("adm_") && token.len() == 52, "{token}");
        assert_eq!(admin_token(&generated).unwrap(), token, "read back at the next start");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("admin-token")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
