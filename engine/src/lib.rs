//! # esim-engine: the Reseller eSIM Connectivity Service as a state machine
//!
//! The complete service logic (accounts, eSIMs, wallets, groups, events, webhooks,
//! auto-refill and the upstream network model) is one synchronous, deterministic state
//! machine. It does no IO, reads no clock and draws no OS randomness: the same
//! [`EngineConfig`] (with its seed) and the same inputs give byte-identical responses,
//! effects, events and [`Engine::state_digest`].
//!
//! ## The contract
//!
//! Inputs (`handle_*`):
//! - [`Engine::handle`]`(now, Command) -> Response` applies one command at service time
//!   `now` (a [`Millis`]). Timers due at or before `now` fire first, in deadline order.
//! - [`Engine::handle_timeout`]`(now)` fires every timer due at or before `now`, each at
//!   its own deadline (sync cycles, settlements, moves, webhook retries, card charges,
//!   held-back group events). Extra calls are harmless no-ops.
//! - A webhook outcome is an input too: [`Command::DeliveryOutcome`].
//!
//! Outputs (`poll_*`), to drain completely after every input:
//! - [`Engine::poll_effect`]: deliveries the shell must POST ([`Effect::Deliver`]).
//! - [`Engine::poll_event`]: every event emitted, for observers.
//! - [`Engine::poll_timeout`]: the next deadline at which to call `handle_timeout`.
//!
//! Getters (`&self`): [`Engine::state_digest`], [`Engine::ledger`], and the conservation
//! report ([`Engine::conservation_report`]).
//!
//! Time is a millisecond newtype; `now` never goes back (an earlier `now` is treated as
//! the current time). All randomness comes from one ChaCha20 RNG seeded once from
//! `EngineConfig::seed` and kept in the state.
//!
//! ## Invariants (asserted, and checked by the simulation after every step)
//! - Money is `rust_decimal::Decimal` and moves only by [`ledger::Ledger::transfer`]:
//!   per account, the sum of all ledger slots is exactly zero, and no slot but `World`
//!   is ever negative (DESIGN.md rule 6).
//! - A displayed balance is the exact credit rounded down to the cent (rule 2).
//! - Usage never takes a wallet below zero (rule 3).
//!
//! ## Layout
//! `engine` (state, dispatch, timers, events), one module per resource (`account`,
//! `esim`, `group`, `webhook`, `network`), `wallet` (every eSIM and group wallet rule),
//! `ledger` and `money` (the money rules), `command`/`reply`/`error` (the interface),
//! `rates` and `codes` (data and artefacts).
#![forbid(unsafe_code)]

pub mod account;
pub mod codes;
pub mod command;
pub mod engine;
pub mod error;
pub mod esim;
pub mod event;
pub mod group;
pub mod ledger;
pub mod money;
pub mod network;
pub mod rates;
pub mod reply;
pub mod report;
pub mod secret;
pub mod state;
pub mod time;
pub mod wallet;
pub mod webhook;

pub use command::*;
pub use engine::{limits, Delivery, Effect, Engine, EngineConfig, InjectedBug};
pub use error::{ApiError, ErrorCode};
pub use event::{Event, EventName};
pub use reply::{render, Reply, Response};
pub use secret::{KeyDigest, SealedSecret};
pub use time::Millis;

/// The rates endpoint: the built-in table filtered by country and continent.
pub(crate) fn rates_reply(country: Option<&str>, continent: Option<&str>) -> Reply {
    let countries = rates::RateTable::builtin().filter(country, continent);
    Reply::Rates(reply::Rates { total_countries: countries.len() as u64, discount: rates::DISCOUNT_TEXT, countries })
}
