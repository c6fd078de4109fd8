#!/bin/sh
# Builds the kubelet the e2e suite runs against, from the Go module proxy only,
# into a cache outside the repository. A binary already there is reused, so
# only the first run on a machine pays the build (about 5 minutes on a 2-core
# machine from an empty Go build cache, plus the module downloads).
#
#   CRIN_KUBELET   where the binary goes (default ~/.cache/crin/kubelet-v1.37.2)
#
# The version is pinned by tools/go.mod and tools/go.sum; changing it means
# changing the default path below too, so an old binary is never reused.
set -eu

version=v1.37.2
here=$(cd "$(dirname "$0")" && pwd)
out=${CRIN_KUBELET:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/kubelet-$version}

if [ -x "$out" ] && "$out" --version 2>/dev/null | grep -q "Kubernetes $version\$"; then
	echo "kubelet $version: reusing $out"
	exit 0
fi

# Build into a temporary name and rename, so an interrupted build is never
# taken for a finished one. bench/containerd.sh does the same for
# containerd: keep the two alike (separate scripts, as bench/ and test/e2e
# are run on their own).
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "kubelet $version: building into $out (first run on this machine; takes a while)"
start=$(date +%s)
cd "$here/tools"
# -mod=readonly: go.sum is committed and must already cover every module;
# -buildvcs=false: no git needed (the version comes from -X below);
# the version stamp is what `kubelet --version` prints and what the check above reads.
CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -tags tools \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
	-o "$tmp" k8s.io/kubernetes/cmd/kubelet
"$tmp" --version | grep -q "Kubernetes $version\$"
mv -f "$tmp" "$out"
trap - EXIT
echo "kubelet $version: built $out in $(( $(date +%s) - start ))s"
