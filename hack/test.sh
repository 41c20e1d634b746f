#!/usr/bin/env bash
# The one command that runs every test: it builds (or reuses from its cache) the pinned
# Kubernetes control plane and Helm, installs Prometheus when it is missing, then runs cargo
# test. The end-to-end tests start etcd, kube-apiserver and, when they need it,
# kube-controller-manager (and Prometheus) on loopback themselves, and stop them when they
# finish. Nothing is skipped: without a control plane the run fails.
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

# Lints run inside the one build rather than as a second pass: clippy-driver compiles this
# crate's targets (library, binaries, tests, benches, examples) and lints them as it goes,
# so the dependencies are compiled once, not once to check and once to build. Any warning
# fails the build, before the control plane is built. (A plain `cargo test` afterwards
# recompiles this crate once, as the wrapper is part of cargo's fingerprint.)
if cargo clippy --version >/dev/null 2>&1; then
  export RUSTC_WORKSPACE_WRAPPER=clippy-driver
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
else
  echo "test: clippy is not installed; lints not checked (rustup component add clippy)" >&2
fi
cargo test --locked --all-targets --no-run || { echo "test: fix the build or clippy's findings above" >&2; exit 1; }

start=$(date +%s)
MUSTER_KUBE_BIN="$(bash hack/build-kube.sh)"
export MUSTER_KUBE_BIN
echo "test: control plane binaries in $MUSTER_KUBE_BIN ($(( $(date +%s) - start ))s)" >&2

# Helm, for the chart's tests (helm lint, helm template beside kubectl kustomize, helm install).
start=$(date +%s)
MUSTER_HELM_BIN="$(bash hack/build-helm.sh)"
export MUSTER_HELM_BIN
echo "test: helm in $MUSTER_HELM_BIN ($(( $(date +%s) - start ))s)" >&2

# Installs Debian's package $1 when no $1 is on the PATH and $2 (the variable naming its
# binary) is not set.
install_debian_package() {
  local package=$1 variable=$2
  [[ -z "${!variable:-}" ]] && ! command -v "$package" >/dev/null || return 0
  local sudo=()
  [[ "$(id -u)" -eq 0 ]] || sudo=(sudo)
  echo "test: installing Debian's $package package" >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$package" >&2 \
    || { "${sudo[@]}" apt-get update -q >&2 \
      && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$package" >&2; } \
    || { echo "test: failed to install $package; install it or set $variable" >&2; exit 1; }
}

# Prometheus, for the test that runs every dashboard query against it (tests/e2e/prometheus.rs):
# Debian's package when no prometheus is on the PATH. The test starts its own process, with
# its own configuration and storage, on a free loopback port, so a service the package may
# start beside it changes nothing.
install_debian_package prometheus MUSTER_PROMETHEUS_BIN
MUSTER_PROMETHEUS_BIN="${MUSTER_PROMETHEUS_BIN:-$(command -v prometheus)}"
export MUSTER_PROMETHEUS_BIN
echo "test: prometheus at $MUSTER_PROMETHEUS_BIN ($("$MUSTER_PROMETHEUS_BIN" --version 2>&1 | head -n 1))" >&2

# Chromium, for the browser test of the page at /ui (tests/e2e/ui.rs): Debian's package when
# no chromium is on the PATH. The test runs it headless, in a profile of its own, against
# loopback only.
install_debian_package chromium MUSTER_CHROMIUM_BIN
MUSTER_CHROMIUM_BIN="${MUSTER_CHROMIUM_BIN:-$(command -v chromium)}"
export MUSTER_CHROMIUM_BIN
echo "test: chromium at $MUSTER_CHROMIUM_BIN ($("$MUSTER_CHROMIUM_BIN" --version 2>&1 | head -n 1))" >&2

rm -f target/tmp/side-by-side-*.txt
cargo test --locked --all-targets "$@"

# What the side-by-side end-to-end runs measured (the real kube-scheduler beside Muster).
for report in target/tmp/side-by-side-*.txt; do
  [[ -f "$report" ]] && cat "$report"
done
exit 0
