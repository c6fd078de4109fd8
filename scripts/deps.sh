#!/bin/sh
# Installs what crind and its tests need on a Debian 12 node: the runtimes
# and CNI plugins, liblxc with its headers and a C compiler (crin-lxc
# links liblxc), and the node lane's host tools (debootstrap, qemu, ssh;
# test/node/image.sh would install these itself, but `make test` builds the
# node image in the background, where it must not race apt with anyone).
set -eu
missing() {
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || echo "$pkg"
	done
}
need=$(missing runc crun containerd containernetworking-plugins busybox-static iproute2 iptables criu \
	lxc lxc-dev gcc pkg-config)
lane=$(missing debootstrap qemu-system-x86 e2fsprogs openssh-client util-linux)
if [ -n "$need$lane" ]; then
	echo "installing:" $need $lane
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || true
	[ -z "$need" ] || apt-get install -y -qq $need >/dev/null
	[ -z "$lane" ] || apt-get install -y -qq --no-install-recommends $lane >/dev/null
fi
