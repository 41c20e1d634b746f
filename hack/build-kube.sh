#!/usr/bin/env bash
# Builds the upstream binaries the tests run (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd) from the Go module proxy, at the versions pinned in
# hack/kube/go.mod and hack/etcd/go.mod, into a cache outside the clone. A second run with
# the same pins finds the cache and builds nothing. Prints the cache folder on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A module's pinned version, whether go.mod requires it on one line or in a block.
pinned() { awk -v m="$1" '$1 == m {print $2} $1 == "require" && $2 == m {print $3}' "$2" | head -n 1; }
kube_version="$(pinned k8s.io/kubernetes "$here/kube/go.mod")"
etcd_version="$(pinned go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")"
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
  echo "build-kube: cannot read the pinned versions from hack/kube/go.mod and hack/etcd/go.mod" >&2
  exit 1
fi
# The cache key covers every pin (go.sum included) and this script, so changing either rebuilds.
key="$(cat "$here/kube/go.mod" "$here/kube/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" "$0" \
  | sha256sum | cut -c1-12)"
cache_root="${MUSTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}"
bin="$cache_root/bin/kube-$kube_version-etcd-$etcd_version-$key"

binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)
complete=1
for b in "${binaries[@]}"; do [[ -x "$bin/$b" ]] || complete=0; done
if [[ $complete == 1 ]]; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-kube: the go command is needed to build the control plane" >&2; exit 1; }
tmp="$bin.partial.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

minor="${kube_version#v1.}"; minor="${minor%%.*}"
build_date="1970-01-01T00:00:00Z"
ldflags=""
# The same version stamps Kubernetes' own release build sets, so /version reports the pin.
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

start=$(date +%s)
echo "build-kube: building Kubernetes $kube_version and etcd $etcd_version into $bin (cold builds take a while)" >&2
(
  cd "$here/kube"
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
)
(
  cd "$here/etcd"
  CGO_ENABLED=0 go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
for b in "${binaries[@]}"; do
  [[ -x "$tmp/$b" ]] || { echo "build-kube: $b was not built" >&2; exit 1; }
done
mkdir -p "$(dirname "$bin")"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build-kube: built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
