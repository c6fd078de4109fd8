package oci

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// How Fit decides:
//
//   - Fields the runtime spec added in a version above the runtime's
//     ociVersionMax are refused when runtimes of that age really lack them
//     (personality, scheduler, I/O priority, exec CPU affinity, time offsets,
//     id-mapped mounts, memory policy, net devices, RDT schemata and
//     monitoring, CPU burst).
//   - A few fields runtimes implemented before the spec release that named
//     them (unified cgroup v2 files, errnoRet, defaultErrnoRet, cpu idle,
//     domainname, checkBeforeUpdate) only raise the version wanted: runc 1.1
//     supports them while reporting 1.0.2-dev.
//   - Where the features document lists what the runtime recognises (hooks,
//     mount options, namespaces, seccomp actions, operators, architectures
//     and flags, capabilities) the list decides; nil lists mean unknown.
//   - ociVersion becomes the lowest version the content needs, raised to
//     ociVersionMin and lowered to ociVersionMax.

// conservativeFeatures stands for a runtime that reports nothing.
var conservativeFeatures = features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.2"}

// genericMountOptions are the mount options a runtime interprets itself
// (as opposed to filesystem data passed to mount(2)); only these are
// checked against features.mountOptions.
var genericMountOptions = []string{
	"acl", "async", "atime", "bind", "defaults", "dev", "diratime", "dirsync",
	"exec", "iversion", "lazytime", "loud", "mand", "noacl", "noatime", "nodev",
	"nodiratime", "noexec", "noiversion", "nolazytime", "nomand", "norelatime",
	"nostrictatime", "nosuid", "nosymfollow", "private", "ratime", "rbind",
	"rdev", "rdiratime", "relatime", "remount", "rexec", "rnoatime", "rnodev",
	"rnodiratime", "rnoexec", "rnorelatime", "rnostrictatime", "rnosuid",
	"rnosymfollow", "ro", "rprivate", "rrelatime", "rro", "rrw", "rshared",
	"rslave", "rstrictatime", "rsuid", "rsymfollow", "runbindable", "rw",
	"shared", "silent", "slave", "strictatime", "suid", "symfollow", "sync",
	"tmpcopyup", "unbindable", "idmap", "ridmap",
}

var knownNamespaces = []specs.LinuxNamespaceType{
	specs.PIDNamespace, specs.NetworkNamespace, specs.MountNamespace, specs.IPCNamespace,
	specs.UTSNamespace, specs.UserNamespace, specs.CgroupNamespace, specs.TimeNamespace,
}

// ociVersion is a parsed runtime-spec version ("1.0.2-dev").
type ociVersion struct {
	major, minor, patch int
	pre                 string
}

func parseOCIVersion(s string) (ociVersion, error) {
	core, pre, _ := strings.Cut(s, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return ociVersion{}, fmt.Errorf("%q: not a version like 1.0.2", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return ociVersion{}, fmt.Errorf("%q: not a version like 1.0.2", s)
		}
		n[i] = v
	}
	return ociVersion{major: n[0], minor: n[1], patch: n[2], pre: pre}, nil
}

