//! The end-to-end tests: one test binary (`cargo test --test e2e`), one module per area, all
//! against one real control plane on loopback.
//!
//! ```text
//!  tests/e2e/main.rs ── one binary: the crate, kube and k8s-openapi are linked once
//!   ├── agent            the node agent publishing, tainting and healing GPUs
//!   ├── agent_admission  the agent confined to its own node by admission; least-privilege RBAC
//!   ├── backfill         timed backfill: a reservation, a short pod in it, a long one told why
//!   ├── binding_conditions  devices a driver must attach before the gang is bound (KEP-5007)
//!   ├── control_plane    the harness itself: round trips, kubelet emulator, Jobs, claims
//!   ├── dra              Muster's own DRA allocation inside the gang transaction
//!   ├── dra_vs_kube      the allocator beside the real kube-scheduler, with a checker
//!   ├── explain          `muster explain` against a live cluster
//!   ├── faults           a bind that hangs, a leader cut off, a replica denied a list
//!   ├── fractions        GPU fractions by annotation, served as shares through claims Muster creates
//!   ├── fractions_node   a fraction's claim named at admission, prepared by the agent's kubelet plugin
//!   ├── gang             all or nothing, rollback, side by side with kube-scheduler
//!   ├── held             devices given back, lost answers, evictions a budget refuses
//!   ├── helm             the Helm chart: the kustomization's objects, installed and run
//!   ├── install          the manifests, applied and run with their own permissions
//!   ├── kubelet_plugin   the agent's kubelet plugin over its Unix sockets
//!   ├── leader           leader election between two replicas
//!   ├── outage           the API server down for 20 s in the middle of binding 50 gangs
//!   ├── prometheus       every Grafana dashboard query against a real Prometheus scraping both
//!   ├── rules_checker    an independent checker of host ports, pod affinity and spread
//!   ├── rules_vs_kube    the rules between pods beside the real kube-scheduler, 60+ scenarios
//!   ├── soak             90 s of gangs with claims under random bind and pod failures
//!   ├── tenants          a 35,000-name pod and a worst-case claim cost only their own pod
//!   ├── topology         rack and block constraints
//!   ├── ui               the page at /ui in headless Chromium: a gang's reason, its queue's figures
//!   ├── volume_binding   claims waiting for their first consumer, bound in the gang's transaction
//!   ├── volumes          a pod follows its bound local volume; anti-affine pods one per node
//!   ├── workloads        gangs from Jobs, PyTorchJobs and LeaderWorkerSets, no PodGroup
//!   └── support          control plane, TestCluster, builders, kubelet emulator, waits
//! ```
//!
//! One control plane per run: etcd and kube-apiserver start on first use (and
//! kube-controller-manager once, when a test first asks for it) and stop when the binary
//! exits. The tests run as threads of this binary, at the same time, so each keeps apart
//! through its `TestCluster`: its own namespace, scheduler name, node and class names and
//! node label. Every Muster scheduler and every kube-scheduler a test starts schedules only
//! pods with that test's scheduler name, and Muster only onto nodes with that test's label.
//! Run one area with `cargo test --test e2e gang::`, one test by its name.

mod agent;
mod agent_admission;
mod backfill;
mod binding_conditions;
mod control_plane;
mod dra;
mod dra_vs_kube;
mod explain;
mod faults;
mod fractions;
mod fractions_node;
mod gang;
mod held;
mod helm;
mod install;
mod kubelet_plugin;
mod leader;
mod outage;
mod prometheus;
mod queues;
mod rules_checker;
mod rules_vs_kube;
mod soak;
mod support;
mod tenants;
mod topology;
mod ui;
mod volume_binding;
mod volumes;
mod workloads;
