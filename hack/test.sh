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

# A cold build (CI's fresh clone) gains nothing from incremental compilation and pays for
# writing its cache; a developer's reruns keep it.
if [[ -n "${CI:-}" ]]; then
  export CARGO_INCREMENTAL=0
fi

# Lints next, over every target (library, binaries, tests, benches, examples): any warning
# fails the run, before the control plane is built.
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --locked --all-targets -- -D warnings || { echo "test: fix clippy's findings above" >&2; exit 1; }
else
  echo "test: clippy is not installed; lints not checked (rustup component add clippy)" >&2
fi

start=$(date +%s)
MUSTER_KUBE_BIN="$(bash hack/build-kube.sh)"
export MUSTER_KUBE_BIN
echo "test: control plane binaries in $MUSTER_KUBE_BIN ($(( $(date +%s) - start ))s)" >&2

rm -f target/tmp/side-by-side-*.txt
cargo test --locked --all-targets "$@"

# What the side-by-side end-to-end runs measured (the real kube-scheduler beside Muster).
for report in target/tmp/side-by-side-*.txt; do
  [[ -f "$report" ]] && cat "$report"
done
exit 0
