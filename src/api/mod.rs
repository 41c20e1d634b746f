//! The Kubernetes types Muster defines (its PodGroup and Queue, from which `muster crds`
//! writes `manifests/crds/`) or reads without k8s-openapi having them (Kueue's and KAI
//! Scheduler's queues, scheduler-plugins' PodGroup, the cluster's Topology objects), and the
//! lean forms the watches decode pods and claims into. Types only: no conversion, no I/O.

pub mod foreign;
pub mod kai;
pub mod kueue;
pub mod pod_group;
pub mod queue;
pub mod topology;
pub mod wire;
