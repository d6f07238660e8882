//! # esim-store: where the service's journal is made durable
//!
//! The store layer between the pure API layer (`esim-api`, whose [`esim_api::JournalEntry`]
//! it writes) and the HTTP shell (`esim-http`, whose owner task appends through
//! [`sink::JournalSink`]). It never depends on the shell: the clock comes in as a
//! [`clock::Clock`], and what the shell wants to hear of (a snapshot written) as a
//! callback ([`journal::SnapshotWritten`]).
//!
//! - [`sink`]: the contract the owner task appends through (`JournalSink`), the append
//!   deadline, the journal's alarm for `/readyz`, and the no-journal of tests.
//! - [`journal`]: the file journal of `esim serve --data-dir`: segments, recovery (torn
//!   tails, damage), repair, snapshots made off the owner task, the manifest.
//! - [`store_pg`]: the journal in PostgreSQL, one owner per shard under a lease, fenced
//!   by epoch; also the PostgreSQL inventory pool.
//! - [`standby`]: the hot standby's follower: follows a shard's journal in PostgreSQL,
//!   catches up and takes the shard over when the owner's lease runs out.
//! - [`store_mem`]: an in-memory store with the PostgreSQL store's semantics and faults,
//!   so that the simulation runs the takeover and fencing rules without a database.
//! - [`fence`]: the fencing rules of a shard's owner row, stated once for both stores.
//! - [`lock`]: the data dir lock, so that two processes never append to one journal.
//! - [`pool`]: the global eSIM inventory of a sharded service as a durable record (a
//!   file; PostgreSQL's is in [`store_pg`]).
//! - [`clock`]: the wall clock a store stamps what it writes with, handed in.
#![forbid(unsafe_code)]

pub mod clock;
pub mod fence;
pub mod journal;
pub mod lock;
pub mod pool;
pub mod sink;
pub mod standby;
pub mod store_mem;
pub mod store_pg;
