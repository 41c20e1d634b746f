//! Claims read as kube-scheduler's volume binder reads them: which claims wait for their
//! first consumer, the free volumes that match one, where its class provisions and where
//! its driver's capacities leave room.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};

use super::{VolumeError, VolumeIndex};
use crate::convert::view::ClusterObjects;
use crate::engine::model::{DelayedClaim, SelectorOperator};

fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    yaml_serde::from_str(yaml).expect("object")
}

fn pod(claim: &str) -> Pod {
    parse(&format!(
        "metadata: {{name: p, namespace: ml}}\nspec: {{containers: [], volumes: [{{name: d, persistentVolumeClaim: {{claimName: {claim}}}}}]}}"
    ))
}

fn claim(name: &str, class: &str, extra: &str) -> PersistentVolumeClaim {
    parse(&format!(
        "metadata: {{name: {name}, namespace: ml{extra}}}\nspec: {{accessModes: [ReadWriteOnce], storageClassName: {class}, resources: {{requests: {{storage: 10Gi}}}}}}"
    ))
}

fn volume(name: &str, size: &str, node: &str, extra: &str) -> PersistentVolume {
    parse(&format!(
        "metadata: {{name: {name}}}\nspec:\n  capacity: {{storage: {size}}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: local\n  nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: host, operator: In, values: [{node}]}}]}}]}}}}\n{extra}status: {{phase: Available}}"
    ))
}

fn class(name: &str, provisioner: &str, mode: &str) -> StorageClass {
    parse(&format!("metadata: {{name: {name}}}\nprovisioner: {provisioner}\nvolumeBindingMode: {mode}"))
}

/// The delayed claim of a pod using `claim`, in a cluster of `objects`.
fn delayed(objects: &ClusterObjects, claim: &str) -> Result<Vec<DelayedClaim>, VolumeError> {
    let view = objects.view();
    VolumeIndex::new(&view).places(&pod(claim)).map(|p| p.delayed)
}

fn cluster() -> ClusterObjects {
    ClusterObjects {
        storage_classes: vec![
            class("local", "kubernetes.io/no-provisioner", "WaitForFirstConsumer"),
            class("disk", "disk.example.com", "WaitForFirstConsumer"),
            class("now", "disk.example.com", "Immediate"),
        ],
        persistent_volumes: vec![
            volume("big", "100Gi", "n1", ""),
            volume("fits", "10Gi", "n2", ""),
            volume("small", "5Gi", "n3", ""),
            volume("taken", "10Gi", "n4", "  claimRef: {namespace: ml, name: other}\n"),
        ],
        ..Default::default()
    }
}

#[test]
fn free_volumes_that_match_come_smallest_first_and_a_class_without_provisioner_provisions_nowhere() {
    let mut objects = cluster();
    objects.persistent_volume_claims = vec![claim("data", "local", "")];
    let claims = delayed(&objects, "data").unwrap();
    let names: Vec<&str> = claims[0].volumes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["fits", "big"], "too small and promised to another are left out");
    assert_eq!(claims[0].volumes[0].1[0][0].values, ["n2"]);
    assert_eq!(claims[0].provision, None);
}

#[test]
fn a_volume_promised_to_the_claim_is_its_only_volume() {
    let mut objects = cluster();
    objects.persistent_volumes.push(volume("mine", "20Gi", "n5", "  claimRef: {namespace: ml, name: data}\n"));
    objects.persistent_volume_claims = vec![claim("data", "local", "")];
    let claims = delayed(&objects, "data").unwrap();
    let names: Vec<&str> = claims[0].volumes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["mine"]);
}

#[test]
fn a_claim_given_a_node_keeps_it_and_an_immediate_or_missing_class_waits_for_the_volume_controller() {
    let mut objects = cluster();
    objects.persistent_volume_claims = vec![
        claim("given", "disk", ", annotations: {volume.kubernetes.io/selected-node: n7}"),
        claim("now", "now", ""),
        claim("nowhere", "no-such-class", ""),
    ];
    let claims = delayed(&objects, "given").unwrap();
    let provision = claims[0].provision.as_ref().unwrap();
    assert_eq!((provision[0][0].key.as_str(), provision[0][0].operator), ("metadata.name", SelectorOperator::In));
    assert_eq!(provision[0][0].values, ["n7"]);
    assert!(claims[0].volumes.is_empty());
    for name in ["now", "nowhere"] {
        assert_eq!(delayed(&objects, name), Err(VolumeError::Unbound), "{name}");
    }
}

#[test]
fn a_driver_that_tracks_capacity_leaves_room_only_where_a_capacity_fits_the_claim() {
    let mut objects = cluster();
    objects.persistent_volume_claims = vec![claim("data", "disk", "")];
    // Without the driver's word, capacity is not checked.
    assert_eq!(delayed(&objects, "data").unwrap()[0].room, None);
    assert_eq!(delayed(&objects, "data").unwrap()[0].provision, Some(vec![Vec::new()]));
    objects.csi_drivers = vec![parse("metadata: {name: disk.example.com}\nspec: {storageCapacity: true}")];
    let capacity = |name: &str, zone: &str, size: &str| -> CSIStorageCapacity {
        parse(&format!(
            "metadata: {{name: {name}, namespace: kube-system}}\nstorageClassName: disk\ncapacity: {size}\nnodeTopology: {{matchLabels: {{zone: {zone}}}}}"
        ))
    };
    objects.csi_storage_capacities = vec![capacity("a", "a", "100Gi"), capacity("b", "b", "1Gi")];
    let room = delayed(&objects, "data").unwrap()[0].room.clone().unwrap();
    assert_eq!(room.len(), 1, "zone b has too little left");
    assert_eq!((room[0][0].key.as_str(), room[0][0].values.as_slice()), ("zone", ["a".to_string()].as_slice()));
}
