#!/bin/sh
# Runs the pinned golangci-lint with .golangci.yml, building it once from
# the Go module proxy into ~/.cache/crin (CRIN_GOLANGCI_LINT overrides the
# binary's path). About two minutes of build on 2 cores the first time.
set -eu
version=v2.15.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/crin/golangci-lint-$version"
bin="${CRIN_GOLANGCI_LINT:-$dir/golangci-lint}"
if ! "$bin" version 2>/dev/null | grep -q "version ${version#v} "; then
	echo "building golangci-lint $version into $dir"
	mkdir -p "$dir"
	(cd / && GOBIN="$dir" GOFLAGS= go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version")
	bin="$dir/golangci-lint"
fi
exec "$bin" run "$@" ./...
