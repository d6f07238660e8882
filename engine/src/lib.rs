//! # esim-engine: the Reseller eSIM Connectivity Service as a state machine
//!
//! The complete service logic (accounts, eSIMs, wallets, groups, events, webhooks,
//! auto-refill and the upstream network model) is one synchronous, deterministic state
//! machine. It does no IO, reads no clock and draws no OS randomness: the same
//! [`EngineConfig`] (with its seed) and the same inputs give byte-identical responses,
//! effects, events and [`Engine::state_digest`]. The shell (the transport's `Service`
//! in production, the simulation's world in tests) owns everything else: sockets, the
//! journal, the clock, API keys and signing secrets (drawn from OS entropy; only a
//! [`KeyDigest`] and a [`SealedSecret`] ever enter), and the per-key rate windows.
//!
//! ## The contract, in the order a driver uses it
//!
//! Inputs:
//! 1. [`Engine::handle`]`(now, Command) -> Response`: one command at service time `now`
//!    (a [`Millis`]; an earlier `now` counts as the current time). Timers due at or
//!    before `now` fire first, in deadline order. Production calls it for every
//!    request, after the transport authenticated the key (with the read-only lookup
//!    [`Engine::key_account`]) and passed its rate limit; replaying a journal is
//!    calling it again with the journaled commands. A webhook outcome is a command too
//!    ([`Command::DeliveryOutcome`]).
//! 2. [`Engine::handle_timeout`]`(now)`: fires every timer due at or before `now`, each at
//!    its own deadline. Stale calls are expected and harmless: a timer whose subject
//!    moved on (a retry of a webhook disabled since, a held-back event already sent)
//!    fires as a no-op that says why.
//! 3. [`Engine::restart`]: after the shell restarted (or reloaded the durable state),
//!    deliveries handed out before are handed out again; receivers de-duplicate.
//!
//! Outputs, drained completely after every input:
//! 1. [`Engine::poll_effect`]: deliveries the shell must POST ([`Effect::Deliver`]).
//! 2. [`Engine::poll_event`]: every event emitted, for observers.
//! 3. [`Engine::poll_timeout`]: the next deadline at which to call `handle_timeout`.
//!
//! Getters (`&self`, no effect on the state): [`Engine::now`], [`Engine::state_digest`],
//! [`Engine::key_account`] and [`Engine::valid_keys`] (the transport's key directory),
//! [`Engine::ledger`], [`Engine::conservation_report`], [`Engine::finance_report`], and the records
//! ([`Engine::accounts`], [`Engine::esims`], [`Engine::groups`], [`Engine::webhooks`]).
//!
//! A driver loop (what the transport's owner task does, minus HTTP and the journal):
//!
//! ```
//! use esim_engine::{AdminOp, Command, DeliveryResult, Effect, Engine, EngineConfig, KeyDigest, Millis};
//!
//! let mut engine = Engine::new(EngineConfig::default(), Millis::VIRTUAL_EPOCH);
//! let mut now = Millis::VIRTUAL_EPOCH;
//! let create = AdminOp::CreateAccount {
//!     contact_email: "ops@reseller.example".into(),
//!     company_name: None,
//!     api_key_digest: KeyDigest::of("rsk_drawn_by_the_shell_from_os_entropy"),
//!     api_key_prefix: "rsk_drawn_by".into(),
//! };
//! let mut inbox = vec![Command::Admin(create)];
//! while let Some(command) = inbox.pop() {
//!     now = now.plus_ms(1_000); // the shell's clock; it never goes back
//!     let response = engine.handle(now, command); // Ok(Reply) or Err(ApiError): the answer
//!     assert!(response.is_ok());
//!     while let Some(Effect::Deliver(delivery)) = engine.poll_effect() {
//!         // POST it (signed by the shell), then report how it went: another input.
//!         let result = DeliveryResult::Status(200);
//!         inbox.push(Command::DeliveryOutcome { delivery_id: delivery.delivery_id, result, duration_ms: Some(12) });
//!     }
//!     while engine.poll_event().is_some() {} // observers: logs, tests, the simulation
//!     if let Some(deadline) = engine.poll_timeout() {
//!         engine.handle_timeout(deadline.min(now)); // early or repeated calls are no-ops
//!     }
//! }
//! assert_eq!(engine.accounts().len(), 1);
//! ```
//!
//! A panic in the engine is a bug (an assert at a rule site failed, or an invariant
//! broke): the shell must not catch it and go on, since the state may be half-changed.
//! The server ends the process; a restart recovers the durable state exactly.
//!
//! Time is a millisecond newtype. All randomness (ids, serials, matching ids) comes
//! from ChaCha20 streams of `EngineConfig::seed`, one per purpose (`ids::Purpose`), kept
//! in the state.
//!
//! ## Invariants (asserted, and checked by the simulation after every step)
//! - Money is `rust_decimal::Decimal` and moves only by [`ledger::Ledger::transfer`]:
//!   per account, the sum of all ledger slots is exactly zero, and no slot but `World`
//!   is ever negative (docs/architecture.md, rule 6).
//! - A displayed balance is the exact credit rounded down to the cent (rule 2).
//! - Usage never takes a wallet below zero (rule 3).
//!
//! ## Layout, from the ground up
//! No module below `engine` imports it: the leaves and the parts know nothing of the
//! engine, and only the rule modules (`impl Engine` blocks) reach into several parts.
//! - Leaves: `ids` (the index newtypes `AccountIx`, `EsimIx`, `GroupIx`, `WebhookIx`,
//!   the ledger's `Slot`, `DeliveryId`, `EventId`, `WalletOwner`; hex and ICCID
//!   helpers), `limits` (the spec's [`limits`] and paging), `time`, `money`, `error`,
//!   `codes`, `secret` (key digests and sealed secrets), `event_name`, `alarm` (the
//!   once-per-crossing balance alarms), `schema`, `config` ([`EngineConfig`] and, with the
//!   `test-switches` feature only, `InjectedBug`, decision 84).
//! - Parts that own their state, with their own methods: `ledger` (the double-entry
//!   ledger, the one place money moves), `event_log` (the events API's store),
//!   `random` (the seeded streams), and the records of `state`.
//! - The interface: `command`, `reply`, [`Effect`] and [`Delivery`] (`effect`), `timer`
//!   (what the engine waits for), `event` and `event_data` (the events and their typed
//!   payloads).
//! - `engine`: the [`Engine`] that composes the parts, its constructor, the inputs,
//!   outputs and getters above, the dispatch of requests and timers.
//! - Rules, as `impl Engine` blocks: one module per resource (`account`, `esim`,
//!   `group`, `webhook`, `network`, `event_api`), `wallet` (every eSIM and group wallet
//!   rule), `emit` (events to observers, webhooks and the log), `auth`, `idempotency`,
//!   `pending` (the sandbox's view of the timers); and the reports (`report`, `finance`).
#![forbid(unsafe_code)]

