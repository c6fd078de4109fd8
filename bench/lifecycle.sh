#!/usr/bin/env bash
# Pod lifecycle latency and memory of crind, side by side with containerd
# (v2.4.2 built from the Go module proxy, or Debian 12's 1.6: CONTAINERD=v2 or
# debian, see bench/lib.sh), both driven over their CRI sockets by
# bench/cmd/crilat the way kubelet drives them.
#
#   make bench                          # builds bin/, then runs this
#   N=50 K=10 bench/lifecycle.sh        # N timed lifecycles, K pods for memory
#   PAR=30 PAR_ROUNDS=3 bench/lifecycle.sh  # pods started in parallel (0: none), rounds
#   FLOOR=0 bench/lifecycle.sh          # no OCI runtime floor (runc alone)
#   SKIP_CONTAINERD=1 bench/lifecycle.sh
#   CRIND_HANDLERS="runc runc-v2 lxc" bench/lifecycle.sh  # one crind, one target per
#                                       # handler (runc, runc-v2, lxc), beside containerd
#   NRI="off 0 1 4" bench/lifecycle.sh  # NRI mode (what bench/nri.sh runs)
#   BASELINE_BIN=DIR bench/lifecycle.sh # also crind-base from DIR's crind, crin-shim,
#                                       # crin-pause (another build), the baseline
#
# NRI mode runs one crind per configuration in $NRI, side by side and
# interleaved like the runtimes of the default mode: "off" is NRI disabled,
# "N" is NRI enabled with N pre-installed no-op plugins (bench/cmd/nrinop,
# subscribed to every event), "Nv" the same with each plugin also
# subscribed to ValidateContainerAdjustment. It prints the latency each adds
# to "0" (NRI on, no plugin) and checks that every plugin received every
# event of every lifecycle. containerd is not part of it (see bench/README.md).
#
# Needs root on Debian 12 (installs runc, CNI plugins, busybox-static and,
# for CONTAINERD=debian, containerd with apt when missing). Everything it
# starts lives under one temporary directory and is removed on exit, also
# after a failure: pods, daemons, shims, mounts, cgroups, the bench bridge
# (bench/lib.sh). It prints figures and checks none of them.
set -euo pipefail

NRI=${NRI:-}
N=${N:-50}
PAR=${PAR:-30}
PAR_ROUNDS=${PAR_ROUNDS:-3}
FLOOR=${FLOOR:-1}
WARMUP=${WARMUP:-2}
ME=lifecycle.sh
. "$(dirname "$0")/lib.sh"
if [ -n "$NRI" ]; then
	K=${K:-0} PAR=0 FLOOR=0
	for c in $NRI; do
		[[ "$c" =~ ^(off|[0-9]v?)$ ]] || {
			echo "lifecycle.sh: NRI=\"$NRI\": \"$c\" is not off, N or Nv (N plugins, 0-9)" >&2
			exit 1
		}
	done
else
	K=${K:-10}
fi

bench_init
if [ -n "$NRI" ]; then
	# This mode compares crind configurations with one another; containerd
	# is neither built nor started (see bench/README.md).
	ctd_why="NRI mode drives crind only (see bench/README.md)"
fi
bench_containerd
bench_packages
bench_base
bench_build
bench_network

echo "bench: N=$N lifecycles (+$WARMUP warm-up) per runtime, K=$K pods, image $IMAGE, $(nproc) cores, kernel $(uname -r), load $(cut -d" " -f1-3 /proc/loadavg)${NRI:+, NRI configurations: $NRI}"

if [ -n "$NRI" ]; then
	go build -o "$BASE/nrinop" ./bench/cmd/nrinop
	for c in $NRI; do start_crind "nri-$c" "$c"; done
else
	start_crind crind
	# An A/B of two builds: crind-base interleaved with crind, and what
	# crind adds to it per step printed (a negative figure is a gain).
	if [ -n "${BASELINE_BIN:-}" ]; then
		start_crind crind-base "" "$BASELINE_BIN"
	fi
fi
start_containerd
[ -z "$ctd_why" ] || echo "bench: containerd not compared: $ctd_why"

