#!/bin/sh
# Builds what the e2e suite runs beside crind, from the Go module proxy
# only, into a cache outside the repository: the kubelet, and the control
# plane a kubelet needs for what only the API gives it (RuntimeClass):
# kube-apiserver and etcd. A binary already there is reused, so only the
# first run on a machine pays the build (the kubelet about 5 minutes on a
# 2-core machine from an empty Go build cache, plus the module downloads;
# kube-apiserver and etcd about as long again).
#
#   CRIN_KUBELET   where the kubelet goes (default ~/.cache/crin/kubelet-v1.37.2)
#
# kube-apiserver and etcd go into ~/.cache/crin (or $XDG_CACHE_HOME/crin)
# as kube-apiserver-v1.37.2 and etcd-v3.7.0, where
# test/harness/controlplane.go looks for them.
#
# The versions are pinned by tools/go.mod and tools/go.sum (etcd is the
# server Kubernetes v1.37.2 builds against); changing them means changing
# the names below too, so an old binary is never reused.
set -eu

version=v1.37.2
etcd_version=v3.7.0
here=$(cd "$(dirname "$0")" && pwd)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/crin
out=${CRIN_KUBELET:-$dir/kubelet-$version}
mkdir -p "$dir" "$(dirname "$out")"

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

# build NAME OUT PACKAGE LDFLAGS CHECK: builds PACKAGE into OUT unless OUT
# is there and `OUT --version` prints CHECK.
build() {
	name=$1 dst=$2 pkg=$3 ldflags=$4 check=$5
	if [ -x "$dst" ] && "$dst" --version 2>/dev/null | grep -q "$check"; then
		echo "$name: reusing $dst"
		return 0
	fi
	# Build into a temporary name and rename, so an interrupted build is
	# never taken for a finished one. bench/containerd.sh does the same
	# for containerd: keep the two alike (separate scripts, as bench/ and
	# test/e2e are run on their own).
	tmp="$dst.tmp.$$"
	trap 'rm -f "$tmp"' EXIT
	echo "$name: building into $dst (first run on this machine; takes a while)"
	start=$(date +%s)
	# -mod=readonly: go.sum is committed and must already cover every
	# module; -buildvcs=false: no git needed (the version comes from -X).
	(cd "$here/tools" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -tags tools \
		-ldflags "$ldflags" -o "$tmp" "$pkg")
	"$tmp" --version | grep -q "$check"
	mv -f "$tmp" "$dst"
	trap - EXIT
	echo "$name: built $dst in $(( $(date +%s) - start ))s"
}
trap 'exit 130' INT TERM

# The version stamp is what `--version` prints and what the check reads.
build "kubelet $version" "$out" k8s.io/kubernetes/cmd/kubelet "$k8s_ldflags" "Kubernetes $version\$"
build "kube-apiserver $version" "$dir/kube-apiserver-$version" k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags" "Kubernetes $version\$"
build "etcd $etcd_version" "$dir/etcd-$etcd_version" go.etcd.io/etcd/server/v3 "-s -w" "etcd Version: ${etcd_version#v}\$"
