#!/usr/bin/env bash
# Muster beside the real kube-scheduler (the pinned build) on one test control plane: the
# same pods for both, one after the other, then the table (time until all pods are bound,
# pods per second, gangs split, peak memory) and the API server's binding ceiling.
#
#   hack/bench-e2e.sh            # BENCH_SCALE=0.2: 100 nodes, 1,000 pods, 100 gangs, 200 DRA pods
#   BENCH_SCALE=1 hack/bench-e2e.sh   # the full sizes: 500 nodes, 5,000 pods, 500 gangs of 8, 1,000 DRA pods
#
# Not part of the test suite: it takes minutes and wants a quiet machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MUSTER_KUBE_BIN="${MUSTER_KUBE_BIN:-$(bash hack/build-kube.sh)}"
export MUSTER_KUBE_BIN
cargo build --release --locked --bin muster --example bench_e2e
export MUSTER_BIN="$PWD/target/release/muster"
exec target/release/examples/bench_e2e
