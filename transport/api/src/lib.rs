//! # esim-api: the pure API layer
//!
//! Everything between an HTTP request and an engine command that needs no IO: no runtime,
//! no sockets, no store. The HTTP shell (`esim-http`) and the simulation drive the
//! same code, so a simulation exercises the parsing, validation and JSON production runs.
//!
//! - [`routes`]: the one typed endpoint table (`Endpoint`: API, method, path pattern, the
//!   shard that answers it), matched exhaustively by [`api`], [`openapi`] and the
//!   simulation.
//! - [`api`]: routing, the authentication header, body parsing and validation, rendering.
//! - [`bodies`]: the request bodies, one type per body, from which [`api`] reads a body
//!   and [`openapi`] derives its request schema.
//! - [`service`]: the engine with its clock mode behind that mapping.
//! - [`admission`]: credentials and the rate limit, decided from the headers before a body
//!   is read.
//! - [`secrets`]: new API keys and signing secrets (drawn from OS entropy, or seeded for
//!   tests and the simulation), and sealing them at rest.
//! - [`shards`]: accounts sharded over engines: the shard each id names, routing, and the
//!   requests that fan out to every shard.
//! - [`openapi`]: the OpenAPI 3.1 document of the reseller API; [`openapi_operator`] the
//!   admin and sandbox APIs' ([`openapi_admin`], [`openapi_sandbox`]: their operations).
//! - [`webhook_headers`]: the signed headers of a webhook delivery.
#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod bodies;
pub mod openapi;
pub mod openapi_admin;
pub mod openapi_operator;
pub mod openapi_sandbox;
pub mod routes;
pub mod secrets;
pub mod service;
pub mod shards;
pub mod webhook_headers;

pub use service::{ClockMode, JournalEntry, Outcome, Service};
