//! The committed CRD YAML under `crds/` must equal what `leasehold crd` generates from the types.

#[test]
fn committed_crd_matches_the_rust_types() {
    let generated = leasehold::crd::crds_yaml().expect("serialise CRDs");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/leasehold.dev_distributedlocks.yaml");
    let committed = std::fs::read_to_string(path).expect("read committed CRD");
    assert!(
        committed == generated,
        "crds/leasehold.dev_distributedlocks.yaml is stale: run `cargo run -- crd > crds/leasehold.dev_distributedlocks.yaml`"
    );
}
