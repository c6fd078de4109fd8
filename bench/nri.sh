#!/usr/bin/env bash
# Added latency of NRI plugins on crind's pod lifecycle: crind with NRI off,
# on with no plugin, with 1 and with 4 no-op plugins (bench/cmd/nrinop)
# subscribed to every event, side by side, driven over CRI like kubelet.
#
#   bench/nri.sh                        # NRI="off 0 1 4", N=30
#   NRI="0 1 4 4v" N=50 bench/nri.sh    # 4v: 4 plugins that also validate
#   KEEP_RESULTS=/tmp/res bench/nri.sh  # keep nri-*.json (crilat compare -baseline nri-0)
#
# It is bench/lifecycle.sh in its NRI mode; see there and bench/README.md.
# containerd is not measured: Debian 12's containerd 1.6 has only NRI v0.1,
# which cannot run these plugins.
set -euo pipefail
export NRI=${NRI:-off 0 1 4}
export N=${N:-30}
exec "$(dirname "$0")/lifecycle.sh"
