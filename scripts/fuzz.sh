#!/bin/sh
# Fuzzes every Go native fuzz target in the module for FUZZTIME each
# (default 30s). The seed corpora of the same targets run in `make unit`.
set -eu
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-30s}"
found=0
for file in $(grep -rl --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' internal cmd 2>/dev/null | sort); do
	pkg="./$(dirname "$file")"
	for name in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing.F).*/\1/p' "$file"); do
		found=$((found + 1))
		echo "== $pkg $name ($FUZZTIME)"
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"
	done
done
if [ "$found" -eq 0 ]; then
	echo "no fuzz targets found" >&2
	exit 1
fi
echo "fuzzed $found targets for $FUZZTIME each"