pub mod account;
mod alarm;
mod auth;
pub mod codes;
pub mod command;
pub mod config;
pub mod effect;
mod emit;
pub mod engine;
pub mod error;
pub mod esim;
pub mod event;
mod event_api;
pub mod event_data;
pub mod event_log;
pub mod event_name;
pub mod finance;
pub mod finance_html;
pub mod finance_render;
pub mod group;
mod idempotency;
pub mod ids;
pub mod ledger;
pub mod limits;
pub mod money;
pub mod network;
mod pending;
mod random;
pub mod rates;
pub mod reply;
pub mod report;
pub mod schema;
pub mod secret;
pub mod state;
pub mod time;
pub mod timer;
pub mod wallet;
pub mod webhook;

pub use command::*;
#[cfg(feature = "test-switches")]
pub use engine::InjectedBug;
pub use engine::{Delivery, Effect, Engine, EngineConfig};
pub use error::{ApiError, ErrorCode};
pub use event::{Event, EventName};
pub use event_data::EventData;
pub use limits::page;
pub use reply::{draw_qr, render, Reply, Response};
pub use secret::{KeyDigest, SealedSecret};
pub use time::Millis;

/// Compiles the code it wraps only when the engine is built with its `test-switches`
/// feature (the builds of `cargo test`), and to nothing otherwise: how a crate above the
/// engine keeps its own test-only switch out of production builds (the `esim` binary's
/// `ESIM_TEST_PANIC_ON_FUND`, decisions 79 and 84), since it cannot test the engine's
/// features with `cfg`.
#[cfg(feature = "test-switches")]
#[macro_export]
macro_rules! with_test_switches {
    ($($code:tt)*) => { $($code)* };
}

/// Compiles the code it wraps only when the engine is built with its `test-switches`
/// feature; this build has it off, so the code is left out (decision 84).
#[cfg(not(feature = "test-switches"))]
#[macro_export]
macro_rules! with_test_switches {
    ($($code:tt)*) => {};
}
