package oci

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// linuxFields applies the linux fields other than devices and resources.
func (a *adjuster) linuxFields(adj *api.ContainerAdjustment) error {
	l := adj.GetLinux()
	if l == nil {
		return nil
	}
	for _, step := range []func(*api.LinuxContainerAdjustment) error{
		a.cgroupsPath, a.oomScoreAdj, a.ioPriority, a.seccomp, a.namespaces,
		a.sysctls, a.netDevices, a.scheduler, a.rdt, a.memoryPolicy,
	} {
		if err := step(l); err != nil {
			return err
		}
	}
	return nil
}

// systemdCgroupsPath is runc's "slice:prefix:name" form.
var systemdCgroupsPath = regexp.MustCompile(`^[^:/]*:[^:/]*:[^:/]+$`)

func (a *adjuster) cgroupsPath(l *api.LinuxContainerAdjustment) error {
	p := l.CgroupsPath
	if p == "" {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).CgroupsPathOwner)
	cur := a.linux().CgroupsPath
	switch {
	case systemdCgroupsPath.MatchString(cur):
		// The runtime uses the systemd driver: only its form means anything.
		if !systemdCgroupsPath.MatchString(p) || slices.Contains(strings.Split(p, ":"), "..") {
			return a.fail(plugin, invalidf("linux.cgroupsPath %q: not a systemd slice:prefix:name path, as the current %q is", p, cur))
		}
	case !path.IsAbs(p) || path.Clean(p) != p || hasDotDot(p) || p == "/" || strings.IndexByte(p, 0) >= 0:
		return a.fail(plugin, invalidf("linux.cgroupsPath %q: not a clean absolute path below the cgroup root", p))
	}
	a.s.Linux.CgroupsPath = p
	return nil
}

func (a *adjuster) oomScoreAdj(l *api.LinuxContainerAdjustment) error {
	if l.OomScoreAdj == nil {
		return nil
	}
	v, err := clampOOMScoreAdj("process.oomScoreAdj", l.OomScoreAdj.Value, a.o.OOMScoreAdjMin)
	if err != nil {
		return a.fail(a.owner((*api.OwningPlugins).OomScoreAdjOwner), err)
	}
	a.process().OOMScoreAdj = &v
	return nil
}

func (a *adjuster) ioPriority(l *api.LinuxContainerAdjustment) error {
	p := l.IoPriority
	if p == nil {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).IOPriorityOwner)
	const field = "process.ioPriority"
	switch p.Class {
	case api.IOPrioClass_IOPRIO_CLASS_NONE:
		// No class: the kernel derives one from the CPU nice value, as
		// with no ioPriority at all.
		a.process().IOPriority = nil
		return nil
	case api.IOPrioClass_IOPRIO_CLASS_RT, api.IOPrioClass_IOPRIO_CLASS_BE, api.IOPrioClass_IOPRIO_CLASS_IDLE:
	default:
		return a.fail(plugin, invalidf("%s.class %d: unknown", field, p.Class))
	}
	if p.Priority < 0 || p.Priority > 7 {
		return a.fail(plugin, invalidf("%s.priority %d: not within [0, 7]", field, p.Priority))
	}
	if err := a.rt.needs(field, "1.1.0"); err != nil {
		return a.fail(plugin, err)
	}
	a.process().IOPriority = p.ToOCI()
	return nil
}

