#!/bin/sh
# Builds checkpointctl (checkpoint-restore/checkpointctl, the tool that
# reads container checkpoint archives) from the Go module proxy into a
# cache outside the repository, and prints the binary's path. The node
# lane copies it into the VM, where TestCheckpointContainer has it read
# crind's archives. v1.6.0: v1.7.0's go-criu v8.5.0 is not served here.
#
#   CRIN_CHECKPOINTCTL_DIR   where it goes (default ~/.cache/crin/checkpointctl-v1.6.0)
set -eu

version=v1.6.0
out=${CRIN_CHECKPOINTCTL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/checkpointctl-$version}
if [ -x "$out/checkpointctl" ]; then
	echo "$out/checkpointctl"
	exit 0
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp"
echo "checkpointctl $version: building into $out" >&2
# Pure Go and static: it runs in the Debian 13 guest.
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-mod=mod go install "github.com/checkpoint-restore/checkpointctl@$version" >&2
rm -rf "$out"
mv "$tmp" "$out"
echo "$out/checkpointctl"
