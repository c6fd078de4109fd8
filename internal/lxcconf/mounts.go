package lxcconf

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// refusedMountOptions are OCI mount options LXC's lxc.mount.entry does
// not understand (it would hand them to mount(2) as file system data).
var refusedMountOptions = []string{"tmpcopyup", "rrw", "idmap", "ridmap", "nosymfollow", "symfollow", "rnosymfollow", "rsymfollow"}

// mounts are the spec's mounts as lxc.mount.entry lines (fstab format,
// targets relative to the rootfs), in the spec's order. Two are LXC's
// own instead: /dev/pts (a devpts instance LXC makes, lxc.pty.max) and
// the cgroup file system (lxc.mount.auto = cgroup, which mounts the
// container's view of every hierarchy, v1 or v2).
func (t *translator) mounts() error {
	for i, m := range t.s.Mounts {
		field := fmt.Sprintf("mounts[%d]", i)
		dst := path.Clean("/" + m.Destination)
		if !path.IsAbs(m.Destination) {
			return unsupported(field+".destination", "%q is not absolute", m.Destination)
		}
		if dst == "/" {
			return unsupported(field+".destination", "a mount on / is not supported by lxc")
		}
		if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
			return unsupported(field+".uidMappings", "id-mapped mounts are not supported by crin-lxc")
		}
		for _, o := range m.Options {
			if slices.Contains(refusedMountOptions, o) {
				return unsupported(field+".options", "option %q is not supported by lxc", o)
			}
		}
		switch {
		case m.Type == "devpts" && dst == "/dev/pts":
			continue
		case m.Type == "cgroup" || m.Type == "cgroup2":
			mode := "rw"
			if slices.Contains(m.Options, "ro") {
				mode = "ro"
			}
			if dst != "/sys/fs/cgroup" {
				return unsupported(field+".destination", "lxc mounts cgroup file systems at /sys/fs/cgroup only, not %q", dst)
			}
			t.add("lxc.mount.auto", "cgroup:"+mode)
			// LXC shows the container its own cgroup at the root of
			// each hierarchy (as runc's bind mounts do) only from a
			// cgroup namespace of its own.
			if !slices.Contains(t.clone, "cgroup") {
				t.clone = append(t.clone, "cgroup")
			}
			continue
		}
		entry, err := t.mountEntry(field, m, dst)
		if err != nil {
			return err
		}
		t.add("lxc.mount.entry", entry)
	}
	return t.maskedPaths()
}

func (t *translator) mountEntry(field string, m specs.Mount, dst string) (string, error) {
	bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
	typ, src := m.Type, m.Source
	if bind {
		typ = "none"
		if !path.IsAbs(src) {
			src = path.Join(t.o.Bundle, src)
		}
	}
	if typ == "" {
		return "", unsupported(field+".type", "a mount that is not a bind mount needs a type")
	}
	if src == "" {
		src = typ
	}
	opts := slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "" || strings.HasPrefix(o, "create=") })
	// rro: LXC makes the mount itself read-only, the start-host hook
	// its submounts (maskedPaths).
	if i := slices.Index(opts, "rro"); i >= 0 {
		opts[i] = "ro"
		t.c.RecursiveReadonly = append(t.c.RecursiveReadonly, dst)
	}
	create := "create=dir"
	if bind {
		if exists, dir := t.stat(src); exists && !dir {
			create = "create=file"
		}
		if !slices.Contains(opts, "bind") && !slices.Contains(opts, "rbind") {
			opts = append(opts, "bind")
		}
	}
	opts = append(opts, create)
	// liblxc applies a bind mount's flags only with ro: the start-host
	// hook remounts it with them all (maskedPaths).
	if bind {
		if flags := bindFlags(opts); flags&^unix.MS_RDONLY != 0 {
			t.c.BindRemounts = append(t.c.BindRemounts, BindRemount{Path: dst, Flags: flags})
		}
	}
	for _, s := range []string{src, dst, typ} {
		if strings.ContainsRune(s, 0) {
			return "", unsupported(field, "a NUL in %q", s)
		}
	}
	for _, o := range opts {
		if strings.ContainsAny(o, " \t\n\\") {
			return "", unsupported(field+".options", "%q cannot be written in an lxc.mount.entry", o)
		}
	}
	return fstabEntry(src, dst, typ, opts), nil
}

// BindRemount is a bind mount the start-host hook remounts with Flags
// (MS_* flags: MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, the atime ones).
type BindRemount struct {
	Path  string
	Flags uint64
}