func (a *adjuster) seccomp(l *api.LinuxContainerAdjustment) error {
	p := l.SeccompPolicy
	if p == nil {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).SeccompPolicyOwner)
	sc := &specs.LinuxSeccomp{
		DefaultAction:    specs.LinuxSeccompAction(p.DefaultAction),
		ListenerPath:     p.ListenerPath,
		ListenerMetadata: p.ListenerMetadata,
	}
	for _, c := range p.Syscalls {
		if c == nil {
			continue
		}
		sys := specs.LinuxSyscall{Names: slices.Clone(c.Names), Action: specs.LinuxSeccompAction(c.Action)}
		if c.ErrnoRet != nil {
			sys.ErrnoRet = new(uint(c.ErrnoRet.Value))
		}
		for _, arg := range c.Args {
			if arg != nil {
				sys.Args = append(sys.Args, specs.LinuxSeccompArg{Index: uint(arg.Index), Value: arg.Value, ValueTwo: arg.ValueTwo, Op: specs.LinuxSeccompOperator(arg.Op)})
			}
		}
		sc.Syscalls = append(sc.Syscalls, sys)
	}
	if p.DefaultErrno != nil {
		v := uint(p.DefaultErrno.Value)
		sc.DefaultErrnoRet = &v
	}
	for _, arch := range p.Architectures {
		sc.Architectures = append(sc.Architectures, specs.Arch(arch))
	}
	for _, f := range p.Flags {
		sc.Flags = append(sc.Flags, specs.LinuxSeccompFlag(f))
	}
	if err := checkSeccomp(sc); err != nil {
		return a.fail(plugin, invalidf("linux.seccomp: %v", err))
	}
	if sc.ListenerPath != "" && !path.IsAbs(sc.ListenerPath) {
		return a.fail(plugin, invalidf("linux.seccomp.listenerPath %q: not absolute", sc.ListenerPath))
	}
	if err := fitSeccomp(a.rt.fitter(), a.rt.fl, sc); err != nil {
		return a.fail(plugin, err)
	}
	a.linux().Seccomp = sc
	return nil
}

func (a *adjuster) namespaces(l *api.LinuxContainerAdjustment) error {
	for _, n := range l.Namespaces {
		if n == nil {
			continue
		}
		typ, remove := n.IsMarkedForRemoval()
		plugin := a.ownerOf((*api.OwningPlugins).NamespaceOwner, typ)
		field := fmt.Sprintf("linux.namespaces[%q]", typ)
		t := specs.LinuxNamespaceType(typ)
		if !slices.Contains(knownNamespaces, t) {
			return a.fail(plugin, invalidf("%s: unknown namespace type", field))
		}
		lx := a.linux()
		if remove {
			if t == specs.MountNamespace {
				return a.fail(plugin, invalidf("%s: a container needs its mount namespace", field))
			}
			lx.Namespaces = slices.DeleteFunc(lx.Namespaces, func(x specs.LinuxNamespace) bool { return x.Type == t })
			continue
		}
		if n.Path != "" {
			if err := checkContainerPath(n.Path); err != nil {
				return a.fail(plugin, invalidf("%s path %q: %v", field, n.Path, err))
			}
		}
		if t == specs.UserNamespace && n.Path == "" && len(lx.UIDMappings) == 0 {
			return a.fail(plugin, invalidf("%s: a new user namespace needs uid and gid mappings, which the container has none of", field))
		}
		if err := listed("linux.namespaces type", a.rt.fl.Namespaces, t); err != nil {
			return a.fail(plugin, err)
		}
		if t == specs.TimeNamespace {
			if err := a.rt.needs(field, "1.1.0"); err != nil {
				return a.fail(plugin, err)
			}
		}
		ns := specs.LinuxNamespace{Type: t, Path: n.Path}
		if i := slices.IndexFunc(lx.Namespaces, func(x specs.LinuxNamespace) bool { return x.Type == t }); i >= 0 {
			lx.Namespaces[i] = ns
		} else {
			lx.Namespaces = append(lx.Namespaces, ns)
		}
	}
	return nil
}

func (a *adjuster) sysctls(l *api.LinuxContainerAdjustment) error {
	if len(l.Sysctl) == 0 {
		return nil
	}
	ns := podNamespaces{hostNetwork: a.o.HostNetwork, hostIPC: a.o.HostIPC}
	for _, raw := range slices.Sorted(maps.Keys(l.Sysctl)) {
		k, remove := api.IsMarkedForRemoval(raw)
		plugin := a.ownerOf((*api.OwningPlugins).SysctlOwner, k)
		lx := a.linux()
		if remove {
			delete(lx.Sysctl, k)
			continue
		}
		ok, err := checkSysctls(map[string]string{k: l.Sysctl[raw]}, ns)
		if err != nil {
			return a.fail(plugin, err)
		}
		if lx.Sysctl == nil {
			lx.Sysctl = map[string]string{}
		}
		maps.Copy(lx.Sysctl, ok)
	}
	return nil
}

