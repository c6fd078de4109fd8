package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// allowedBindOptions are the CRI mount_options crin passes on: they only
// restrict a bind mount further.
var allowedBindOptions = []string{"noexec", "nodev", "nosuid", "noatime", "nodiratime", "relatime", "strictatime"}

// baseMountOptions tells defaultMounts what to vary.
type baseMountOptions struct {
	privileged bool
	// shmSource, when set, is bind-mounted at /dev/shm instead of a
	// private tmpfs.
	shmSource string
	// cgroup adds /sys/fs/cgroup.
	cgroup bool
}

// defaultMounts are the kernel filesystems every container gets.
func defaultMounts(o baseMountOptions) []specs.Mount {
	ro := "ro"
	if o.privileged {
		ro = "rw"
	}
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
	}
	if o.shmSource != "" {
		ms = append(ms, specs.Mount{Destination: "/dev/shm", Type: "bind", Source: o.shmSource, Options: []string{"rbind", "rprivate", "nosuid", "noexec", "nodev"}})
	} else {
		ms = append(ms, specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	}
	ms = append(ms,
		specs.Mount{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", ro}},
	)
	if o.cgroup {
		ms = append(ms, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", ro}})
	}
	return ms
}

// criMounts validates the CRI mounts and turns them into bind mounts. It
// also returns the rootfs propagation they need ("" for the runtime's
// default, which is rslave).
func criMounts(in []*runtimeapi.Mount) ([]specs.Mount, string, error) {
	var (
		out         []specs.Mount
		propagation string
	)
	seen := map[string]int{}
	for i, m := range in {
		field := fmt.Sprintf("mounts[%d]", i)
		cp, hp := m.GetContainerPath(), m.GetHostPath()
		if err := checkContainerPath(cp); err != nil {
			return nil, "", invalidf("%s.container_path %q: %s", field, cp, err)
		}
		if path.Clean(cp) == "/" {
			return nil, "", invalidf("%s.container_path %q: cannot mount over the rootfs", field, cp)
		}
		if m.GetImage().GetImage() != "" {
			// ContainerSpec turns prepared image volumes into binds first.
			return nil, "", unsupportedf("%s.image %q: the image volume was not prepared", field, m.GetImage().GetImage())
		}
		if len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0 {
			return nil, "", unsupportedf("%s.uidMappings: id-mapped mounts are not supported", field)
		}
		if err := checkContainerPath(hp); err != nil {
			return nil, "", invalidf("%s.host_path %q: %s", field, hp, err)
		}
		cp = path.Clean(cp)
		if j, dup := seen[cp]; dup {
			return nil, "", invalidf("%s.container_path %q: also the destination of mounts[%d]", field, cp, j)
		}
		seen[cp] = i

		opts := []string{"rbind"}
		switch m.GetPropagation() {
		case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
			opts = append(opts, "rprivate")
		case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			opts = append(opts, "rslave")
			if propagation == "" {
				propagation = "rslave"
			}
		case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			opts = append(opts, "rshared")
			propagation = "rshared"
		default:
			return nil, "", invalidf("%s.propagation %d: unknown", field, m.GetPropagation())
		}
		switch {
		case m.GetRecursiveReadOnly():
			if !m.GetReadonly() {
				return nil, "", invalidf("%s.recursive_read_only: needs readonly", field)
			}
			if m.GetPropagation() != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
				return nil, "", invalidf("%s.recursive_read_only: needs private propagation", field)
			}
			opts = append(opts, "rro")
		case m.GetReadonly():
			opts = append(opts, "ro")
		default:
			opts = append(opts, "rw")
		}
		for j, o := range m.GetMountOptions() {
			if !slices.Contains(allowedBindOptions, o) {
				return nil, "", invalidf("%s.mount_options[%d] %q: not one of %s", field, j, o, strings.Join(allowedBindOptions, ", "))
			}
			if !slices.Contains(opts, o) {
				opts = append(opts, o)
			}
		}
		// SELinux relabelling is not done: crin does not run with SELinux.
		out = append(out, specs.Mount{Destination: cp, Type: "bind", Source: path.Clean(hp), Options: opts})
	}
	return out, propagation, nil
}

// fileMount bind-mounts one host file (hostname, hosts, resolv.conf).
func fileMount(dst, src string, readonly bool) specs.Mount {
	rw := "rw"
	if readonly {
		rw = "ro"
	}
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", rw}}
}

// orderMounts sorts mounts so a parent is always mounted before what is
// mounted beneath it, keeping the given order otherwise.
func orderMounts(ms []specs.Mount) {
	depth := func(p string) int {
		p = path.Clean(p)
		if p == "/" {
			return 0
		}
		return strings.Count(p, "/")
	}
	slices.SortStableFunc(ms, func(a, b specs.Mount) int { return depth(a.Destination) - depth(b.Destination) })
}

// hasMount reports whether ms mounts something at dst.
func hasMount(ms []specs.Mount, dst string) bool {
	return slices.ContainsFunc(ms, func(m specs.Mount) bool { return m.Destination == dst })
}
