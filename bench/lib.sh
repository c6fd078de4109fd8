# Shared set-up of the benchmarks that drive crind and containerd side by
# side over their CRI sockets (bench/lifecycle.sh, bench/stats.sh); sourced,
# not run. Call in this order:
#
#   ME=stats.sh; . bench/lib.sh
#   bench_init           root, Go, the repository as the working directory
#   bench_containerd     pick the peer: $CONTAINERD (see below); sets ctd_why
#                        when there is none
#   bench_packages       apt-get what is missing
#   bench_base           the temporary directory $BASE and the clean-up trap
#   bench_build          bin/ (if missing) and $BASE/crilat
#   bench_network        registry ($REG, $IMAGE, $PAUSE) and the CNI conflist
#   start_crind NAME     one crind (appends to $targets)
#   start_containerd     the peer, unless $ctd_why says why not (appends to $targets)
#
# CONTAINERD selects the peer:
#   v2 (default)  containerd v2.4.2 built from the Go module proxy by
#                 bench/containerd.sh into ~/.cache/crin/containerd-v2.4.2
#                 (the first run on a machine builds it); if the build fails,
#                 Debian's instead
#   debian        Debian 12's containerd 1.6 (apt)
#   none          no peer (SKIP_CONTAINERD=1 means the same)
#
# Everything started lives under one temporary directory and is removed on
# exit, also after a failure: pods, daemons, shims, mounts, cgroups, pinned
# network namespaces, the bench bridge.
#
# Several runs may share the machine (engineers benchmarking their
# branches): each has its own bridge, subnet, CNI network name, cgroup and
# directory, and its clean-up touches only what is its own.

bench_init() {
	if [ "$(id -u)" != 0 ]; then
		echo "$ME: needs root (runs crind, containerd, runc and CNI)" >&2
		exit 1
	fi
	REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	cd "$REPO"
	export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
	command -v go >/dev/null || { echo "$ME: go not found (install Go to /usr/local/go)" >&2; exit 1; }
	ctd_why=""
	CTD_KIND="" CTD_DIR=""
	# The peer's version (bench/containerd.sh builds it); another 2.x is
	# configured alike.
	CTD_VERSION=${CRIN_CONTAINERD_VERSION:-v2.4.2}
}

# bench_containerd sets CTD_KIND (v2 or debian) and, for v2, CTD_DIR (the
# directory of containerd and containerd-shim-runc-v2); ctd_why when no peer
# runs. Callers that set ctd_why before keep it.
bench_containerd() {
	[ -z "$ctd_why" ] || return 0
	local want=${CONTAINERD:-v2}
	[ -z "${SKIP_CONTAINERD:-}" ] || want=none
	case "$want" in
	none)
		ctd_why="${SKIP_CONTAINERD:+SKIP_CONTAINERD is set}"
		ctd_why=${ctd_why:-CONTAINERD=none}
		;;
	debian) CTD_KIND=debian ;;
	v2)
		CTD_DIR=${CRIN_CONTAINERD:-${XDG_CACHE_HOME:-$HOME/.cache}/crin/containerd-$CTD_VERSION}
		if CRIN_CONTAINERD=$CTD_DIR CRIN_CONTAINERD_VERSION=$CTD_VERSION "$REPO/bench/containerd.sh"; then
			CTD_KIND=v2
		else
			echo "$ME: could not build containerd $CTD_VERSION; comparing with Debian's containerd instead" >&2
			CTD_KIND=debian CTD_DIR=""
		fi
		;;
	*)
		echo "$ME: CONTAINERD=$want: want v2, debian or none" >&2
		exit 1
		;;
	esac
}

bench_packages() {
	local need="" p pkgs="runc containernetworking-plugins busybox-static iproute2"
	[ "$CTD_KIND" != debian ] || pkgs="$pkgs containerd"
	for p in $pkgs; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
	done
	[ -n "$need" ] || return 0
	echo "installing:$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || true
	# containerd is optional: the crind half runs without it.
	apt-get install -y -qq --no-install-recommends $need >/dev/null ||
		apt-get install -y -qq --no-install-recommends ${need/containerd/} >/dev/null
}