// netDeviceName is a Linux interface name (IFNAMSIZ-1 bytes, no '/',
// ':' or whitespace).
var netDeviceName = regexp.MustCompile(`^[^/:\s]{1,15}$`)

func (a *adjuster) netDevices(l *api.LinuxContainerAdjustment) error {
	if len(l.NetDevices) == 0 {
		return nil
	}
	for _, raw := range slices.Sorted(maps.Keys(l.NetDevices)) {
		host, remove := api.IsMarkedForRemoval(raw)
		plugin := a.ownerOf((*api.OwningPlugins).LinuxNetDeviceOwner, host)
		field := fmt.Sprintf("linux.netDevices[%q]", host)
		lx := a.linux()
		if remove {
			delete(lx.NetDevices, host)
			continue
		}
		d := l.NetDevices[raw]
		switch {
		case !netDeviceName.MatchString(host) || host == "." || host == "..":
			return a.fail(plugin, invalidf("%s: not an interface name", field))
		case d.GetName() != "" && (!netDeviceName.MatchString(d.GetName()) || d.GetName() == "." || d.GetName() == ".."):
			return a.fail(plugin, invalidf("%s.name %q: not an interface name", field, d.GetName()))
		case a.o.HostNetwork:
			return a.fail(plugin, invalidf("%s: the pod uses the host network", field))
		}
		if err := a.rt.needs(field, "1.3.0"); err != nil {
			return a.fail(plugin, err)
		}
		var on *bool
		if a.rt.fl.NetDevices != nil {
			on = a.rt.fl.NetDevices.Enabled
		}
		if err := a.rt.enabled(field, "linux.netDevices.enabled", on); err != nil {
			return a.fail(plugin, err)
		}
		if lx.NetDevices == nil {
			lx.NetDevices = map[string]specs.LinuxNetDevice{}
		}
		lx.NetDevices[host] = d.ToOCI()
	}
	return nil
}

func (a *adjuster) scheduler(l *api.LinuxContainerAdjustment) error {
	sch := l.Scheduler
	if sch == nil {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).LinuxSchedulerOwner)
	if sch.Policy == api.LinuxSchedulerPolicy_SCHED_NONE {
		a.process().Scheduler = nil // the runtime's own policy
		return nil
	}
	if err := checkScheduler(sch); err != nil {
		return a.fail(plugin, err)
	}
	if err := a.rt.needs("process.scheduler", "1.1.0"); err != nil {
		return a.fail(plugin, err)
	}
	a.process().Scheduler = sch.ToOCI()
	return nil
}

func checkScheduler(sch *api.LinuxScheduler) error {
	const field = "process.scheduler"
	if _, ok := api.LinuxSchedulerPolicy_name[int32(sch.Policy)]; !ok {
		return invalidf("%s.policy %d: unknown", field, sch.Policy)
	}
	if sch.Nice < -20 || sch.Nice > 19 {
		return invalidf("%s.nice %d: not within [-20, 19]", field, sch.Nice)
	}
	switch sch.Policy {
	case api.LinuxSchedulerPolicy_SCHED_FIFO, api.LinuxSchedulerPolicy_SCHED_RR:
		if sch.Priority < 1 || sch.Priority > 99 {
			return invalidf("%s.priority %d: not within [1, 99] for %s", field, sch.Priority, sch.Policy)
		}
	default:
		if sch.Priority != 0 {
			return invalidf("%s.priority %d: must be 0 for %s", field, sch.Priority, sch.Policy)
		}
	}
	if sch.Policy == api.LinuxSchedulerPolicy_SCHED_DEADLINE {
		if sch.Runtime == 0 || sch.Runtime > sch.Deadline || (sch.Period != 0 && sch.Deadline > sch.Period) {
			return invalidf("%s: SCHED_DEADLINE needs 0 < runtime (%d) <= deadline (%d) <= period (%d)", field, sch.Runtime, sch.Deadline, sch.Period)
		}
	}
	for _, f := range sch.Flags {
		if _, ok := api.LinuxSchedulerFlag_name[int32(f)]; !ok {
			return invalidf("%s.flags %d: unknown", field, f)
		}
	}
	return nil
}

