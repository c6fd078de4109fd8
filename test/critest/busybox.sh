#!/bin/sh
# Fetches Debian's busybox package, the dynamically linked build, with
# apt-get download and extracts its binary into a cache outside the
# repository, for critest's stand-in images (test/critest/standin): its sh
# runs commands through PATH as upstream busybox images do, where
# busybox-static's (which the other suites use, and which conflicts with
# this package, so it is not installed) runs its own applets. The binary
# is kept per package version; it prints its path.
set -eu

cache=${XDG_CACHE_HOME:-$HOME/.cache}/crin/debian-busybox
candidate() { apt-cache show --no-all-versions busybox 2>/dev/null | sed -n 's/^Version: //p' | head -n 1; }
version=$(candidate)
if [ -z "$version" ]; then
	apt-get update -qq >/dev/null
	version=$(candidate)
fi
if [ -z "$version" ]; then
	echo "busybox: Debian's package lists know no busybox" >&2
	exit 1
fi
out="$cache/$(echo "$version" | tr ':' '_')/busybox"
if [ -x "$out" ]; then
	echo "$out"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt runs the download as _apt where it can write; the dir is root's.
chmod 0755 "$tmp"
(cd "$tmp" && apt-get download -qq "busybox=$version" >/dev/null)
dpkg-deb -x "$tmp"/busybox_*.deb "$tmp/x"
"$tmp/x/bin/busybox" true
mkdir -p "$(dirname "$out")"
cp "$tmp/x/bin/busybox" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
echo "$out"
