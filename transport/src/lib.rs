//! # esim-transport: the API layer and the production shell
//!
//! - [`routes`] and [`api`]: the pure mapping between HTTP and engine commands (routing,
//!   authentication header, body parsing and validation, rendering). No IO.
//! - [`service`]: the engine with its clock mode behind that mapping; also pure, so the
//!   simulation and tests run exactly what production runs.
//! - [`admission`]: credentials and the rate limit, from the headers, before a body is read.
//! - [`secrets`]: new API keys and signing secrets from OS entropy; sealing at rest.
//! - [`openapi`]: the OpenAPI 3.1 document of the reseller API.
//! - [`edge`]: the connection-level guards of the server (connection cap, timeouts,
//!   body budget).
//! - [`metrics`]: the operator metrics of `GET /metrics` (Prometheus text format).
//! - [`dashboard`]: the developer dashboard's files under `/dashboard/` (a client of the API).
//! - [`shards`]: accounts sharded over engines in one process: the shard each id names,
//!   routing, and the requests that fan out to every shard.
//! - [`store_pg`] and [`standby`]: the journal in PostgreSQL, and the hot standby that
//!   follows it and takes the shard over when the owner's lease runs out.
//! - [`fence`]: the fencing rules of a shard's owner row, shared by the stores.
//! - [`deploy`]: the deployment wiring of the `esim` commands (serve, sharded serve,
//!   standbys, replay, report, repair, logging) as library functions taking plain options.
//! - [`store_mem`]: an in-memory store with the PostgreSQL store's semantics and faults,
//!   for the simulation.
#![forbid(unsafe_code)]

pub mod dashboard;
pub mod deploy;
pub mod edge;
pub mod fence;
pub mod journal;
pub mod lock;
pub mod metrics;
pub mod nodes;
pub mod pool;
pub mod sender;
pub mod server;
pub mod standby;
pub mod store_mem;
pub mod store_pg;

// The pure API layer lives in its own crate (transport/api); its modules are re-exported
// under their old paths while the shell moves into its own crate.
pub use esim_api::{admission, api, openapi, routes, secrets, service, shards, webhook_headers};
pub use esim_api::{ClockMode, JournalEntry, Outcome, Service};
