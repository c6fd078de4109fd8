#!/usr/bin/env bash
# Pod lifecycle latency and memory of crind, side by side with containerd
# (Debian 12's containerd 1.6 with its CRI plugin), both driven over their CRI
# sockets by bench/cmd/crilat the way kubelet drives them.
#
#   make bench                          # builds bin/, then runs this
#   N=50 K=10 bench/lifecycle.sh        # N timed lifecycles, K pods for memory
#   SKIP_CONTAINERD=1 bench/lifecycle.sh
#   NRI="off 0 1 4" bench/lifecycle.sh  # NRI mode (what bench/nri.sh runs)
#
# NRI mode runs one crind per configuration in $NRI, side by side and
# interleaved like the runtimes of the default mode: "off" is NRI disabled,
# "N" is NRI enabled with N pre-installed no-op plugins (bench/cmd/nrinop,
# subscribed to every event), "Nv" the same with each plugin also
# subscribed to ValidateContainerAdjustment. It prints the latency each adds
# to "0" (NRI on, no plugin) and checks that every plugin received every
# event of every lifecycle. containerd is not part of it (see bench/README.md).
#
# Needs root on Debian 12 (installs runc, CNI plugins, busybox-static and
# containerd with apt when missing). Everything it starts lives under one
# temporary directory and is removed on exit, also after a failure: pods,
# daemons, shims, mounts, cgroups, the bench bridge. It prints figures and
# checks none of them.
set -euo pipefail

NRI=${NRI:-}
N=${N:-50}
WARMUP=${WARMUP:-2}
if [ -n "$NRI" ]; then
	K=${K:-0}
	SKIP_CONTAINERD=${SKIP_CONTAINERD:-nri}
	for c in $NRI; do
		[[ "$c" =~ ^(off|[0-9]v?)$ ]] || {
			echo "lifecycle.sh: NRI=\"$NRI\": \"$c\" is not off, N or Nv (N plugins, 0-9)" >&2
			exit 1
		}
	done
else
	K=${K:-10}
fi
BRIDGE=crinbench0
SUBNET=10.98.0.0/24

if [ "$(id -u)" != 0 ]; then
	echo "lifecycle.sh: needs root (runs crind, containerd, runc and CNI)" >&2
	exit 1
fi
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
command -v go >/dev/null || { echo "lifecycle.sh: go not found (install Go to /usr/local/go)" >&2; exit 1; }

# --- packages ---------------------------------------------------------------
need=""
pkgs="runc containernetworking-plugins busybox-static iproute2"
[ -n "${SKIP_CONTAINERD:-}" ] || pkgs="$pkgs containerd"
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
if [ -n "$need" ]; then
	echo "installing:$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || true
	# containerd is optional: the crind half runs without it.
	apt-get install -y -qq --no-install-recommends $need >/dev/null ||
		apt-get install -y -qq --no-install-recommends ${need/containerd/} >/dev/null
fi

# --- clean-up ---------------------------------------------------------------
BASE=$(mktemp -d /tmp/crinb.XXXXXX)
CG=crinbench-$(basename "$BASE" | cut -d. -f2)
CRIND_PIDS=() CRIND_SOCKS=() CTD_PID="" REG_PID=""
CTD_SOCK=$BASE/ctd/s/containerd.sock
NETNS_BEFORE=$(ls /run/netns 2>/dev/null || true)
# Host directories containerd makes on first use; the ones absent now are
# removed at the end if they are empty again.
NEW_DIRS=""
for d in /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd \
	/run/netns /var/lib/cni/results /var/lib/cni; do
	[ -e "$d" ] || NEW_DIRS="$NEW_DIRS $d"
done

