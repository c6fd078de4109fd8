#!/bin/sh
# Builds gVisor's runsc and its containerd shim (containerd-shim-runsc-v1,
# runtime type io.containerd.runsc.v1) from the Go module proxy into a
# cache outside the repository, and prints the directory holding both.
# gVisor is served only as a pseudo-version; this one is pinned.
#
#   CRIN_GVISOR_DIR   where they go (default ~/.cache/crin/gvisor-<version>)
#
# What runs where: docs/runtimes.md, "gVisor".
set -eu

version=v0.0.0-20260905035102-160fafc42237
# Built without the symbol table and DWARF (-s -w): a third smaller, and
# the node lane copies both into its guest over ssh. The suffix names the
# flavour, so a cache of another build is not taken for this one.
out=${CRIN_GVISOR_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/gvisor-$version-s}
if [ -x "$out/runsc" ] && [ -x "$out/containerd-shim-runsc-v1" ]; then
	echo "$out"
	exit 0
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp/mod"
echo "gvisor $version: building runsc and containerd-shim-runsc-v1 into $out" >&2
# A module of its own, so gVisor's dependencies resolve from its go.mod.
(
	cd "$tmp/mod"
	go mod init crin.local/gvisor-build >&2
	go get "gvisor.dev/gvisor/runsc@$version" "gvisor.dev/gvisor/shim@$version" >&2
	# Pure Go and static: they run in the Debian 13 guest too.
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$tmp/runsc" gvisor.dev/gvisor/runsc >&2
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$tmp/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim >&2
)
rm -rf "$tmp/mod" "$out"
mv "$tmp" "$out"
echo "$out"
