#!/bin/sh
# Installs what crind and its tests need on a Debian 12 node.
set -eu
need=""
for pkg in runc crun containerd containernetworking-plugins busybox-static iproute2 iptables criu; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need="$need $pkg"
done
if [ -n "$need" ]; then
	echo "installing:$need"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || true
	apt-get install -y -qq $need >/dev/null
fi
