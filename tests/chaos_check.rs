//! Unit tests of the chaos run's checker (`chaos/check.rs`): the chaos binary has no test
//! harness of its own, so its checker's verdicts are tested here.

#[path = "../chaos/check.rs"]
#[allow(dead_code)]
mod check;
