//! The bounded breadth-first run both model checkers use (`tests/model.rs` for one lock,
//! `tests/multilock.rs` for lock sets): the same bounds, environment variables and report line.

use std::hash::Hash;
use std::io::Write as _;
use std::time::Instant;

use stateright::{Checker, Model};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs `model`'s checker breadth first (two threads) to `depth`, or `LEASEHOLD_MODEL_DEPTH`
/// instead, plus `LEASEHOLD_MODEL_EXTRA_DEPTH`, and to at most `LEASEHOLD_MODEL_STATES` states
/// (50 million by default); prints `"{label}: {N} states ({U} unique), depth ..., {s} s"` to
/// stderr (not through the test harness's capture, so `make test` shows what each run explored)
/// and returns the finished checker.
pub fn run<M>(label: &str, model: M, depth: usize) -> impl Checker<M> + use<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let depth = env_usize("LEASEHOLD_MODEL_DEPTH", depth + env_usize("LEASEHOLD_MODEL_EXTRA_DEPTH", 0));
    let states = env_usize("LEASEHOLD_MODEL_STATES", 50_000_000);
    let started = Instant::now();
    let checker = model.checker().threads(2).target_max_depth(depth).target_state_count(states).spawn_bfs().join();
    let _ = writeln!(
        std::io::stderr(),
        "{label}: {} states ({} unique), depth {} (bound {depth}), {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

/// Runs `model`'s checker depth first (two threads) to `depth` (or `LEASEHOLD_MODEL_DEPTH`
/// instead, plus `LEASEHOLD_MODEL_EXTRA_DEPTH`) and stops at the first counterexample to
/// `property`: for a planted bug whose counterexample lies deeper than a breadth-first run fits
/// in memory (a depth-first run keeps one path and the fingerprints it visited, not a whole
/// frontier). Its trace is a path, not the shortest one. Prints the same report line as [`run`].
// Both tests/model.rs and tests/multilock.rs use it.
pub fn run_until_counterexample<M>(
    label: &str,
    model: M,
    depth: usize,
    property: &'static str,
) -> impl Checker<M> + use<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let depth = env_usize("LEASEHOLD_MODEL_DEPTH", depth + env_usize("LEASEHOLD_MODEL_EXTRA_DEPTH", 0));
    let states = env_usize("LEASEHOLD_MODEL_STATES", 50_000_000);
    let started = Instant::now();
    let checker = model
        .checker()
        .threads(2)
        .target_max_depth(depth)
        .target_state_count(states)
        .finish_when(stateright::HasDiscoveries::AnyOf([property].into()))
        .spawn_dfs()
        .join();
    let _ = writeln!(
        std::io::stderr(),
        "{label}: {} states ({} unique), depth {} (bound {depth}), {:.1} s, depth first until {property}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}