func (a *adjuster) rdt(l *api.LinuxContainerAdjustment) error {
	r := l.Rdt
	if r == nil {
		return nil
	}
	lx := a.linux()
	if r.Remove {
		lx.IntelRdt = nil
	}
	if r.ClosId == nil && r.Schemata == nil && r.EnableMonitoring == nil {
		return nil
	}
	rdt := lx.IntelRdt
	if rdt == nil {
		rdt = &specs.LinuxIntelRdt{}
	} else {
		c := *rdt
		rdt = &c
	}
	var plugins []string // the owners of the fields set, for refusals
	if v := r.ClosId; v != nil {
		p := a.owner((*api.OwningPlugins).RdtClosIDOwner)
		if strings.ContainsAny(v.Value, "/\n\x00") || v.Value == "." || v.Value == ".." {
			return a.fail(p, invalidf("linux.intelRdt.closID %q: not a resctrl group name", v.Value))
		}
		rdt.ClosID = v.Value
		plugins = append(plugins, p)
	}
	if v := r.Schemata; v != nil {
		p := a.owner((*api.OwningPlugins).RdtSchemataOwner)
		for i, line := range v.Value {
			if line == "" || strings.ContainsAny(line, "\n\x00") {
				return a.fail(p, invalidf("linux.intelRdt.schemata[%d] %q: not a schemata line", i, line))
			}
		}
		rdt.Schemata = slices.Clone(v.Value)
		plugins = append(plugins, p)
	}
	if v := r.EnableMonitoring; v != nil {
		rdt.EnableMonitoring = v.Value
		plugins = append(plugins, a.owner((*api.OwningPlugins).RdtEnableMonitoringOwner))
	}
	if err := fitIntelRdt(a.rt.fitter(), a.rt.fl, rdt); err != nil {
		return a.fail(strings.Join(slices.Compact(slices.Sorted(slices.Values(plugins))), ", "), err)
	}
	lx.IntelRdt = rdt
	return nil
}

func (a *adjuster) memoryPolicy(l *api.LinuxContainerAdjustment) error {
	mp := l.MemoryPolicy
	if mp == nil {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).MemoryPolicyOwner)
	const field = "linux.memoryPolicy"
	if _, ok := api.MpolMode_name[int32(mp.Mode)]; !ok {
		return a.fail(plugin, invalidf("%s.mode %d: unknown", field, mp.Mode))
	}
	for _, f := range mp.Flags {
		if _, ok := api.MpolFlag_name[int32(f)]; !ok {
			return a.fail(plugin, invalidf("%s.flags %d: unknown", field, f))
		}
	}
	switch mp.Mode {
	case api.MpolMode_MPOL_DEFAULT, api.MpolMode_MPOL_LOCAL:
		if mp.Nodes != "" {
			return a.fail(plugin, invalidf("%s.nodes %q: %s takes no nodes", field, mp.Nodes, mp.Mode))
		}
	default:
		if !cpuList.MatchString(mp.Nodes) {
			return a.fail(plugin, invalidf("%s.nodes %q: not a node list", field, mp.Nodes))
		}
	}
	oci := mp.ToOCI()
	if err := a.rt.needs(field, "1.3.0"); err != nil {
		return a.fail(plugin, err)
	}
	fm := a.rt.fl.MemoryPolicy
	if fm == nil {
		return a.fail(plugin, unsupportedf("%s: %s does not report support for it (features linux.memoryPolicy)", field, a.rt.name))
	}
	if err := listed(field+".mode", fm.Modes, oci.Mode); err != nil {
		return a.fail(plugin, err)
	}
	for _, f := range oci.Flags {
		if err := listed(field+".flags", fm.Flags, f); err != nil {
			return a.fail(plugin, err)
		}
	}
	a.linux().MemoryPolicy = oci
	return nil
}