# stop_pid sends SIGTERM, waits up to 15s, then SIGKILLs. Only pids this
# script started are passed in.
stop_pid() {
	local pid=$1 i
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# drain asks a daemon, while it still runs, to remove every pod it has.
drain() {
	local sock=$1
	[ -S "$sock" ] || return 0
	timeout 90 "$BASE/crilat" cleanup -socket "$sock" -timeout 80s >/dev/null 2>&1 ||
		echo "clean-up: could not drain $sock; killing what is left" >&2
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	local i
	for i in "${!CRIND_PIDS[@]}"; do
		drain "${CRIND_SOCKS[$i]}"; stop_pid "${CRIND_PIDS[$i]}"
	done
	drain "$CTD_SOCK"; stop_pid "$CTD_PID"
	stop_pid "$REG_PID"
	# Shims left behind: theirs are the only command lines naming $BASE.
	for d in /proc/[0-9]*; do
		case "$(cat "$d/comm" 2>/dev/null)" in crin-shim|containerd-shim) ;; *) continue ;; esac
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF "$BASE" && kill -KILL "${d#/proc/}" 2>/dev/null
	done
	# Container processes left behind are in the bench's cgroup.
	for f in $(find /sys/fs/cgroup/*/"$CG" -name cgroup.procs 2>/dev/null); do
		for p in $(cat "$f" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
	done
	sleep 0.2
	find /sys/fs/cgroup/*/"$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
	# Mounts (rootfs overlays, shm, pinned netns) under $BASE, deepest first.
	awk '{print $5}' /proc/self/mountinfo | grep -F "$BASE" | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null
	done
	# containerd 1.6 pins netns in /run/netns; remove only ones that appeared during the run.
	for ns in $(ls /run/netns 2>/dev/null); do
		case "$ns" in cni-*) ;; *) continue ;; esac
		printf '%s\n' "$NETNS_BEFORE" | grep -qxF "$ns" && continue
		umount -l "/run/netns/$ns" 2>/dev/null; rm -f "/run/netns/$ns"
	done
	ip link del "$BRIDGE" 2>/dev/null
	for d in $NEW_DIRS; do rmdir "$d" 2>/dev/null; done
	if [ "$rc" != 0 ] && [ -d "$BASE" ]; then
		for l in "$BASE"/*.log; do [ -s "$l" ] && { echo "--- tail of $l" >&2; tail -n 30 "$l" >&2; }; done
	fi
	rm -rf "$BASE"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_file() { # path seconds what [pid that must stay alive]
	local i
	for i in $(seq $(($2 * 10))); do
		[ -e "$1" ] && return 0
		if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
			echo "lifecycle.sh: $3 exited before it listened on $1" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "lifecycle.sh: $3 did not come up within $2s ($1)" >&2
	return 1
}

# --- build ------------------------------------------------------------------
[ -x bin/crind ] && [ -x bin/crin-shim ] && [ -x bin/crin-pause ] || make build
go build -o "$BASE/crilat" ./bench/cmd/crilat

# --- registry and network ---------------------------------------------------
"$BASE/crilat" registry -pause bin/crin-pause -addr-file "$BASE/registry.addr" >"$BASE/registry.log" 2>&1 &
REG_PID=$!
wait_file "$BASE/registry.addr" 60 "registry" "$REG_PID"
REG=$(cat "$BASE/registry.addr")
IMAGE=$REG/library/busybox:bench
PAUSE=$REG/library/pause:bench

mkdir -p "$BASE/net.d" "$BASE/logs"
cat >"$BASE/net.d/10-crinbench.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "crinbench",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$BASE/ipam"}}
  ]
}
EOF

echo "bench: N=$N lifecycles (+$WARMUP warm-up) per runtime, K=$K pods, image $IMAGE, $(nproc) cores, kernel $(uname -r), load $(cut -d" " -f1-3 /proc/loadavg)${NRI:+, NRI configurations: $NRI}"

# --- crind ------------------------------------------------------------------
targets=()
# start_crind NAME [NRI]: one crind with its own root, state and socket under
# $BASE/NAME; NRI is "off", "N" or "Nv" (see the top of this file), empty
# leaves the [nri] section out (crind's default).
start_crind() {
	local name=$1 nri=${2:-} dir=$BASE/$1 i n flags=""
	local sock=$dir/s/crin.sock
	mkdir -p "$dir"
	cat >"$dir/crin.toml" <<EOF
root = "$dir/root"
state = "$dir/s"
log_level = "info"
[cri]
socket = "$sock"
metrics_address = ""
cgroup_parent = "/$CG"
shim_binary = "$REPO/bin/crin-shim"
pause_binary = "$REPO/bin/crin-pause"
[cni]
conf_dir = "$BASE/net.d"
bin_dirs = ["/usr/lib/cni"]
EOF
	if [ "$nri" = off ]; then
		printf '[nri]\nenable = false\n' >>"$dir/crin.toml"
	elif [ -n "$nri" ]; then
		n=${nri%v}
		[ "$n" = "$nri" ] || flags=-validate
		mkdir -p "$dir/plugins" "$dir/plugins.d" "$dir/counts"
		# crind launches pre-installed plugins without arguments: a wrapper
		# named NN-nop gives each its count file.
		for i in $(seq 10 $((10 + n - 1))); do
			printf '#!/bin/sh\nexec %s -count %s %s\n' "$BASE/nrinop" "$dir/counts/$i-nop" "$flags" >"$dir/plugins/$i-nop"
			chmod 755 "$dir/plugins/$i-nop"
		done
		cat >>"$dir/crin.toml" <<EOF
[nri]
enable = true
disable_connections = true
plugin_path = "$dir/plugins"
plugin_config_path = "$dir/plugins.d"
socket_path = "$dir/s/nri.sock"
EOF
	fi
	"$REPO/bin/crind" --config "$dir/crin.toml" >"$BASE/$name.log" 2>&1 &
	local pid=$!
	CRIND_PIDS+=("$pid")
	CRIND_SOCKS+=("$sock")
	wait_file "$sock" 30 "crind $name" "$pid"
	targets+=(-target "name=$name,socket=$sock,pid=$pid,shim=crin-shim")
}
if [ -n "$NRI" ]; then
	go build -o "$BASE/nrinop" ./bench/cmd/nrinop
	for c in $NRI; do start_crind "nri-$c" "$c"; done
else
	start_crind crind
fi

# --- containerd -------------------------------------------------------------
ctd_why=""
if [ -n "$NRI" ]; then
	# Debian 12's containerd 1.6 carries NRI v0.1: one-shot binaries from
	# /opt/nri/bin listed in /etc/nri/conf.json, run when a pod or container
	# starts or stops. The ttrpc plugin API of nrinop (containerd/nri v0.2+)
	# came with containerd 1.7.
	v=$(containerd --version 2>/dev/null | awk '{print $3}')
	case "$v" in
	"") ctd_why="NRI mode: containerd is not installed" ;;
	1.[0-6].* | 1.[0-6]~*) ctd_why="containerd $v has only NRI v0.1 (exec'd binaries, /etc/nri/conf.json), not the plugin API nrinop speaks (containerd 1.7+)" ;;
	*) ctd_why="NRI mode drives crind only; containerd $v is not set up for it" ;;
	esac
elif [ -n "${SKIP_CONTAINERD:-}" ]; then
	ctd_why="SKIP_CONTAINERD is set"
elif ! command -v containerd >/dev/null || ! command -v containerd-shim-runc-v2 >/dev/null; then
	ctd_why="containerd is not installed and apt could not install it"
fi
if [ -z "$ctd_why" ]; then
	mkdir -p "$BASE/ctd/s"
	cat >"$BASE/ctd/config.toml" <<EOF
version = 2
root = "$BASE/ctd/root"
state = "$BASE/ctd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CTD_SOCK"
[ttrpc]
  address = "$CTD_SOCK.ttrpc"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$BASE/ctd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Root here may lack CAP_SYS_RESOURCE: a negative oom_score_adj would be refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "$BASE/ctd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$BASE/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REG"]
    endpoint = ["http://$REG"]
EOF
	containerd --config "$BASE/ctd/config.toml" >"$BASE/containerd.log" 2>&1 &
	CTD_PID=$!
	if wait_file "$CTD_SOCK" 30 "containerd" "$CTD_PID"; then
		targets+=(-target "name=containerd,socket=$CTD_SOCK,pid=$CTD_PID,shim=containerd-shim,pause=$PAUSE")
	else
		ctd_why="containerd did not start: $(tail -n 3 "$BASE/containerd.log" | tr '\n' ' ')"
		stop_pid "$CTD_PID"; CTD_PID=""
	fi
fi
[ -z "$ctd_why" ] || echo "bench: containerd not compared: $ctd_why"

# --- measure ----------------------------------------------------------------
# Both daemons run at once and crilat interleaves their lifecycles, so load
# from elsewhere on the machine falls on both alike. crilat reports a peer
# that fails mid-run ("containerd not compared: ...") and goes on without it.
mkdir -p "$BASE/results"
base=()
[[ " $NRI " == *" 0 "* ]] && base=(-baseline nri-0)
"$BASE/crilat" run "${targets[@]}" -image "$IMAGE" -n "$N" -k "$K" -warmup "$WARMUP" "${base[@]}" \
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
