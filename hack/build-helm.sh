#!/usr/bin/env bash
# Builds the Helm command the chart's tests run (helm lint, helm template, helm install) from
# the Go module proxy, at the version pinned in hack/helm/go.mod, into a cache outside the
# clone, beside the control plane of hack/build-kube.sh. A second run with the same pins
# finds the cache and builds nothing. Prints the cache folder (holding `helm`) on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A module's pinned version, whether go.mod requires it on one line or in a block.
pinned() { awk -v m="$1" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' "$2" | head -n 1; }
helm_version="$(pinned helm.sh/helm/v4 "$here/helm/go.mod")"
if [[ -z "$helm_version" ]]; then
  echo "build-helm: cannot read the pinned helm.sh/helm/v4 version from hack/helm/go.mod" >&2
  exit 1
fi
# The cache key covers the pins (go.sum included) and this script, so changing either rebuilds.
key="$(cat "$here/helm/go.mod" "$here/helm/go.sum" "$0" | sha256sum | cut -c1-12)"
cache_root="${MUSTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}"
bin="$cache_root/bin/helm-$helm_version-$key"

if [[ -x "$bin/helm" ]]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-helm: the go command is needed to build Helm" >&2; exit 1; }
tmp="$bin.partial.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

# The version stamps Helm's own release build sets, so `helm version` reports the pin.
ldflags="-X helm.sh/helm/v4/internal/version.version=$helm_version"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

start=$(date +%s)
echo "build-helm: building Helm $helm_version into $bin (a cold build takes a few minutes)" >&2
(
  cd "$here/helm"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
)
[[ -x "$tmp/helm" ]] || { echo "build-helm: helm was not built" >&2; exit 1; }
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build-helm: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