var bindFlagOptions = map[string]uint64{
	"ro": unix.MS_RDONLY, "nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC,
	"noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME, "relatime": unix.MS_RELATIME,
	"strictatime": unix.MS_STRICTATIME,
}

// bindFlags are the per-mount flags opts ask for.
func bindFlags(opts []string) uint64 {
	var f uint64
	for _, o := range opts {
		f |= bindFlagOptions[o]
	}
	return f
}

// fstabEntry is one lxc.mount.entry value: the target relative to the
// rootfs, white space and backslashes escaped as getmntent reads them.
func fstabEntry(src, dst, typ string, opts []string) string {
	return fmt.Sprintf("%s %s %s %s 0 0", fstabEscape(src), fstabEscape(strings.TrimPrefix(dst, "/")), fstabEscape(typ), strings.Join(opts, ","))
}

func fstabEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (t *translator) stat(p string) (exists, dir bool) {
	if t.h.Stat == nil {
		return false, false
	}
	return t.h.Stat(p)
}

// maskedPaths: a masked dir gets an empty read-only tmpfs over it, a
// masked file /dev/null; paths missing in the container are skipped
// (optional), as runc does. Read-only paths are made read-only by a
// start-host hook (Options.ReadonlyHook), after liblxc wrote the spec's
// sysctls: a mount entry would make /proc/sys read-only before that.
func (t *translator) maskedPaths() error {
	l := t.s.Linux
	for i, p := range l.MaskedPaths {
		field := fmt.Sprintf("linux.maskedPaths[%d]", i)
		if !path.IsAbs(p) || strings.ContainsAny(p, "\n\x00") {
			return unsupported(field, "%q is not an absolute path", p)
		}
		exists, dir := t.stat(p)
		switch {
		case !exists:
		case dir:
			t.add("lxc.mount.entry", fstabEntry("tmpfs", p, "tmpfs", []string{"ro", "optional"}))
		default:
			t.add("lxc.mount.entry", fstabEntry("/dev/null", p, "none", []string{"bind", "optional"}))
		}
	}
	for i, p := range l.ReadonlyPaths {
		field := fmt.Sprintf("linux.readonlyPaths[%d]", i)
		if !path.IsAbs(p) || strings.ContainsAny(p, "\n\x00") {
			return unsupported(field, "%q is not an absolute path", p)
		}
		t.c.ReadonlyPaths = append(t.c.ReadonlyPaths, path.Clean(p))
	}
	if len(t.c.ReadonlyPaths) > 0 || len(t.c.RecursiveReadonly) > 0 || len(t.c.BindRemounts) > 0 {
		if t.o.ReadonlyHook == "" {
			return unsupported("linux.readonlyPaths", "no hook to make them read-only with")
		}
		t.add("lxc.hook.start-host", t.o.ReadonlyHook)
	}
	return nil
}

// defaultDevices are the nodes every container gets.
var defaultDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// devices are bind mounts of the host's nodes of the same type and
// numbers (at the same path, or any other): LXC creates no device nodes
// outside its autodev set. The node keeps the host's mode and owner.
func (t *translator) devices() error {
	listed := map[string]bool{}
	for _, d := range t.s.Linux.Devices {
		listed[path.Clean(d.Path)] = true
	}
	// The devices every container has (runc makes them whatever the
	// spec lists): the host's own nodes.
	for _, p := range defaultDevices {
		if !listed[p] {
			t.add("lxc.mount.entry", fstabEntry(p, p, "none", []string{"bind", "create=file"}))
		}
	}
	for i, d := range t.s.Linux.Devices {
		field := fmt.Sprintf("linux.devices[%d]", i)
		typ := d.Type
		if typ == "u" {
			typ = "c"
		}
		if typ != "c" && typ != "b" {
			return unsupported(field+".type", "%q: crin-lxc passes character and block devices only", d.Type)
		}
		p := path.Clean(d.Path)
		if !path.IsAbs(d.Path) || strings.ContainsAny(p, "\n\x00") {
			return unsupported(field+".path", "%q is not an absolute path", d.Path)
		}
		src := ""
		if t.h.Device != nil {
			src = t.h.Device(p, typ[0], d.Major, d.Minor)
		}
		if src == "" {
			return unsupported(field, "%s: the host has no %s node %d:%d to bind mount (lxc makes no device nodes)", p, typ, d.Major, d.Minor)
		}
		t.add("lxc.mount.entry", fstabEntry(src, p, "none", []string{"bind", "create=file"}))
	}
	return nil
}
