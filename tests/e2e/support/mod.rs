//! Test support for end-to-end tests against a real control plane on loopback.
//!
//! ```text
//!  hack/build-kube.sh ──► control_plane (etcd, kube-apiserver, kube-controller-manager)
//!                               │ one per run of the e2e binary, stopped when it exits
//!  TestCluster ◄────────────────┘ one per test: namespace, scheduler name, node label
//!      ├── builders: Nodes, DeviceClasses, ResourceSlices, Pods
//!      ├── KubeletEmulator: bound pods → Running/Ready; fail or complete on request
//!      └── Provisioner: volumes for claims given a node, or the node taken back
//! ```

pub mod builders;
pub mod cluster;
pub mod control_plane;
pub mod gangs;
pub mod kubelet;
pub mod muster;
pub mod pki;
pub mod process;
pub mod provisioner;
pub mod proxy;
pub mod wait;

pub use cluster::TestCluster;
pub use kubelet::KubeletEmulator;
