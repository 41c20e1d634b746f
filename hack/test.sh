#!/usr/bin/env bash
# The one command that runs every test: it builds (or reuses from its cache) the pinned
# Kubernetes control plane, then runs cargo test. The end-to-end tests start etcd,
# kube-apiserver and, when they need it, kube-controller-manager on loopback themselves,
# and stop them when they finish. Nothing is skipped: without a control plane the run fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

for tool in go cargo; do
  command -v "$tool" >/dev/null || { echo "test: '$tool' is not on PATH; see README.md, 'Requirements'" >&2; exit 1; }
done

# Formatting first: it takes a second and fails with the file to fix.
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check || { echo "test: run 'cargo fmt --all' (rustfmt.toml sets the style)" >&2; exit 1; }
else
  echo "test: rustfmt is not installed; formatting not checked (rustup component add rustfmt)" >&2
fi

# Lints over every target (library, binaries, tests, benches, examples), with any warning an
# error. They run beside the control-plane build and the test build, in a target folder of
# their own so that neither waits on the other's lock: on a cold machine a build spends long
# stretches on one core (one large crate at a time), and the lints fill the other.
lints_log=$(mktemp)
lints_pid=""
if cargo clippy --version >/dev/null 2>&1; then
  CARGO_TARGET_DIR=target/clippy cargo clippy --locked --all-targets -- -D warnings >"$lints_log" 2>&1 &
  lints_pid=$!
else
  echo "test: clippy is not installed; lints not checked (rustup component add clippy)" >&2
fi
lints_done() {
  [[ -n "$lints_pid" ]] || return 0
  if ! wait "$lints_pid"; then
    cat "$lints_log" >&2
    echo "test: fix clippy's findings above" >&2
    exit 1
  fi
  lints_pid=""
}
trap 'if [[ -n "$lints_pid" ]]; then kill "$lints_pid" 2>/dev/null || true; fi; rm -f "$lints_log"' EXIT

start=$(date +%s)
MUSTER_KUBE_BIN="$(bash hack/build-kube.sh)"
export MUSTER_KUBE_BIN
echo "test: control plane binaries in $MUSTER_KUBE_BIN ($(( $(date +%s) - start ))s)" >&2

cargo test --locked --all-targets --no-run
lints_done

rm -f target/tmp/side-by-side-*.txt
cargo test --locked --all-targets "$@"

# What the side-by-side end-to-end runs measured (the real kube-scheduler beside Muster).
for report in target/tmp/side-by-side-*.txt; do
  [[ -f "$report" ]] && cat "$report"
done
exit 0
