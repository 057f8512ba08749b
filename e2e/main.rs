//! End-to-end tests against the real local control plane (`e2e/cluster.sh`): kube-apiserver,
//! kube-controller-manager, kube-scheduler, etcd, and kwok as the fake kubelet.
//! Run with `make test` (or `cargo test --test e2e`); the control plane starts by itself.

mod cluster_smoke;
mod degraded;
mod holder_cli;
mod holder_roles;
mod inspect;
mod install;
mod lease_arrival;
mod lock_lifecycle;
mod lock_safety;
mod multilock;
mod renewal;
mod semaphore;
mod singleton;
mod support;
