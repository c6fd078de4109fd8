#!/bin/sh
# Starts crind with its built-in defaults (no config file needed): installs
# the Debian packages it needs, builds it, installs crin's default bridge
# network when /etc/cni/net.d has none, and runs it in the foreground.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
make build
./bin/crind cni install-default
exec ./bin/crind "$@"
