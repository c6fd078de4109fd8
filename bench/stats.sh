#!/usr/bin/env bash
# The stats RPCs kubelet polls, on a node with 100 running containers: crind
# side by side with containerd (v2.4.2 built from the Go module proxy, or
# Debian 12's 1.6: CONTAINERD=v2 or debian, see bench/lib.sh), both driven
# over their CRI sockets by bench/cmd/crilat ("crilat stats").
#
#   bench/stats.sh                          # 10 pods x 10 containers, 200 calls
#   PODS=10 CONTAINERS=10 CALLS=500 bench/stats.sh
#   STATS_PERIOD=2s bench/stats.sh          # crind's cri.stats_period (default: crind's, 10s)
#   SKIP_CONTAINERD=1 bench/stats.sh
#   SERIAL=1 bench/stats.sh                 # time one runtime at a time, the other idle
#   KEEP_RESULTS=/tmp/res bench/stats.sh    # also keep stats-crind.json, stats-containerd.json
#
# On each runtime it starts PODS pods of CONTAINERS busybox containers, each
# of which writes a few files into its rootfs and sleeps; waits until the
# runtime reports every writable layer (crind's sampler and containerd's
# snapshot usage both run every 10 s by default); reads the daemons' memory;
# then times ListContainerStats, ListPodSandboxStats, ImageFsInfo and
# ContainerStats, CALLS each per runtime, interleaved between the runtimes
# (SERIAL=1: all of one runtime's calls, then the other's).
#
# Needs root on Debian 12, like bench/lifecycle.sh, and shares its set-up
# and clean-up (bench/lib.sh). It prints figures and checks none of them.
set -euo pipefail

PODS=${PODS:-10}
CONTAINERS=${CONTAINERS:-10}
CALLS=${CALLS:-200}
STATS_PERIOD=${STATS_PERIOD:-}
serial=()
[ -z "${SERIAL:-}" ] || serial=(-serial)
ME=stats.sh
. "$(dirname "$0")/lib.sh"

bench_init
bench_containerd
bench_packages
bench_base
bench_build
bench_network

echo "bench: stats RPCs, $PODS pods x $CONTAINERS containers per runtime, $CALLS calls per RPC${SERIAL:+ (serial)}, crind stats_period ${STATS_PERIOD:-default}, $(nproc) cores, kernel $(uname -r), load $(cut -d" " -f1-3 /proc/loadavg)"

[ -z "$STATS_PERIOD" ] || CRIND_CRI_EXTRA="stats_period = \"$STATS_PERIOD\""
start_crind crind
start_containerd
[ -z "$ctd_why" ] || echo "bench: containerd not compared: $ctd_why"

mkdir -p "$BASE/results"
# crilat removes its pods itself, also after a failure; the trap drains
# whatever is left.
"$BASE/crilat" stats "${targets[@]}" -image "$IMAGE" -pods "$PODS" -containers "$CONTAINERS" -calls "$CALLS" "${serial[@]}" \
	-cgroup-parent "/$CG" -shim-match "$BASE" -log-dir "$BASE/logs" -out-dir "$BASE/results"
echo "bench: load at the end $(cut -d" " -f1-3 /proc/loadavg)"
if [ -n "${KEEP_RESULTS:-}" ]; then
	mkdir -p "$KEEP_RESULTS" && cp "$BASE"/results/*.json "$KEEP_RESULTS"/
fi
[ -z "$ctd_why" ] || echo "bench: containerd not compared: $ctd_why"
