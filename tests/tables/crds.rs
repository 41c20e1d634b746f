//! The committed CRDs are exactly what `muster crds` generates from the Rust types.

#[test]
fn committed_crds_match_the_rust_types() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/crds/muster.dev.yaml");
    let generated = muster::api::pod_group::definitions_yaml().expect("the CRDs render as YAML");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with `cargo run -- crds > manifests/crds/muster.dev.yaml`",
        path.display()
    );
}

#[test]
fn podgroup_crd_names_and_schema() {
    let crds = muster::api::pod_group::definitions();
    let crd = crds.iter().find(|c| c.metadata.name.as_deref() == Some("podgroups.muster.dev")).expect("podgroups CRD");
    assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["mpg".to_string()][..]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "status must be a subresource");
    let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["minMember"]));
    assert_eq!(spec["properties"]["minMember"]["minimum"], serde_json::json!(1.0));
}
