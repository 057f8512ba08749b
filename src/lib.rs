//! Leasehold: distributed locks with fencing tokens for Kubernetes workloads.
//!
//! A `DistributedLock` (group `leasehold.dev`) is backed by one `coordination.k8s.io/v1` Lease.
//! Pods ask for a lock with the annotation `leasehold.dev/lock: <name>` and wait at the
//! scheduling gate `leasehold.dev/lock`; the operator grants the lock to one pod at a time, in
//! FIFO order, and hands each holder a fencing token that grows with every grant.

#[cfg(feature = "operator")]
pub mod admin;
#[cfg(feature = "operator")]
pub mod cli;
pub mod client;
#[cfg(feature = "operator")]
pub mod controller;
pub mod crd;
pub mod error;
#[cfg(feature = "operator")]
pub mod health;
pub mod holder;
pub mod holder_set;
#[cfg(feature = "operator")]
pub mod inspect;
#[cfg(feature = "operator")]
pub mod leader;
pub mod lease;
pub mod lock;
#[cfg(feature = "operator")]
pub mod lock_cli;
#[cfg(feature = "operator")]
pub mod metrics;
#[cfg(feature = "operator")]
pub mod release_cli;
#[cfg(feature = "operator")]
pub mod telemetry;
#[cfg(feature = "operator")]
pub mod ungate;
#[cfg(feature = "operator")]
pub mod watchdog;

pub use error::{Error, Result};
