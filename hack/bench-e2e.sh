#!/usr/bin/env bash
# Muster beside the real kube-scheduler (the pinned build) on one test control plane
# (kube-apiserver, etcd, kube-controller-manager's resourceclaim controller, fake nodes):
# the same pods for both, one scheduler at a time. Each row is printed as soon as it is
# measured, and the whole markdown table again at the end; progress goes to stderr.
#
#   - single-GPU pods, gangs of 8, DRA template claims: pods created before the scheduler
#     starts; time until the API server shows all bound, pods/s, gangs split, CPU, peak
#     memory (VmHWM). Rows: the ceiling (the same pods bound from a tight client loop, 64 in
#     flight; for DRA a claim allocation plus a binding per pod), then Muster, kube-scheduler
#     with qps 5000/burst 10000 and kube-scheduler with its defaults, each followed by the
#     ceiling again; pods/s ÷ the mean of the ceilings just before and just after it. Every
#     row's clock ends when the benchmark's watch of the pods has seen the last one bound.
#   - unschedulable gang: once the scheduler has bound a warm-up pod, a gang of 8 pods of 32
#     GPUs each (nodes have 16); seconds from its creation until all 8 are PodScheduled=False.
#   - idle: 5,000 nodes, 20,000 pods created bound and Running, nothing to schedule; CPU
#     seconds of each scheduler over 60 s while an emulator rewrites each pod's status every
#     100 s (200/s) and each node's heartbeat every 60 s (83/s).
#   - large: the same 5,000 nodes, 20,000 pods in gangs of 8: Muster and kube-scheduler, each
#     between ceilings as above: all bound? gangs split? pods/s, ÷ ceiling, CPU, peak memory.
#   - anti-affinity + zone spread: the same 5,000 nodes in three zones, 10,000 one-CPU pods in
#     deployments of ten, each with required anti-affinity to its deployment on the hostname
#     and a DoNotSchedule zone spread (scheduler_perf's SchedulingPodAntiAffinity and
#     TopologySpreading): Muster and kube-scheduler between ceilings.
# kube-scheduler's gangs use its own gang scheduling (feature gate GenericWorkload, the
# scheduling.k8s.io/v1beta1 Workload and PodGroup, spec.schedulingGroup on the pods); Muster's
# are podgroups.muster.dev. Sizes are for BENCH_SCALE=1 and scale with it (with minimums).
#
#   hack/bench-e2e.sh                 # BENCH_SCALE=0.2: 100 nodes, 1,000 pods, 100 gangs, 200 DRA pods;
#                                     # idle and large on 1,000 nodes with 4,000 pods; about 10 minutes
#   BENCH_SCALE=1 hack/bench-e2e.sh   # the full sizes above; meant to fit in an hour on 2 cores
#   BENCH_SCALE=0.02 hack/bench-e2e.sh   # a smoke run: about 2 minutes after the build
#   BENCH_RUNS=large,idle hack/bench-e2e.sh   # a subset: singles, gangs, dra, unschedulable, idle, large, rules
#
# Each row has a budget, BENCH_BUDGET_S seconds (default 600 × BENCH_SCALE, at least 120): a
# row over it is printed as "over budget" with what it reached, and the bench goes on.
# BENCH_QPS/BENCH_BURST set kube-scheduler's client limits for the equal-QPS rows;
# BENCH_KUBE_FEATURE_GATES adds feature gates (Name=true,...) to kube-scheduler's;
# BENCH_LOG_DIR keeps each scheduler's log there; BENCH_MUSTER_LOG is Muster's RUST_LOG (warn).
# BENCH_SCHEDULERS=muster,kube,kubedef picks the schedulers (default all three).
#
# Not part of the test suite: it takes minutes and wants a quiet machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MUSTER_KUBE_BIN="${MUSTER_KUBE_BIN:-$(bash hack/build-kube.sh | tail -1)}"
export MUSTER_KUBE_BIN
cargo build --release --locked --bin muster --example bench_e2e
export MUSTER_BIN="$PWD/target/release/muster"
exec target/release/examples/bench_e2e