func mustVersion(s string) ociVersion {
	v, err := parseOCIVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// compare orders versions as semver does: a pre-release sorts before its
// release.
func (v ociVersion) compare(w ociVersion) int {
	for _, d := range []int{v.major - w.major, v.minor - w.minor, v.patch - w.patch} {
		if d != 0 {
			return d
		}
	}
	switch {
	case v.pre == w.pre:
		return 0
	case v.pre == "":
		return 1
	case w.pre == "":
		return -1
	}
	return strings.Compare(v.pre, w.pre)
}

// fitter collects what a spec needs while checking it against features.
type fitter struct {
	f    *features.Features
	max  ociVersion
	need ociVersion
}

// require refuses field unless the runtime's version reaches intro.
func (ft *fitter) require(field, intro string) error {
	v := mustVersion(intro)
	if ft.max.compare(v) < 0 {
		return unsupportedf("%s: needs OCI runtime spec %s, the runtime supports up to %s", field, intro, ft.f.OCIVersionMax)
	}
	ft.note(intro)
	return nil
}

// note raises the version the spec needs without refusing anything.
func (ft *fitter) note(intro string) {
	if v := mustVersion(intro); ft.need.compare(v) < 0 {
		ft.need = v
	}
}

// enabled refuses field unless the runtime says it supports it.
func enabled(field string, b *bool) error {
	if b == nil || !*b {
		return unsupportedf("%s: not supported by the runtime", field)
	}
	return nil
}

// notDisabled refuses field only if the runtime says it lacks it.
func notDisabled(field string, b *bool) error {
	if b != nil && !*b {
		return unsupportedf("%s: not supported by the runtime", field)
	}
	return nil
}

// listed refuses v when list is known and lacks it.
func listed[T ~string](field string, list []string, v T) error {
	if list != nil && !slices.Contains(list, string(v)) {
		return unsupportedf("%s %q: not supported by the runtime", field, v)
	}
	return nil
}

// Fit adapts s to what the runtime accepts: sets ociVersion to one within
// [OCIVersionMin, OCIVersionMax] and returns errdefs.ErrNotImplemented naming
// the field when s uses a field the runtime would ignore or refuse (for
// example linux.intelRdt on a runtime without RDT support, scheduler, I/O
// priority, memory policy or net devices on runc 1.1). f may be nil, meaning
// a conservative OCI 1.0 runtime. Capabilities the runtime does not know are
// removed rather than refused. s is left unchanged when Fit fails.
func Fit(s *specs.Spec, f *features.Features) error {
	if s == nil {
		return invalidf("spec: missing")
	}
	if f == nil {
		f = &conservativeFeatures
	}
	lo, err := parseOCIVersion(f.OCIVersionMin)
	if err != nil {
		return invalidf("features ociVersionMin: %v", err)
	}
	hi, err := parseOCIVersion(f.OCIVersionMax)
	if err != nil {
		return invalidf("features ociVersionMax: %v", err)
	}
	if lo.major != 1 || hi.major != 1 || hi.compare(lo) < 0 {
		return unsupportedf("runtime OCI versions [%s, %s]: crin writes 1.x specs", f.OCIVersionMin, f.OCIVersionMax)
	}
	fl := f.Linux
	if fl == nil {
		fl = &features.Linux{}
	}
	ft := &fitter{f: f, max: hi, need: mustVersion("1.0.0")}

	if err := fitProcess(ft, fl, s.Process); err != nil {
		return err
	}
	if err := fitHooks(ft, s.Hooks); err != nil {
		return err
	}
	if err := fitMounts(ft, fl, s.Mounts); err != nil {
		return err
	}
	if s.Domainname != "" {
		ft.note("1.1.0")
	}
	if err := fitLinux(ft, fl, s.Linux); err != nil {
		return err
	}

	// Everything is accepted: adapt.
	fitSeccompArchs(s, fl)
	if s.Process != nil && s.Process.Capabilities != nil && fl.Capabilities != nil {
		c := s.Process.Capabilities
		keep := func(l []string) []string {
			return slices.DeleteFunc(slices.Clone(l), func(n string) bool { return !slices.Contains(fl.Capabilities, n) })
		}
		c.Bounding, c.Effective, c.Permitted = keep(c.Bounding), keep(c.Effective), keep(c.Permitted)
		c.Inheritable, c.Ambient = keep(c.Inheritable), keep(c.Ambient)
	}
	switch {
	case ft.need.compare(lo) <= 0:
		s.Version = f.OCIVersionMin
	case ft.need.compare(hi) >= 0:
		s.Version = f.OCIVersionMax
	default:
		s.Version = fmt.Sprintf("%d.%d.%d", ft.need.major, ft.need.minor, ft.need.patch)
	}
	return nil
}

// fitSeccompArchs drops from the seccomp filter the architectures the
// runtime does not list (fitLinux accepted the filter only if the native
// one is listed).
func fitSeccompArchs(s *specs.Spec, fl *features.Linux) {
	if s.Linux == nil || s.Linux.Seccomp == nil || fl.Seccomp == nil || fl.Seccomp.Archs == nil {
		return
	}
	sc := s.Linux.Seccomp
	sc.Architectures = slices.DeleteFunc(slices.Clone(sc.Architectures), func(a specs.Arch) bool {
		return !slices.Contains(fl.Seccomp.Archs, string(a))
	})
}

func fitProcess(ft *fitter, fl *features.Linux, p *specs.Process) error {
	if p == nil {
		return nil
	}
	if p.Scheduler != nil {
		if err := ft.require("process.scheduler", "1.1.0"); err != nil {
			return err
		}
	}
	if p.IOPriority != nil {
		if err := ft.require("process.ioPriority", "1.1.0"); err != nil {
			return err
		}
	}
	if p.ExecCPUAffinity != nil {
		if err := ft.require("process.execCPUAffinity", "1.2.1"); err != nil {
			return err
		}
	}
	if p.ApparmorProfile != "" && fl.Apparmor != nil {
		if err := notDisabled("process.apparmorProfile", fl.Apparmor.Enabled); err != nil {
			return err
		}
	}
	if p.SelinuxLabel != "" && fl.Selinux != nil {
		if err := notDisabled("process.selinuxLabel", fl.Selinux.Enabled); err != nil {
			return err
		}
	}
	return nil
}

func fitHooks(ft *fitter, h *specs.Hooks) error {
	if h == nil {
		return nil
	}
	for _, k := range []struct {
		name  string
		n     int
		intro string
	}{
		{"prestart", len(h.Prestart), "1.0.0"}, //nolint:staticcheck // NRI plugins may still add prestart hooks; runc runs them
		{"createRuntime", len(h.CreateRuntime), "1.0.2"},
		{"createContainer", len(h.CreateContainer), "1.0.2"},
		{"startContainer", len(h.StartContainer), "1.0.2"},
		{"poststart", len(h.Poststart), "1.0.0"},
		{"poststop", len(h.Poststop), "1.0.0"},
	} {
		if k.n == 0 {
			continue
		}
		field := "hooks." + k.name
		if ft.f.Hooks != nil {
			if err := listed(field, ft.f.Hooks, k.name); err != nil {
				return err
			}
			ft.note(k.intro)
			continue
		}
		if err := ft.require(field, k.intro); err != nil {
			return err
		}
	}
	return nil
}

func fitMounts(ft *fitter, fl *features.Linux, ms []specs.Mount) error {
	for i, m := range ms {
		field := fmt.Sprintf("mounts[%d] (%s)", i, m.Destination)
		for _, o := range m.Options {
			if o == "idmap" || o == "ridmap" {
				if err := ft.require(field+" option "+o, "1.2.0"); err != nil {
					return err
				}
			}
			if slices.Contains(genericMountOptions, o) {
				if err := listed(field+" option", ft.f.MountOptions, o); err != nil {
					return err
				}
			}
		}
		if len(m.UIDMappings) > 0 || len(m.GIDMappings) > 0 {
			if err := ft.require(field+".uidMappings", "1.1.0"); err != nil {
				return err
			}
			var on *bool
			if fl.MountExtensions != nil && fl.MountExtensions.IDMap != nil {
				on = fl.MountExtensions.IDMap.Enabled
			}
			if err := enabled(field+".uidMappings", on); err != nil {
				return err
			}
		}
		if !strings.HasPrefix(m.Destination, "/") {
			if err := ft.require(field+".destination (relative)", "1.2.0"); err != nil {
				return err
			}
		}
	}
	return nil
}

func fitLinux(ft *fitter, fl *features.Linux, l *specs.Linux) error {
	if l == nil {
		return nil
	}
	for i, n := range l.Namespaces {
		field := fmt.Sprintf("linux.namespaces[%d].type", i)
		if !slices.Contains(knownNamespaces, n.Type) {
			return unsupportedf("%s %q: unknown namespace", field, n.Type)
		}
		if err := listed(field, fl.Namespaces, n.Type); err != nil {
			return err
		}
		if n.Type == specs.TimeNamespace {
			if err := ft.require(field+" time", "1.1.0"); err != nil {
				return err
			}
		}
	}
	if len(l.TimeOffsets) > 0 {
		if err := ft.require("linux.timeOffsets", "1.1.0"); err != nil {
			return err
		}
		if err := listed("linux.timeOffsets: namespace", fl.Namespaces, specs.TimeNamespace); err != nil {
			return err
		}
	}
	if l.Personality != nil {
		if err := ft.require("linux.personality", "1.0.2"); err != nil {
			return err
		}
	}
	if l.IntelRdt != nil {
		if err := fitIntelRdt(ft, fl, l.IntelRdt); err != nil {
			return err
		}
	}
	if l.MemoryPolicy != nil {
		if err := ft.require("linux.memoryPolicy", "1.3.0"); err != nil {
			return err
		}
		if fl.MemoryPolicy == nil {
			return unsupportedf("linux.memoryPolicy: not supported by the runtime")
		}
		if err := listed("linux.memoryPolicy.mode", fl.MemoryPolicy.Modes, l.MemoryPolicy.Mode); err != nil {
			return err
		}
		for _, fg := range l.MemoryPolicy.Flags {
			if err := listed("linux.memoryPolicy.flags", fl.MemoryPolicy.Flags, fg); err != nil {
				return err
			}
		}
	}
	if len(l.NetDevices) > 0 {
		if err := ft.require("linux.netDevices", "1.3.0"); err != nil {
			return err
		}
		var on *bool
		if fl.NetDevices != nil {
			on = fl.NetDevices.Enabled
		}
		if err := enabled("linux.netDevices", on); err != nil {
			return err
		}
	}
	if err := fitResources(ft, fl, l.Resources); err != nil {
		return err
	}
	if l.Seccomp != nil {
		if err := fitSeccomp(ft, fl, l.Seccomp); err != nil {
			return err
		}
	}
	return nil
}

func fitIntelRdt(ft *fitter, fl *features.Linux, r *specs.LinuxIntelRdt) error {
	rdt := fl.IntelRdt
	if rdt == nil {
		rdt = &features.IntelRdt{}
	}
	if err := enabled("linux.intelRdt", rdt.Enabled); err != nil {
		return err
	}
	if len(r.Schemata) > 0 {
		if err := ft.require("linux.intelRdt.schemata", "1.3.0"); err != nil {
			return err
		}
		if err := enabled("linux.intelRdt.schemata", rdt.Schemata); err != nil {
			return err
		}
	}
	if r.EnableMonitoring {
		if err := ft.require("linux.intelRdt.enableMonitoring", "1.3.0"); err != nil {
			return err
		}
		if err := enabled("linux.intelRdt.enableMonitoring", rdt.Monitoring); err != nil {
			return err
		}
	}
	if r.ClosID != "" || r.MemBwSchema != "" {
		ft.note("1.0.2")
	}
	return nil
}

func fitResources(ft *fitter, fl *features.Linux, r *specs.LinuxResources) error {
	if r == nil {
		return nil
	}
	if len(r.Unified) > 0 {
		if fl.Cgroup != nil {
			if err := notDisabled("linux.resources.unified", fl.Cgroup.V2); err != nil {
				return err
			}
		}
		ft.note("1.1.0")
	}
	if r.CPU != nil {
		if r.CPU.Burst != nil {
			if err := ft.require("linux.resources.cpu.burst", "1.1.0"); err != nil {
				return err
			}
		}
		if r.CPU.Idle != nil {
			ft.note("1.1.0")
		}
	}
	if r.Memory != nil && r.Memory.CheckBeforeUpdate != nil {
		ft.note("1.1.0")
	}
	if len(r.Rdma) > 0 && fl.Cgroup != nil {
		if err := notDisabled("linux.resources.rdma", fl.Cgroup.Rdma); err != nil {
			return err
		}
	}
	return nil
}

// seccompActionIntro is the spec version that introduced each action.
var seccompActionIntro = map[specs.LinuxSeccompAction]string{
	specs.ActKill: "1.0.0", specs.ActTrap: "1.0.0", specs.ActErrno: "1.0.0",
	specs.ActTrace: "1.0.0", specs.ActAllow: "1.0.0", specs.ActLog: "1.0.2",
	specs.ActKillProcess: "1.1.0", specs.ActKillThread: "1.1.0", specs.ActNotify: "1.1.0",
}

func fitSeccomp(ft *fitter, fl *features.Linux, s *specs.LinuxSeccomp) error {
	sf := fl.Seccomp
	if sf == nil {
		sf = &features.Seccomp{}
	}
	if err := notDisabled("linux.seccomp", sf.Enabled); err != nil {
		return err
	}
	action := func(field string, a specs.LinuxSeccompAction) error {
		intro, ok := seccompActionIntro[a]
		if !ok {
			return unsupportedf("%s %q: unknown seccomp action", field, a)
		}
		if sf.Actions != nil {
			ft.note(intro)
			return listed(field, sf.Actions, a)
		}
		return ft.require(fmt.Sprintf("%s %q", field, a), intro)
	}
	if err := action("linux.seccomp.defaultAction", s.DefaultAction); err != nil {
		return err
	}
	if s.DefaultErrnoRet != nil {
		ft.note("1.1.0")
	}
	kept := 0
	for _, a := range s.Architectures {
		if !slices.Contains(seccompArchs, a) {
			return unsupportedf("linux.seccomp.architectures %q: unknown architecture", a)
		}
		if sf.Archs == nil || slices.Contains(sf.Archs, string(a)) {
			kept++
			continue
		}
		// A compat architecture the runtime cannot filter is dropped
		// (fitSeccompArchs): its system calls then meet the filter's
		// bad-architecture action, which kills, so the filter only
		// narrows. gVisor, which runs no 32-bit code, lists x86_64
		// alone, and the default profile names x86 and x32 too.
		if a == nativeArchs()[0] {
			return listed("linux.seccomp.architectures", sf.Archs, a)
		}
	}
	if kept == 0 && len(s.Architectures) > 0 {
		return unsupportedf("linux.seccomp.architectures %q: none supported by the runtime", s.Architectures)
	}
	for _, fg := range s.Flags {
		if !slices.Contains(seccompFlags, fg) {
			return unsupportedf("linux.seccomp.flags %q: unknown flag", fg)
		}
		list := sf.SupportedFlags
		if list == nil {
			list = sf.KnownFlags
		}
		intro := "1.0.2"
		if fg == specs.LinuxSeccompFlagWaitKillableRecv {
			intro = "1.1.0"
		}
		if list != nil {
			ft.note(intro)
			if err := listed("linux.seccomp.flags", list, fg); err != nil {
				return err
			}
		} else if err := ft.require(fmt.Sprintf("linux.seccomp.flags %q", fg), intro); err != nil {
			return err
		}
	}
	for i, sc := range s.Syscalls {
		field := fmt.Sprintf("linux.seccomp.syscalls[%d]", i)
		if err := action(field+".action", sc.Action); err != nil {
			return err
		}
		if sc.ErrnoRet != nil {
			ft.note("1.1.0")
		}
		for j, a := range sc.Args {
			f := fmt.Sprintf("%s.args[%d].op", field, j)
			if !slices.Contains(seccompOperators, a.Op) {
				return unsupportedf("%s %q: unknown seccomp operator", f, a.Op)
			}
			if err := listed(f, sf.Operators, a.Op); err != nil {
				return err
			}
		}
	}
	return nil
}
