#!/bin/sh
# Builds critest, crictl and the ginkgo CLI (critest --parallel runs it) of
# cri-tools, from the Go module proxy only, into a cache outside the
# repository. Binaries already there are reused, so only the first run on a
# machine pays the build (about 3 minutes on a 2-core machine from an empty
# Go build cache, plus the module downloads).
#
#   CRIN_CRITEST_DIR   where the binaries go (default ~/.cache/crin/critest-v1.37.0)
#
# The version is pinned by tools/go.mod and tools/go.sum (cri-tools' own
# go.sum, inside the module whose hash tools/go.sum pins, pins the rest);
# changing it means changing the default path below too, so old binaries
# are never reused. It prints the dir.
set -eu

version=v1.37.0
here=$(cd "$(dirname "$0")" && pwd)
out=${CRIN_CRITEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/critest-$version}

if [ -x "$out/critest" ] && [ -x "$out/crictl" ] && [ -x "$out/ginkgo" ] &&
	"$out/critest" -version 2>/dev/null | grep -q "critest version: $version\$"; then
	echo "critest $version: reusing $out" >&2
	echo "$out"
	exit 0
fi

# Build into a temporary dir and rename, so an interrupted build is never
# taken for a finished one (as test/e2e/kubelet/build.sh does).
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp"

echo "critest $version: building into $out (first run on this machine; takes a while)" >&2
start=$(date +%s)
# go mod download checks the module against tools/go.sum.
src=$(cd "$here/tools" && GOFLAGS="-mod=readonly" go mod download -json sigs.k8s.io/cri-tools |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
	echo "critest $version: no module dir from go mod download" >&2
	exit 1
fi
cd "$src"
# -mod=readonly: cri-tools' go.sum must cover every module;
# -buildvcs=false: the module cache has no git; the version stamp is what
# `critest -version` prints and what the check above reads.
ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$version"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
go test -c -trimpath -ldflags "$ldflags" -o "$tmp/critest" ./cmd/critest
go build -trimpath -ldflags "$ldflags" -o "$tmp/crictl" ./cmd/crictl
go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
"$tmp/critest" -version | grep -q "critest version: $version\$"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "critest $version: built $out in $(( $(date +%s) - start ))s" >&2
echo "$out"