# --- clean-up ---------------------------------------------------------------

bench_base() {
	BASE=$(mktemp -d /tmp/crinb.XXXXXX)
	local sfx i
	sfx=$(basename "$BASE" | cut -d. -f2)
	CG=crinbench-$sfx
	# Per run: bridge crinbenchXXXXXX (15 bytes, IFNAMSIZ), network
	# crinbench-XXXXXX, a 10.98.N.0/24 no route on the host uses yet.
	BRIDGE=crinbench$sfx NETNAME=crinbench-$sfx
	for i in $(seq 50); do
		SUBNET=10.98.$((RANDOM % 256)).0/24
		ip -4 route show | grep -qF "${SUBNET%.0/24}." || break
	done
	CRIND_PIDS=() CRIND_SOCKS=() CTD_PID="" REG_PID=""
	CTD_SOCK=$BASE/ctd/s/containerd.sock
	NETNS_BEFORE=$(ls /run/netns 2>/dev/null || true)
	# Host directories containerd makes on first use; the ones absent now
	# are removed at the end if they are empty again.
	NEW_DIRS=""
	local d
	for d in /run/containerd/s /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd \
		/run/netns /var/lib/cni/results /var/lib/cni; do
		[ -e "$d" ] || NEW_DIRS="$NEW_DIRS $d"
	done
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

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
	timeout 150 "$BASE/crilat" cleanup -socket "$sock" -timeout 140s >/dev/null 2>&1 ||
		echo "clean-up: could not drain $sock; killing what is left" >&2
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	local i d p f m ns l
	for i in "${!CRIND_PIDS[@]}"; do
		drain "${CRIND_SOCKS[$i]}"; stop_pid "${CRIND_PIDS[$i]}"
	done
	drain "$CTD_SOCK"; stop_pid "$CTD_PID"
	stop_pid "$REG_PID"
	# Shims, loggers and crin-lxc monitors left behind: theirs are the
	# only command lines naming $BASE.
	for d in /proc/[0-9]*; do
		case "$(cat "$d/comm" 2>/dev/null)" in crin-shim|containerd-shim|crin-logger|crin-lxc) ;; *) continue ;; esac
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF "$BASE" && kill -KILL "${d#/proc/}" 2>/dev/null
	done
	lxc_monitor_cgroups
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
	# containerd 1.6 pins netns in /run/netns (2.x under its state
	# directory, in $BASE); remove only ones that appeared during the run.
	[ "$CTD_KIND" = debian ] && for ns in $(ls /run/netns 2>/dev/null); do
		case "$ns" in cni-*) ;; *) continue ;; esac
		printf '%s\n' "$NETNS_BEFORE" | grep -qxF "$ns" && continue
		umount -l "/run/netns/$ns" 2>/dev/null; rm -f "/run/netns/$ns"
	done
	ip link del "$BRIDGE" 2>/dev/null
	# libcni's result cache of pods whose CNI DEL never ran (a daemon that
	# died first): the bench network's files, and the loopback files of the
	# same sandboxes (containerd's).
	for f in /var/lib/cni/results/"$NETNAME"-*-eth0; do
		[ -e "$f" ] || continue
		l=${f#/var/lib/cni/results/"$NETNAME"-}
		rm -f "$f" "/var/lib/cni/results/cni-loopback-${l%-eth0}-lo"
	done
	for d in $NEW_DIRS; do rmdir "$d" 2>/dev/null; done
	if [ "$rc" != 0 ] && [ -d "$BASE" ]; then
		for l in "$BASE"/*.log; do [ -s "$l" ] && { echo "--- tail of $l" >&2; tail -n 30 "$l" >&2; }; done
	fi
	rm -rf "$BASE"
	exit "$rc"
}

# lxc_monitor_cgroups removes the cgroups of this run's crin-lxc monitors,
# which live outside the bench's cgroup (/sys/fs/cgroup/*/crin-lxc-monitor/
# <container id>). "crin-lxc delete" removes them; after a daemon or a
# monitor was killed some may be left. Ours are those of the containers a
# crind of this run made (the ids in its log and in crin-lxc's root); other
# runs' are not touched.
lxc_monitor_cgroups() {
	local ids id m p n=0
	ids=$( { grep -ho 'container_id=[0-9a-f]*' "$BASE"/*.log 2>/dev/null | cut -d= -f2
		ls "$BASE"/*/s/runtimes/lxc 2>/dev/null; } | sort -u)
	[ -n "$ids" ] || return 0
	for id in $ids; do
		for m in /sys/fs/cgroup/*/crin-lxc-monitor/"$id" /sys/fs/cgroup/crin-lxc-monitor/"$id"; do
			[ -d "$m" ] || continue
			for p in $(find "$m" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
			sleep 0.1
			find "$m" -depth -type d -exec rmdir {} \; 2>/dev/null
			n=$((n + 1))
		done
	done
	[ "$n" = 0 ] || echo "clean-up: removed $n crin-lxc monitor cgroups left behind (a monitor was killed)" >&2
}

wait_file() { # path seconds what [pid that must stay alive]
	local i
	for i in $(seq $(($2 * 10))); do
		[ -e "$1" ] && return 0
		if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
			echo "$ME: $3 exited before it listened on $1" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "$ME: $3 did not come up within $2s ($1)" >&2
	return 1
}

# --- build, registry, network -------------------------------------------------

bench_build() {
	[ -x bin/crind ] && [ -x bin/crin-shim ] && [ -x bin/crin-pause ] && [ -x bin/crin-logger ] || make build
	# The lxc handler's runtime, found next to crind (built with cgo).
	if [[ " ${CRIND_HANDLERS:-} " == *" lxc "* ]] && [ ! -x bin/crin-lxc ]; then make build; fi
	go build -o "$BASE/crilat" ./bench/cmd/crilat
}

bench_network() {
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
  "name": "$NETNAME",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$BASE/ipam"}}
  ]
}
EOF
}

# --- crind --------------------------------------------------------------------

targets=()
# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p i
	for i in $(seq 100); do
		p=$((20000 + RANDOM % 40000))
		ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
	done
	echo "$ME: no free port for crind's metrics" >&2
	return 1
}

# start_crind NAME [NRI [BIN]]: one crind with its own root, state and socket
# under $BASE/NAME; NRI is "off", "N" or "Nv" (see bench/lifecycle.sh), empty
# is crind's default (NRI on, no plugin) with private NRI paths. BIN is the
# directory of crind, crin-shim and crin-pause (default: the repo's bin/). CRIND_CRI_EXTRA, if set,
# is appended to the [cri] section (e.g. 'stats_period = "2s"'). crind
# serves Prometheus metrics on a free 127.0.0.1 port, which crilat scrapes
# for the phase trace (internal/cri/trace.go).
start_crind() {
	local name=$1 nri=${2:-} bin=${3:-$REPO/bin} dir=$BASE/$1 i n flags="" h runc_v2="" lxc="" metrics
	local sock=$dir/s/crin.sock port
	port=$(free_port)
	[[ " ${CRIND_HANDLERS:-runc} " == *" runc-v2 "* ]] && runc_v2=1
	[[ " ${CRIND_HANDLERS:-runc} " == *" lxc "* ]] && lxc=1
	mkdir -p "$dir"
	cat >"$dir/crin.toml" <<EOF
root = "$dir/root"
state = "$dir/s"
log_level = "info"
[cri]
socket = "$sock"
metrics_address = "127.0.0.1:$port"
cgroup_parent = "/$CG"
shim_binary = "$bin/crin-shim"
pause_binary = "$bin/crin-pause"
${CRIND_CRI_EXTRA:-}
[cni]
conf_dir = "$BASE/net.d"
bin_dirs = ["/usr/lib/cni"]
EOF
	if [ -n "$runc_v2" ]; then
		# The shim v2 backend with Debian's containerd-shim-runc-v2,
		# for CRIND_HANDLERS (docs/runtimes.md).
		cat >>"$dir/crin.toml" <<EOF
[runtimes.runc-v2]
type = "shimv2"
runtime_type = "io.containerd.runc.v2"
[runtimes.runc-v2.options]
binary_name = "$(command -v runc)"
EOF
	fi
	if [ -n "$lxc" ]; then
		# LXC through crin-lxc (next to crind) under crin-shim; its
		# root defaults to <state>/runtimes/lxc, in $BASE, so its
		# monitors' command lines name $BASE (docs/runtimes.md, "LXC").
		printf '[runtimes.lxc]\ntype = "lxc"\n' >>"$dir/crin.toml"
	fi
	if [ "$nri" = off ]; then
		printf '[nri]\nenable = false\n' >>"$dir/crin.toml"
	elif [ -z "$nri" ]; then
		# NRI stays on as by default, but with a socket and plugin
		# directories of its own: the defaults (/var/run/nri/nri.sock,
		# /opt/nri/plugins) belong to the host.
		mkdir -p "$dir/plugins" "$dir/plugins.d"
		cat >>"$dir/crin.toml" <<EOF
[nri]
plugin_path = "$dir/plugins"
plugin_config_path = "$dir/plugins.d"
socket_path = "$dir/s/nri.sock"
EOF
	else
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
	# setsid: a Ctrl-C meant for the script must not reach the daemons
	# before the clean-up has drained them (both stop on SIGINT). From a
	# non-interactive shell the child is no group leader, so setsid execs
	# in place and $! is the daemon.
	setsid "$bin/crind" --config "$dir/crin.toml" >"$BASE/$name.log" 2>&1 &
	local pid=$!
	CRIND_PIDS+=("$pid")
	CRIND_SOCKS+=("$sock")
	wait_file "$sock" 30 "crind $name" "$pid"
	# One target per handler in CRIND_HANDLERS (default: runc), on the
	# same daemon: runc is the oci backend (crin-shim), runc-v2 the shim v2
	# backend (containerd-shim-runc-v2, whose comm is cut to 15 bytes, and a
	# crin-logger per container), lxc the oci backend driving crin-lxc
	# (crin-shim, and per container crin-lxc's monitor and the holder of
	# its namespaces, both comm crin-lxc). The phase trace has no handler
	# label: with more than one handler it would mix them, so it is read
	# only when runc is the only one.
	metrics=",metrics=http://127.0.0.1:$port/metrics"
	[ "$(echo ${CRIND_HANDLERS:-runc} | wc -w)" = 1 ] || metrics=""
	for h in ${CRIND_HANDLERS:-runc}; do
		case $h in
		runc) targets+=(-target "name=$name,socket=$sock,pid=$pid,shim=crin-shim$metrics") ;;
		runc-v2) targets+=(-target "name=$name-runc-v2,socket=$sock,pid=$pid,shim=containerd-shim|crin-logger,handler=runc-v2") ;;
		lxc) targets+=(-target "name=$name-lxc,socket=$sock,pid=$pid,shim=crin-shim|crin-lxc,handler=lxc") ;;
		*) echo "$ME: CRIND_HANDLERS: unknown handler $h (runc, runc-v2, lxc)" >&2; return 1 ;;
		esac
	done
}

# --- the OCI runtime floor --------------------------------------------------

# floor_setup pins a network, IPC and UTS namespace under $BASE/floor/ns for
# the floor's containers to join, as crind's join their pod's (crilat run
# -floor-*). The clean-up unmounts them with the other mounts under $BASE.
floor_setup() {
	local ns=$BASE/floor/ns
	mkdir -p "$ns"
	mount --bind "$ns" "$ns" && mount --make-private "$ns" || return 1
	touch "$ns/net" "$ns/ipc" "$ns/uts"
	unshare --net="$ns/net" --ipc="$ns/ipc" --uts="$ns/uts" true
}

# --- containerd -----------------------------------------------------------------

# ctd_config_services writes the part of the config both containerd versions
# read alike: its sockets, quiet debug and metrics, its opt dir.
ctd_config_services() {
	cat <<EOF
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
EOF
}

# ctd_config_v1 writes the config of Debian's containerd 1.6 (config version 2).
ctd_config_v1() {
	cat <<EOF
version = 2
root = "$BASE/ctd/root"
state = "$BASE/ctd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
EOF
	ctd_config_services
	cat <<EOF
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Root here may lack CAP_SYS_RESOURCE: a negative oom_score_adj would be refused.
  restrict_oom_score_adj = true
  # The runtime and CNI settings below are ctd_config_v2's under 1.6's
  # plugin names: keep the two alike, so both versions run pods the same.
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
}

# ctd_config_v2 writes the config of containerd 2.x (config version 3: the
# CRI plugin split into images, runtime and the gRPC service). No imports
# (the default reads /etc/containerd/conf.d), NRI off (it would listen on
# /var/run/nri/nri.sock), the registry reached over plain HTTP through a
# hosts.toml of its own.
ctd_config_v2() {
	mkdir -p "$BASE/ctd/certs.d/$REG"
	cat >"$BASE/ctd/certs.d/$REG/hosts.toml" <<EOF
server = "http://$REG"
[host."http://$REG"]
  capabilities = ["pull", "resolve"]
EOF
	cat <<EOF
version = 3
root = "$BASE/ctd/root"
state = "$BASE/ctd/state"
imports = []
disabled_plugins = ["io.containerd.nri.v1.nri"]
EOF
	ctd_config_services
	cat <<EOF
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "$BASE/ctd/shims"
[plugins.'io.containerd.transfer.v1.local']
  config_path = "$BASE/ctd/certs.d"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$BASE/ctd/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  # Root here may lack CAP_SYS_RESOURCE: a negative oom_score_adj would be refused.
  restrict_oom_score_adj = true
  enable_cdi = false
  # Network namespaces under its state directory (in $BASE), not in the
  # host's /var/run/netns where other runs' would be.
  netns_mounts_under_state_dir = true
  # The runtime and CNI settings below are ctd_config_v1's under 2.x's
  # plugin names: keep the two alike, so both versions run pods the same.
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "$BASE/ctd/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$BASE/net.d"
    max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
}

# start_containerd starts the peer chosen by bench_containerd, or says why
# not in ctd_why.
start_containerd() {
	if [ -z "$ctd_why" ] && [ "$CTD_KIND" = debian ] &&
		{ ! command -v containerd >/dev/null || ! command -v containerd-shim-runc-v2 >/dev/null; }; then
		ctd_why="containerd is not installed and apt could not install it"
	fi
	[ -z "$ctd_why" ] || return 0
	local bin=containerd path=$PATH
	mkdir -p "$BASE/ctd/s"
	if [ "$CTD_KIND" = v2 ]; then
		ctd_config_v2 >"$BASE/ctd/config.toml"
		bin=$CTD_DIR/containerd
		# containerd finds its shim on PATH: ours first, so Debian's
		# containerd-shim-runc-v2 (if installed) is not picked up.
		path=$CTD_DIR:$PATH
	else
		ctd_config_v1 >"$BASE/ctd/config.toml"
	fi
	PATH=$path setsid "$bin" --config "$BASE/ctd/config.toml" >"$BASE/containerd.log" 2>&1 &
	CTD_PID=$!
	if wait_file "$CTD_SOCK" 30 "containerd" "$CTD_PID"; then
		targets+=(-target "name=containerd,socket=$CTD_SOCK,pid=$CTD_PID,shim=containerd-shim,pause=$PAUSE")
	else
		ctd_why="containerd did not start: $(tail -n 3 "$BASE/containerd.log" | tr '\n' ' ')"
		stop_pid "$CTD_PID"; CTD_PID=""
	fi
}
