//! Unit tests of the chaos run's checker (`chaos/check.rs`): the chaos binary has no test
//! harness of its own, so its checker's verdicts are tested here.

#[path = "../chaos/check.rs"]
#[allow(dead_code)]
mod check;

/// The chaos run fails a multi-lock pod seen running without a token for every lock of its set;
/// a complete set, and a single-lock pod, pass.
#[test]
fn a_multi_lock_pod_running_with_a_partial_set_is_reported() {
    let ann = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let partial = ann(&[("leasehold.dev/locks", "l0,l1"), ("l0.locks.leasehold.dev/fencing-token", "4")]);
    let found = check::partial_set("mpod-1", &partial).expect("a partial set is reported");
    assert!(found.contains("mpod-1") && found.contains("\"l1\", None"), "{found}");
    let whole = ann(&[
        ("leasehold.dev/locks", "l0,l1"),
        ("l0.locks.leasehold.dev/fencing-token", "4"),
        ("l1.locks.leasehold.dev/fencing-token", "9"),
    ]);
    assert_eq!(check::partial_set("mpod-2", &whole), None);
    assert_eq!(check::pod_grants(&whole), vec![("l0".into(), Some(4), 0), ("l1".into(), Some(9), 0)]);
    let single =
        ann(&[("leasehold.dev/lock", "l2"), ("leasehold.dev/fencing-token", "3"), ("leasehold.dev/slot", "1")]);
    assert_eq!(check::partial_set("pod-l2-1", &single), None);
    assert_eq!(check::pod_grants(&single), vec![("l2".into(), Some(3), 1)]);
}
