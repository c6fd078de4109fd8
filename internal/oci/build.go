package oci

import (
	"path"
	"regexp"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// specVersion is the version a built spec starts with; Fit adjusts it.
	specVersion = "1.0.2"
	// sandboxOOMScoreAdj is what kubelet expects of the infra container
	// (clamped to OOMScoreAdjMin).
	sandboxOOMScoreAdj = -998
	// maxNofile caps the hard RLIMIT_NOFILE given to containers; the soft
	// limit is the traditional 1024, which select(2)-based code needs.
	maxNofile  = 1 << 20
	softNofile = 1024
)

func hostOrDetect(h *Host) *Host {
	if h != nil {
		return h
	}
	return DetectHost()
}

func rlimits(h *Host) []specs.POSIXRlimit {
	hard := uint64(maxNofile)
	if h.NofileHard != 0 {
		hard = min(hard, h.NofileHard)
	}
	return []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: hard, Soft: min(softNofile, hard)}}
}

// annotations copies the CRI annotations and adds crin's own, which win.
func annotations(cri map[string]string, own map[string]string) map[string]string {
	out := make(map[string]string, len(cri)+len(own))
	for k, v := range cri {
		out[k] = v
	}
	for k, v := range own {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// SandboxSpec returns the spec of a pod's infra container. Invalid input
// (bad sysctls, bad ids) is errdefs.ErrInvalidArgument naming the field.
func SandboxSpec(o SandboxOptions) (*specs.Spec, error) {
	cfg := o.Config
	if cfg == nil {
		return nil, invalidf("sandbox config: missing")
	}
	if o.Rootfs == "" || !path.IsAbs(o.Rootfs) {
		return nil, invalidf("sandbox rootfs %q: not an absolute path", o.Rootfs)
	}
	if o.PauseBinary == "" || !path.IsAbs(o.PauseBinary) {
		return nil, invalidf("pause binary %q: not an absolute path", o.PauseBinary)
	}
	host := hostOrDetect(o.Host)
	l := cfg.GetLinux()
	sc := l.GetSecurityContext()

	ns, sysctls, hostname, err := podBasics(cfg)
	if err != nil {
		return nil, err
	}
	user, err := sandboxUser(sc)
	if err != nil {
		return nil, err
	}
	noCaps := &specs.LinuxCapabilities{}
	seccomp, err := sandboxSecurity(o, sc, noCaps, host)
	if err != nil {
		return nil, err
	}

	res, err := SandboxResources(l, host)
	if err != nil {
		return nil, err
	}
	res.Devices = defaultDeviceRules()
	oom, err := clampOOMScoreAdj("sandbox oom_score_adj", sandboxOOMScoreAdj, o.OOMScoreAdjMin)
	if err != nil {
		return nil, err
	}

	mounts := append(defaultMounts(baseMountOptions{}),
		specs.Mount{Destination: "/pause", Type: "bind", Source: o.PauseBinary, Options: []string{"rbind", "rprivate", "ro", "nosuid", "nodev"}})

	s := &specs.Spec{
		Version: specVersion,
		Process: &specs.Process{
			User:            user,
			Args:            []string{"/pause"},
			Env:             []string{defaultPath},
			Cwd:             "/",
			Capabilities:    noCaps,
			Rlimits:         rlimits(host),
			NoNewPrivileges: true,
			OOMScoreAdj:     &oom,
		},
		Root:        &specs.Root{Path: o.Rootfs, Readonly: true},
		Hostname:    hostname,
		Mounts:      mounts,
		Annotations: sandboxAnnotations(o),
		Linux: &specs.Linux{
			Sysctl:        sysctls,
			Resources:     res,
			CgroupsPath:   o.CgroupsPath,
			Namespaces:    sandboxNamespaces(ns, o.NetNSPath, host.CgroupV2),
			Devices:       defaultDevices(),
			Seccomp:       seccomp,
			MaskedPaths:   slices.Clone(defaultMaskedPaths),
			ReadonlyPaths: slices.Clone(defaultReadonlyPaths),
		},
	}
	userns, err := PodUserNS(cfg)
	if err != nil {
		return nil, err
	}
	if err := joinUserNS(s.Linux, userns, o.UserNSPath); err != nil {
		return nil, err
	}
	return s, nil
}

// podBasics reads what every container of pod shares: its namespace
// modes, its sysctls and its hostname (empty with the host's network: the
// node's own).
func podBasics(pod *runtimeapi.PodSandboxConfig) (podNamespaces, map[string]string, string, error) {
	ns, err := podNamespaceModes(pod)
	if err != nil {
		return ns, nil, "", err
	}
	sysctls, err := checkSysctls(pod.GetLinux().GetSysctls(), ns)
	if err != nil {
		return ns, nil, "", err
	}
	if ns.hostNetwork {
		return ns, sysctls, "", nil
	}
	hostname := pod.GetHostname()
	if err := checkHostname(hostname); err != nil {
		return ns, nil, "", err
	}
	return ns, sysctls, hostname, nil
}

// sandboxUser is the user of the infra process: the pod's when one is
// set. The pause rootfs has no user database, so only numeric ids mean
// anything.
func sandboxUser(sc *runtimeapi.LinuxSandboxSecurityContext) (specs.User, error) {
	req := userRequest{supplemental: sc.GetSupplementalGroups(), policy: runtimeapi.SupplementalGroupsPolicy_Strict}
	if v := sc.GetRunAsUser(); v != nil {
		req.runAsUser = &v.Value
	}
	if v := sc.GetRunAsGroup(); v != nil {
		if req.runAsUser == nil {
			zero := int64(0)
			req.runAsUser = &zero
		}
		req.runAsGroup = &v.Value
	}
	return resolveUser("", req)
}

// sandboxSecurity returns the infra process's seccomp profile and checks
// the pod's AppArmor profile, which the infra process does not get.
func sandboxSecurity(o SandboxOptions, sc *runtimeapi.LinuxSandboxSecurityContext, caps *specs.LinuxCapabilities, host *Host) (*specs.LinuxSeccomp, error) {
	// seccomp_profile_path is deprecated but still what older kubelets
	// send in place of Seccomp.
	seccomp, err := seccompProfile("linux.security_context.seccomp", sc.GetSeccomp(), sc.GetSeccompProfilePath(), o.SeccompProfileRoot, caps, false) //nolint:staticcheck // older kubelets' field
	if err != nil {
		return nil, err
	}
	if _, err := apparmorProfile("linux.security_context.apparmor", sc.GetApparmor(), "", host, false); err != nil {
		return nil, err
	}
	return seccomp, nil
}

// sandboxAnnotations are the pod's annotations and crin's own for the
// infra container.
func sandboxAnnotations(o SandboxOptions) map[string]string {
	md := o.Config.GetMetadata()
	return annotations(o.Config.GetAnnotations(), map[string]string{
		AnnotationContainerType:    ContainerTypeSandbox,
		AnnotationSandboxID:        o.ID,
		AnnotationSandboxName:      md.GetName(),
		AnnotationSandboxNamespace: md.GetNamespace(),
		AnnotationSandboxUID:       md.GetUid(),
		criContainerTypeKey:        ContainerTypeSandbox,
		criSandboxIDKey:            o.ID,
	})
}

// hostnamePattern is an RFC 1123 DNS name.
var hostnamePattern = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*$`)

// checkHostname validates a pod hostname as an RFC 1123 name of at most
// 64 bytes (the kernel's limit).
func checkHostname(h string) error {
	if h == "" {
		return nil
	}
	if len(h) > 64 || !hostnamePattern.MatchString(h) {
		return invalidf("hostname %q: not a valid hostname", h)
	}
	return nil
}

// ContainerSpec returns the spec of a workload container. It resolves the
// user from the rootfs's /etc/passwd and /etc/group without following
// symlinks out of the rootfs. Invalid input is errdefs.ErrInvalidArgument
// naming the field and the value.
func ContainerSpec(o ContainerOptions) (*specs.Spec, error) {
	cfg := o.Config
	if cfg == nil {
		return nil, invalidf("container config: missing")
	}
	if o.Rootfs == "" || !path.IsAbs(o.Rootfs) {
		return nil, invalidf("container rootfs %q: not an absolute path", o.Rootfs)
	}
	host := hostOrDetect(o.Host)
	sb := o.Sandbox
	l := cfg.GetLinux()
	sc := l.GetSecurityContext()
	privileged := sc.GetPrivileged()
	if privileged && !sb.GetLinux().GetSecurityContext().GetPrivileged() {
		return nil, invalidf("linux.security_context.privileged: the pod is not privileged")
	}

	ns, sysctls, hostname, err := podBasics(sb)
	if err != nil {
		return nil, err
	}
	proc, err := containerProcess(o, hostname, host)
	if err != nil {
		return nil, err
	}
	seccomp, err := containerSecurity(o, proc, host)
	if err != nil {
		return nil, err
	}
	res, err := containerResources(o, proc, host)
	if err != nil {
		return nil, err
	}

	namespaces, err := containerNamespaces(o, ns, host.CgroupV2)
	if err != nil {
		return nil, err
	}
	mounts, devices, rules, propagation, err := containerMounts(o, ns, privileged, sc.GetReadonlyRootfs())
	if err != nil {
		return nil, err
	}
	res.Devices = rules
	masked, readonly, err := containerMaskedPaths(sc)
	if err != nil {
		return nil, err
	}

	s := &specs.Spec{
		Version:     specVersion,
		Process:     proc,
		Root:        &specs.Root{Path: o.Rootfs, Readonly: sc.GetReadonlyRootfs()},
		Hostname:    hostname,
		Mounts:      mounts,
		Annotations: containerAnnotations(o),
		Linux: &specs.Linux{
			Sysctl:            sysctls,
			Resources:         res,
			CgroupsPath:       o.CgroupsPath,
			Namespaces:        namespaces,
			Devices:           devices,
			Seccomp:           seccomp,
			RootfsPropagation: propagation,
			MaskedPaths:       masked,
			ReadonlyPaths:     readonly,
		},
	}
	userns, err := PodUserNS(sb)
	if err != nil {
		return nil, err
	}
	if err := checkContainerUserNS(cfg, userns); err != nil {
		return nil, err
	}
	if err := joinUserNS(s.Linux, userns, o.UserNSPath); err != nil {
		return nil, err
	}
	return s, nil
}

// containerProcess is the container's process as far as the CRI config
// and the image say: arguments, environment (HOSTNAME is the pod's, also
// when that is the node's), working directory, user, rlimits and no new
// privileges. containerSecurity and containerResources fill in the rest.
func containerProcess(o ContainerOptions, hostname string, host *Host) (*specs.Process, error) {
	cfg, sb := o.Config, o.Sandbox
	sc := cfg.GetLinux().GetSecurityContext()
	args, err := processArgs(cfg, o.Image)
	if err != nil {
		return nil, err
	}
	envHostname := hostname
	if envHostname == "" {
		envHostname = sb.GetHostname()
	}
	env, err := processEnv(cfg, o.Image, envHostname)
	if err != nil {
		return nil, err
	}
	cwd, err := processCwd(cfg, o.Image)
	if err != nil {
		return nil, err
	}
	user, err := resolveUser(o.Rootfs, containerUserRequest(sc, o.Image.User))
	if err != nil {
		return nil, err
	}
	return &specs.Process{
		User:            user,
		Args:            args,
		Env:             env,
		Cwd:             cwd,
		Rlimits:         rlimits(host),
		NoNewPrivileges: sc.GetNoNewPrivs(),
	}, nil
}

// containerSecurity sets the capabilities and AppArmor profile of proc
// and returns the container's seccomp profile.
func containerSecurity(o ContainerOptions, proc *specs.Process, host *Host) (*specs.LinuxSeccomp, error) {
	sc := o.Config.GetLinux().GetSecurityContext()
	privileged := sc.GetPrivileged()
	caps, err := containerCapabilities(sc.GetCapabilities(), privileged, host)
	if err != nil {
		return nil, err
	}
	// seccomp_profile_path and apparmor_profile are deprecated but still
	// what older kubelets send in place of Seccomp and Apparmor.
	seccomp, err := seccompProfile("linux.security_context.seccomp", sc.GetSeccomp(), sc.GetSeccompProfilePath(), o.SeccompProfileRoot, caps, privileged) //nolint:staticcheck // older kubelets' field
	if err != nil {
		return nil, err
	}
	apparmor, err := apparmorProfile("linux.security_context.apparmor", sc.GetApparmor(), sc.GetApparmorProfile(), host, privileged) //nolint:staticcheck // older kubelets' field
	if err != nil {
		return nil, err
	}
	proc.Capabilities, proc.ApparmorProfile = caps, apparmor
	return seccomp, nil
}

// containerResources returns the container's cgroup resources and sets the
// OOM score adjustment of proc from them.
func containerResources(o ContainerOptions, proc *specs.Process, host *Host) (*specs.LinuxResources, error) {
	r := o.Config.GetLinux().GetResources()
	res, err := CRIResources("linux.resources", r, host)
	if err != nil {
		return nil, err
	}
	if r != nil {
		v, err := clampOOMScoreAdj("linux.resources.oom_score_adj", r.GetOomScoreAdj(), o.OOMScoreAdjMin)
		if err != nil {
			return nil, err
		}
		proc.OOMScoreAdj = &v
	}
	return res, nil
}

// containerMaskedPaths are the paths masked and made read-only in the
// container: the defaults, or the lists kubelet sends; none when
// privileged.
func containerMaskedPaths(sc *runtimeapi.LinuxContainerSecurityContext) (masked, readonly []string, err error) {
	if sc.GetPrivileged() {
		return nil, nil, nil
	}
	masked, readonly = slices.Clone(defaultMaskedPaths), slices.Clone(defaultReadonlyPaths)
	if p := sc.GetMaskedPaths(); len(p) > 0 {
		if masked, err = checkPathList("linux.security_context.masked_paths", p); err != nil {
			return nil, nil, err
		}
	}
	if p := sc.GetReadonlyPaths(); len(p) > 0 {
		if readonly, err = checkPathList("linux.security_context.readonly_paths", p); err != nil {
			return nil, nil, err
		}
	}
	return masked, readonly, nil
}

// containerAnnotations are the container's annotations and crin's own.
func containerAnnotations(o ContainerOptions) map[string]string {
	cfg, md := o.Config, o.Sandbox.GetMetadata()
	image := cfg.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = cfg.GetImage().GetImage()
	}
	return annotations(cfg.GetAnnotations(), map[string]string{
		AnnotationContainerType:    ContainerTypeContainer,
		AnnotationSandboxID:        o.SandboxID,
		AnnotationSandboxName:      md.GetName(),
		AnnotationSandboxNamespace: md.GetNamespace(),
		AnnotationSandboxUID:       md.GetUid(),
		AnnotationContainerName:    cfg.GetMetadata().GetName(),
		AnnotationImageName:        image,
		criContainerTypeKey:        ContainerTypeContainer,
		criSandboxIDKey:            o.SandboxID,
	})
}

// containerMounts assembles the mounts and devices of a workload container.
func containerMounts(o ContainerOptions, ns podNamespaces, privileged, readonlyRoot bool) ([]specs.Mount, []specs.LinuxDevice, []specs.LinuxDeviceCgroup, string, error) {
	in, err := imageVolumeMounts(o.Config.GetMounts(), o.ImageVolumes)
	if err != nil {
		return nil, nil, nil, "", err
	}
	user, propagation, err := criMounts(in)
	if err != nil {
		return nil, nil, nil, "", err
	}
	base := baseMountOptions{privileged: privileged, shmSource: o.ShmPath, cgroup: true}
	if ns.hostIPC {
		base.shmSource = "/dev/shm"
	}
	var mounts []specs.Mount
	for _, m := range defaultMounts(base) {
		if !hasMount(user, m.Destination) {
			mounts = append(mounts, m)
		}
	}
	for _, f := range []struct{ dst, src string }{
		{"/etc/hostname", o.HostnamePath},
		{"/etc/hosts", o.HostsPath},
		{"/etc/resolv.conf", o.ResolvConfPath},
	} {
		if f.src != "" && !hasMount(user, f.dst) {
			mounts = append(mounts, fileMount(f.dst, f.src, readonlyRoot))
		}
	}
	mounts = append(mounts, user...)
	orderMounts(mounts)

	devices := defaultDevices()
	rules := defaultDeviceRules()
	if privileged {
		hostDevs, err := privilegedDevices()
		if err != nil {
			return nil, nil, nil, "", err
		}
		for _, d := range hostDevs {
			if !slices.ContainsFunc(devices, func(e specs.LinuxDevice) bool { return e.Path == d.Path }) {
				devices = append(devices, d)
			}
		}
		rules = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	extra, extraRules, err := criDevices(o.Config.GetDevices())
	if err != nil {
		return nil, nil, nil, "", err
	}
	for _, d := range extra {
		devices = slices.DeleteFunc(devices, func(e specs.LinuxDevice) bool { return e.Path == d.Path })
		devices = append(devices, d)
	}
	if !privileged {
		rules = append(rules, extraRules...)
	}
	return mounts, devices, rules, propagation, nil
}
