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

func buildSandbox(o SandboxOptions) (*specs.Spec, error) {
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

	ns, err := podNamespaceModes(cfg)
	if err != nil {
		return nil, err
	}
	sysctls, err := checkSysctls(l.GetSysctls(), ns)
	if err != nil {
		return nil, err
	}
	hostname := cfg.GetHostname()
	if ns.hostNetwork {
		hostname = "" // the node's own
	} else if err := checkHostname(hostname); err != nil {
		return nil, err
	}

	// The infra process runs as the pod's user when one is set; the pause
	// rootfs has no user database, so only numeric ids mean anything.
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
	user, err := resolveUser("", req)
	if err != nil {
		return nil, err
	}

	noCaps := &specs.LinuxCapabilities{}
	// seccomp_profile_path is deprecated but still what older kubelets
	// send in place of Seccomp.
	seccomp, err := seccompProfile("linux.security_context.seccomp", sc.GetSeccomp(), sc.GetSeccompProfilePath(), o.SeccompProfileRoot, noCaps, false) //nolint:staticcheck // older kubelets' field
	if err != nil {
		return nil, err
	}
	if _, err := apparmorProfile("linux.security_context.apparmor", sc.GetApparmor(), "", host, false); err != nil {
		return nil, err
	}

	res, err := sandboxResources(l, host)
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
		Root:     &specs.Root{Path: o.Rootfs, Readonly: true},
		Hostname: hostname,
		Mounts:   mounts,
		Annotations: annotations(cfg.GetAnnotations(), map[string]string{
			AnnotationContainerType:    ContainerTypeSandbox,
			AnnotationSandboxID:        o.ID,
			AnnotationSandboxName:      cfg.GetMetadata().GetName(),
			AnnotationSandboxNamespace: cfg.GetMetadata().GetNamespace(),
			AnnotationSandboxUID:       cfg.GetMetadata().GetUid(),
			criContainerTypeKey:        ContainerTypeSandbox,
			criSandboxIDKey:            o.ID,
		}),
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

func buildContainer(o ContainerOptions) (*specs.Spec, error) {
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

	ns, err := podNamespaceModes(sb)
	if err != nil {
		return nil, err
	}
	sysctls, err := checkSysctls(sb.GetLinux().GetSysctls(), ns)
	if err != nil {
		return nil, err
	}
	hostname := ""
	if !ns.hostNetwork {
		hostname = sb.GetHostname()
		if err := checkHostname(hostname); err != nil {
			return nil, err
		}
	}

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

	res, err := linuxResources("linux.resources", l.GetResources(), host)
	if err != nil {
		return nil, err
	}
	var oom *int
	if r := l.GetResources(); r != nil {
		v, err := clampOOMScoreAdj("linux.resources.oom_score_adj", r.GetOomScoreAdj(), o.OOMScoreAdjMin)
		if err != nil {
			return nil, err
		}
		oom = &v
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

	masked, readonly := []string(nil), []string(nil)
	if !privileged {
		masked, readonly = slices.Clone(defaultMaskedPaths), slices.Clone(defaultReadonlyPaths)
		if p := sc.GetMaskedPaths(); len(p) > 0 {
			if masked, err = checkPathList("linux.security_context.masked_paths", p); err != nil {
				return nil, err
			}
		}
		if p := sc.GetReadonlyPaths(); len(p) > 0 {
			if readonly, err = checkPathList("linux.security_context.readonly_paths", p); err != nil {
				return nil, err
			}
		}
	}

	image := cfg.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = cfg.GetImage().GetImage()
	}
	s := &specs.Spec{
		Version: specVersion,
		Process: &specs.Process{
			User:            user,
			Args:            args,
			Env:             env,
			Cwd:             cwd,
			Capabilities:    caps,
			Rlimits:         rlimits(host),
			NoNewPrivileges: sc.GetNoNewPrivs(),
			ApparmorProfile: apparmor,
			OOMScoreAdj:     oom,
		},
		Root:     &specs.Root{Path: o.Rootfs, Readonly: sc.GetReadonlyRootfs()},
		Hostname: hostname,
		Mounts:   mounts,
		Annotations: annotations(cfg.GetAnnotations(), map[string]string{
			AnnotationContainerType:    ContainerTypeContainer,
			AnnotationSandboxID:        o.SandboxID,
			AnnotationSandboxName:      sb.GetMetadata().GetName(),
			AnnotationSandboxNamespace: sb.GetMetadata().GetNamespace(),
			AnnotationSandboxUID:       sb.GetMetadata().GetUid(),
			AnnotationContainerName:    cfg.GetMetadata().GetName(),
			AnnotationImageName:        image,
			criContainerTypeKey:        ContainerTypeContainer,
			criSandboxIDKey:            o.SandboxID,
		}),
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
