//! Leasehold: distributed locks with fencing tokens for Kubernetes workloads.
//!
//! A `DistributedLock` (group `leasehold.dev`) is backed by one `coordination.k8s.io/v1` Lease.
//! Pods ask for a lock with the annotation `leasehold.dev/lock: <name>` and wait at the
//! scheduling gate `leasehold.dev/lock`; the operator grants the lock to one pod at a time, in
//! FIFO order, and hands each holder a fencing token that grows with every grant.

pub mod admin;
pub mod cli;
pub mod controller;
pub mod crd;
pub mod error;
pub mod health;
pub mod holder;
pub mod inspect;
pub mod leader;
pub mod lease;
pub mod lock;
pub mod lock_cli;
pub mod metrics;
pub mod release_cli;
pub mod telemetry;
pub mod ungate;
pub mod watchdog;

pub use error::{Error, Result};
