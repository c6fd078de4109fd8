package oci

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// knownCapabilities are the Linux capabilities up to CAP_CHECKPOINT_RESTORE
// (Linux 5.9), in kernel order; "ALL" means these.
var knownCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// defaultCapabilities is what an unprivileged container starts with: the
// set container engines have given by default for a decade, which
// Kubernetes workloads are written against.
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// defaultMaskedPaths hide host information and kernel knobs under /proc
// and /sys.
var defaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore",
	"/proc/keys", "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi",
	"/proc/timer_list", "/proc/timer_stats", "/sys/devices/virtual/powercap",
	"/sys/firmware",
}

// defaultReadonlyPaths are read-only for unprivileged containers.
var defaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// capabilitiesFromMask lists the known capabilities whose bits are set
// (bit n is capability number n, the order of knownCapabilities).
func capabilitiesFromMask(mask uint64) []string {
	out := []string{}
	for i, c := range knownCapabilities {
		if mask&(1<<i) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// heldCapabilities are those of caps that crind itself can grant.
func heldCapabilities(caps []string, host *Host) []string {
	if host.Capabilities == nil {
		return slices.Clone(caps)
	}
	return slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return !slices.Contains(host.Capabilities, c) })
}

// capabilityName normalises a CRI capability ("net_admin", "CAP_NET_ADMIN")
// and reports whether it is known.
func capabilityName(s string) (string, bool) {
	n := strings.ToUpper(s)
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	return n, slices.Contains(knownCapabilities, n)
}

// containerCapabilities applies add_capabilities and drop_capabilities to
// the default set. "ALL" in add starts from every capability, "ALL" in drop
// from none; then the named ones are added, then the named ones dropped.
// "ALL", privileged and the defaults mean those crind holds itself; naming
// one it lacks is an error, since the runtime could not grant it.
func containerCapabilities(c *runtimeapi.Capability, privileged bool, host *Host) (*specs.LinuxCapabilities, error) {
	const field = "linux.security_context.capabilities"
	all := heldCapabilities(knownCapabilities, host)
	if privileged {
		return &specs.LinuxCapabilities{Bounding: all, Effective: slices.Clone(all), Permitted: slices.Clone(all)}, nil
	}
	set := heldCapabilities(defaultCapabilities, host)
	var add, drop []string
	for i, s := range c.GetAddCapabilities() {
		if strings.EqualFold(s, "ALL") {
			set = slices.Clone(all)
			continue
		}
		n, ok := capabilityName(s)
		if !ok {
			return nil, invalidf("%s.add_capabilities[%d] %q: unknown capability", field, i, s)
		}
		if !slices.Contains(all, n) {
			return nil, invalidf("%s.add_capabilities[%d] %q: not in crind's own capability bounding set", field, i, s)
		}
		add = append(add, n)
	}
	for i, s := range c.GetDropCapabilities() {
		if strings.EqualFold(s, "ALL") {
			set = nil
			continue
		}
		n, ok := capabilityName(s)
		if !ok {
			return nil, invalidf("%s.drop_capabilities[%d] %q: unknown capability", field, i, s)
		}
		drop = append(drop, n)
	}
	for _, n := range add {
		if !slices.Contains(set, n) {
			set = append(set, n)
		}
	}
	set = slices.DeleteFunc(set, func(n string) bool { return slices.Contains(drop, n) })

	var ambient []string
	for i, s := range c.GetAddAmbientCapabilities() {
		n, ok := capabilityName(s)
		if !ok || strings.EqualFold(s, "ALL") {
			return nil, invalidf("%s.add_ambient_capabilities[%d] %q: unknown capability", field, i, s)
		}
		if !slices.Contains(set, n) {
			return nil, invalidf("%s.add_ambient_capabilities[%d] %q: not in the container's capabilities", field, i, s)
		}
		ambient = append(ambient, n)
	}
	caps := &specs.LinuxCapabilities{
		Bounding:  set,
		Effective: slices.Clone(set),
		Permitted: slices.Clone(set),
	}
	if len(ambient) > 0 {
		// The kernel keeps an ambient capability only while it is also
		// inheritable.
		caps.Ambient = ambient
		caps.Inheritable = slices.Clone(ambient)
	}
	return caps, nil
}

// hasCapability reports whether the process keeps capability n.
func hasCapability(c *specs.LinuxCapabilities, n string) bool {
	return c != nil && slices.Contains(c.Effective, n)
}

// checkPathList validates masked_paths or readonly_paths.
func checkPathList(field string, in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for i, p := range in {
		if err := checkContainerPath(p); err != nil {
			return nil, invalidf("%s[%d] %q: %s", field, i, p, err)
		}
		out = append(out, path.Clean(p))
	}
	return out, nil
}

// checkContainerPath says what is wrong with a path inside a container.
func checkContainerPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty")
	case !path.IsAbs(p):
		return fmt.Errorf("not absolute")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("contains a NUL byte")
	case hasDotDot(p):
		return fmt.Errorf("contains \"..\"")
	}
	return nil
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// apparmorProfile returns the process's AppArmor profile. RuntimeDefault
// and Unconfined leave it empty (crin loads no profile of its own); a
// Localhost profile needs AppArmor on the host.
func apparmorProfile(field string, p *runtimeapi.SecurityProfile, legacy string, host *Host, privileged bool) (string, error) {
	var name string
	switch {
	case p != nil:
		if p.GetProfileType() != runtimeapi.SecurityProfile_Localhost {
			return "", nil
		}
		name = p.GetLocalhostRef()
		if name == "" {
			return "", invalidf("%s.localhost_ref: empty for a Localhost profile", field)
		}
	case legacy == "", legacy == "runtime/default", legacy == "unconfined":
		return "", nil
	case strings.HasPrefix(legacy, "localhost/"):
		name = strings.TrimPrefix(legacy, "localhost/")
	default:
		return "", invalidf("%s %q: not a known AppArmor profile", field, legacy)
	}
	if !host.AppArmor {
		return "", invalidf("%s %q: AppArmor is not enabled on this host", field, name)
	}
	if privileged {
		return "", nil
	}
	if strings.ContainsAny(name, "\x00\n") {
		return "", invalidf("%s %q: not a valid profile name", field, name)
	}
	return name, nil
}
