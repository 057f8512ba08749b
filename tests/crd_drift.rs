//! The committed CRD YAML under `crds/` must equal what `leasehold crd` generates from the types.

#[test]
fn committed_crds_match_the_rust_types() {
    for crd in leasehold::crd::all_crds() {
        let name = leasehold::crd::crd_file_name(&crd);
        let generated = leasehold::crd::crd_yaml(&crd).expect("serialise CRD");
        let path = format!("{}/crds/{name}", env!("CARGO_MANIFEST_DIR"));
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        assert!(committed == generated, "crds/{name} is stale: run `make crd`");
    }
}