# --- measure ----------------------------------------------------------------
# Both daemons run at once and crilat interleaves their lifecycles, so load
# from elsewhere on the machine falls on both alike. crilat reports a peer
# that fails mid-run ("containerd not compared: ...") and goes on without it.
mkdir -p "$BASE/results"
base=()
[[ " $NRI " == *" 0 "* ]] && base=(-baseline nri-0)
# Handlers side by side: what each adds to containerd, the reference.
[ -z "${CRIND_HANDLERS:-}" ] || [ -n "$ctd_why" ] || base=(-baseline containerd)
[ -z "${BASELINE_BIN:-}" ] || [ -n "$NRI" ] || base=(-baseline crind-base)
floor=()
if [ "$FLOOR" = 1 ]; then
	if floor_setup; then
		floor=(-floor-dir "$BASE/floor" -floor-ns "$BASE/floor/ns" -floor-cgroup "/$CG/floor" -runc "$(command -v runc)")
	else
		echo "bench: no OCI runtime floor: could not pin its namespaces"
	fi
fi
"$BASE/crilat" run "${targets[@]}" -image "$IMAGE" -n "$N" -k "$K" -warmup "$WARMUP" "${base[@]}" \
	-par "$PAR" -par-rounds "$PAR_ROUNDS" "${floor[@]}" \
	-cgroup-parent "/$CG" -shim-match "$BASE" -log-dir "$BASE/logs" -out-dir "$BASE/results"
echo "bench: load at the end $(cut -d" " -f1-3 /proc/loadavg)"
if [ -n "${KEEP_RESULTS:-}" ]; then
	mkdir -p "$KEEP_RESULTS" && cp "$BASE"/results/*.json "$KEEP_RESULTS"/
fi
[ -z "$ctd_why" ] || echo "bench: containerd not compared: $ctd_why"
[ -n "$NRI" ] || exit 0

# --- NRI mode: did every plugin see every lifecycle? --------------------------
# Every configuration must have its result (crilat does not fail on a peer),
# and every plugin, at least one of each lifecycle event per lifecycle run.
# The plugins write their counts when crind shuts them down.
if [ -x bin/crinctl ]; then
	for c in $NRI; do
		out=$(bin/crinctl --socket "$BASE/nri-$c/s/crind-admin.sock" plugins 2>/dev/null) &&
			printf 'crinctl plugins, nri-%s:\n%s\n' "$c" "$out"
	done
fi
# Pods are all gone (crilat removes what it made); the trap has nothing to
# drain or stop.
for i in "${!CRIND_PIDS[@]}"; do stop_pid "${CRIND_PIDS[$i]}"; done
CRIND_PIDS=() CRIND_SOCKS=()
runs=$((N + WARMUP + K))
lifecycle_events="RunPodSandbox CreateContainer PostCreateContainer StartContainer PostStartContainer StopContainer RemoveContainer StopPodSandbox RemovePodSandbox"
bad=""
for c in $NRI; do
	[ -s "$BASE/results/nri-$c.json" ] || bad="$bad nri-$c:no-result"
	[ "$c" = off ] && continue
	n=${c%v}
	want=$lifecycle_events
	[ "$n" = "$c" ] || want="$want ValidateContainerAdjustment"
	for i in $(seq 10 $((10 + n - 1))); do
		f=$BASE/nri-$c/counts/$i-nop
		if [ ! -s "$f" ]; then
			bad="$bad nri-$c/$i-nop:no-counts"
			continue
		fi
		echo "bench: nri-$c/$i-nop received: $(tr '\n' ' ' <"$f")"
		for e in $want; do
			got=$(awk -v e="$e" '$1 == e {print $2}' "$f")
			[ "${got:-0}" -ge "$runs" ] || bad="$bad nri-$c/$i-nop:$e=${got:-0}<$runs"
		done
	done
done
if [ -n "$bad" ]; then
	echo "bench: NRI set-up broken, figures meaningless:$bad" >&2
	exit 1
fi
echo "bench: every plugin received each lifecycle event at least $runs times (N + warm-up + K)"
