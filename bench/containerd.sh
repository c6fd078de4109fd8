#!/bin/sh
# Builds the containerd the benchmarks compare crind with, from the Go module
# proxy only (github.com/containerd/containerd/v2 at a pinned version, its
# go.sum checked against the checksum database), into a cache outside the
# repository: containerd and containerd-shim-runc-v2 in one directory. A
# build already there is reused, so only the first run on a machine pays it
# (under a minute on 2 cores with a warm Go build cache; a few minutes from
# an empty one, plus the module downloads).
#
#   CRIN_CONTAINERD   where the binaries go (default ~/.cache/crin/containerd-VERSION)
#   CRIN_CONTAINERD_VERSION  the version to build (default v2.4.2)
#
# Changing the version means changing the default path too, so an old build
# is never reused.
set -eu

version=${CRIN_CONTAINERD_VERSION:-v2.4.2}
out=${CRIN_CONTAINERD:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/containerd-$version}
export PATH=$PATH:/usr/local/go/bin

built() {
	[ -x "$1/containerd" ] && [ -x "$1/containerd-shim-runc-v2" ] &&
		"$1/containerd" --version 2>/dev/null | grep -q " ${version#v}"
}
if built "$out"; then
	echo "containerd $version: reusing $out"
	exit 0
fi

# Build into a temporary name and rename, so an interrupted build is never
# taken for a finished one. test/e2e/kubelet/build.sh does the same for the
# kubelet: keep the two alike (separate scripts, as bench/ and test/e2e are
# run on their own).
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "containerd $version: building into $out (first run on this machine)"
start=$(date +%s)
# go install pkg@version builds with the module's own go.mod and go.sum,
# outside any module of ours. CGO_ENABLED=0 leaves out the snapshotters that
# need cgo (btrfs) or are not wanted here (devmapper, zfs); overlayfs is
# what the benchmarks use. The binaries report "2.4.2+unknown": the version
# comes from the module, the revision from git, which a proxy build lacks.
mkdir -p "$tmp"
CGO_ENABLED=0 GOBIN=$tmp GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" \
	-tags "no_btrfs no_devmapper no_zfs" \
	"github.com/containerd/containerd/v2/cmd/containerd@$version" \
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$version"
built "$tmp"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "containerd $version: built $out in $(($(date +%s) - start))s"
