#!/bin/sh
# Builds the node lane's VM image: Debian 13 (trixie), systemd as PID 1,
# cgroup v2 unified, the OCI runtimes and CNI plugins crind uses, and an
# sshd the tests drive it through. Nothing of crin is in the image: the
# tests install crind into each boot the way an operator does.
#
# The output is a directory ~/.cache/crin/node-<hash>/ holding
#   disk.img         raw ext4 root filesystem (booted read-only-backed:
#                    qemu -snapshot, so the cache stays clean)
#   vmlinuz initrd.img   the guest's own kernel and initramfs
#   id_ed25519       root's ssh key (generated per build)
#   packages.txt     every installed package and its version
# where <hash> covers this script, so changing the recipe builds a new
# image and an unchanged one is reused. Its path is the last line printed
# on stdout; progress goes to stderr.
#
#   CRIN_NODE_CACHE  the parent dir (default ~/.cache/crin)
#   CRIN_NODE_MIRROR the Debian mirror (default: the host's, from apt)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
self="$here/image.sh"
cache=${CRIN_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crin}
hash=$(sha256sum "$self" | cut -c1-16)
out="$cache/node-$hash"

if [ -f "$out/disk.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
	echo "node image: reusing $out" >&2
	echo "$out"
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	echo "node image: building needs root (debootstrap, chroot)" >&2
	exit 1
fi

# Host tools, installed once.
need=
command -v debootstrap >/dev/null || need="$need debootstrap"
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
command -v mkfs.ext4 >/dev/null || need="$need e2fsprogs"
command -v ssh >/dev/null || need="$need openssh-client"
command -v ssh-keygen >/dev/null || need="$need openssh-client"
if [ -n "$need" ]; then
	echo "node image: installing host tools:$need" >&2
	apt-get update >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need >&2
fi

# The host's own Debian mirror: on CI machines it is often the only one
# reachable.
mirror=${CRIN_NODE_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
		head -n1 | tr -d ' ') || true
	mirror=${mirror:-http://deb.debian.org/debian}
fi

mkdir -p "$cache"
tmp="$out.tmp.$$"
root="$tmp/root"
cleanup() {
	# The chroot's /proc is the only mount this script makes.
	umount "$root/proc" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$tmp"

start=$(date +%s)
echo "node image: debootstrap trixie from $mirror into $root" >&2
debootstrap --variant=minbase --include=ca-certificates trixie "$root" "$mirror" >&2
echo "node image: debootstrap took $(( $(date +%s) - start ))s" >&2

# No daemon starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"

# The initramfs only has to find the virtio disk (ext4 is built in): a
# small one unpacks faster under emulation than "most".
mkdir -p "$root/etc/initramfs-tools/conf.d"
echo MODULES=list >"$root/etc/initramfs-tools/conf.d/crin-node.conf"
# virtio_net too: eth0 then exists before systemd starts, and the network
# comes up without waiting for udev's coldplug.
printf 'virtio_blk\nvirtio_net\n' >>"$root/etc/initramfs-tools/modules"

# The guest's packages: the init and the runtimes crind drives; containerd
# only for its containerd-shim-runc-v2 (the shimv2 handler); sshd to drive
# it. No recommends: every package here is one something uses.
pkgs="systemd-sysv udev dbus kmod linux-image-cloud-amd64 initramfs-tools
	runc crun criu libcriu2 containernetworking-plugins containerd
	busybox-static iproute2 iptables openssh-server"
DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get \
	-o Dpkg::Options::=--force-unsafe-io install -y --no-install-recommends $pkgs >&2
chroot "$root" apt-get clean
echo "node image: packages installed at $(( $(date +%s) - start ))s" >&2


# Identity and filesystems.
echo crin-node >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 crin-node\n::1 localhost\n' >"$root/etc/hosts"
# No fsck at boot (every boot starts from the same clean image), so
# nothing waits for udev to announce /dev/vda.
printf '/dev/vda / ext4 rw,errors=remount-ro 0 0\n' >"$root/etc/fstab"
# A fixed machine id: an empty one makes every boot a first boot.
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$root/etc/machine-id"
echo >>"$root/etc/machine-id"
# qemu's user network is fixed (guest 10.0.2.15, host 10.0.2.2, DNS
# 10.0.2.3): a static address, no DHCP client to wait for.
printf 'nameserver 10.0.2.3\n' >"$root/etc/resolv.conf"
cat >"$root/etc/systemd/system/crin-net.service" <<'UNIT'
[Unit]
Description=qemu user network on eth0
# eth0's driver is loaded by the initramfs: no need to wait for udev.
DefaultDependencies=no
Before=network.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip link set lo up
ExecStart=/usr/sbin/ip link set eth0 up
ExecStart=/usr/sbin/ip addr add 10.0.2.15/24 dev eth0
ExecStart=/usr/sbin/ip route add default via 10.0.2.2

[Install]
WantedBy=multi-user.target
UNIT
chroot "$root" systemctl enable crin-net.service >&2
# Faster boots: nothing here needs these. containerd is installed only for
# its containerd-shim-runc-v2; its daemon never runs.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service \
	fstrim.timer dpkg-db-backup.timer; do
	chroot "$root" systemctl disable "$u" >/dev/null 2>&1 || true
done
# The image is never upgraded in place, so what runs after an update of
# /usr is done here or not at all (snapshot boots always look updated).
chroot "$root" systemctl mask containerd.service modprobe@drm.service modprobe@efi_pstore.service \
	systemd-pstore.service systemd-journal-catalog-update.service systemd-update-done.service \
	ldconfig.service systemd-hwdb-update.service getty@tty1.service serial-getty@ttyS0.service >&2
chroot "$root" journalctl --update-catalog >&2 || true
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$root/etc/systemd/journald.conf.d/crin-node.conf"
umount "$root/proc"
rm -f "$root/usr/sbin/policy-rc.d"

# Root logs in with a key made for this image only, over ssh forwarded to
# a port on the host's 127.0.0.1.
ssh-keygen -q -t ed25519 -N '' -C crin-node -f "$tmp/id_ed25519"
mkdir -p -m 700 "$root/root/.ssh"
cp "$tmp/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
chmod 600 "$root/root/.ssh/authorized_keys"
cat >"$root/etc/ssh/sshd_config.d/crin.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
MaxStartups 100
MaxSessions 100
CONF

chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' >"$tmp/packages.txt"
# The kernel and initramfs boot from outside the image (qemu -kernel).
cp "$(readlink -f "$root/vmlinuz")" "$tmp/vmlinuz"
cp "$(readlink -f "$root/initrd.img")" "$tmp/initrd.img"
chmod 644 "$tmp/vmlinuz" "$tmp/initrd.img"

# 4 GiB sparse: room for images and container layers the tests add to a
# boot's snapshot.
truncate -s 4G "$tmp/disk.img"
mkfs.ext4 -q -L crin-node -d "$root" "$tmp/disk.img" >&2
rm -rf "$root"

trap - EXIT
# Another build of the same recipe may have finished first: keep its
# image (a VM may be booting from it) and drop this one.
if ! mv -T "$tmp" "$out" 2>/dev/null; then
	rm -rf "$tmp"
fi
echo "node image: built $out in $(( $(date +%s) - start ))s ($(du -sh "$out/disk.img" | cut -f1) used)" >&2
echo "$out"
