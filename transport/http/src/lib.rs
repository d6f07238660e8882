//! # esim-http: the HTTP shell
//!
//! The production shell around the pure API layer (`esim-api`) and the store
//! (`esim-store`). Both are re-exported (`esim_http::api`, `esim_http::journal`, ...),
//! so that the binary, the tests and the benches reach the whole service through one crate.
//!
//! - [`server`]: hyper serving the service from one owner task per shard: group commit
//!   through the store's `JournalSink`, timers, readiness, stop and drain.
//! - [`edge`]: the connection-level guards of the server (connection cap, timeouts,
//!   body budget).
//! - [`sender`]: the webhook sender (signed POSTs, retries, no private networks).
//! - [`metrics`]: the operator metrics of `GET /metrics` (Prometheus text format).
//! - [`dashboard`]: the developer dashboard's files under `/dashboard/` (a client of the API).
//! - [`docs_page`]: the front door: `/` (landing page or JSON index) and the API reference
//!   under `/docs/`.
//! - [`nodes`]: the nodes of a sharded store: forwarding a shard's requests to its owner.
//! - [`stock`]: one shard's side of the global eSIM inventory, kept by its owner task
//!   (with the store's durable [`pool`] as [`pool`]).
//! - [`standby_http`]: what a hot standby answers while the store's follower
//!   ([`standby`]) follows the owner; [`standby::follow`] runs both.
//! - [`deploy`]: the deployment wiring of the `esim` commands (serve, sharded serve,
//!   standbys, replay, report, repair, logging) as library functions taking plain options.
//!
//! From the API layer: [`routes`], [`api`], [`service`], [`admission`], [`secrets`],
//! [`openapi`], [`shards`], [`webhook_headers`]. From the store: [`journal`],
//! [`store_pg`], [`store_mem`], [`fence`], [`lock`], and the two halves of [`pool`] and
//! [`standby`].
#![forbid(unsafe_code)]

pub mod dashboard;
pub mod deploy;
pub mod docs_page;
pub mod edge;
pub mod metrics;
pub mod nodes;
pub mod sender;
pub mod server;
pub mod standby_http;
pub mod stock;

// The pure API layer lives in its own crate (transport/api); its modules are re-exported.
pub use esim_api::{admission, api, openapi, routes, secrets, service, shards, webhook_headers};
pub use esim_api::{ClockMode, JournalEntry, Outcome, Service};

// The store lives in its own crate (transport/store); its modules are re-exported.
pub use esim_store::{fence, journal, lock, store_mem, store_pg};

/// The global eSIM inventory: its durable record (the store's) and each shard's side of
/// it ([`crate::stock`]).
pub mod pool {
    pub use crate::stock::*;
    pub use esim_store::pool::*;
}

/// The hot standby: the store's follower and what it answers meanwhile
/// ([`crate::standby_http`]).
pub mod standby {
    pub use crate::standby_http::*;
    pub use esim_store::standby::*;
}
