package oci

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNamespaceModes reads which of a pod's namespaces are the host's, and
// refuses modes that are not valid (user namespaces: PodUserNS).
func podNamespaceModes(cfg *runtimeapi.PodSandboxConfig) (podNamespaces, error) {
	no := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if err := checkNamespaceMode("linux.security_context.namespace_options.network", no.GetNetwork(), false); err != nil {
		return podNamespaces{}, err
	}
	if err := checkNamespaceMode("linux.security_context.namespace_options.ipc", no.GetIpc(), false); err != nil {
		return podNamespaces{}, err
	}
	if err := checkNamespaceMode("linux.security_context.namespace_options.pid", no.GetPid(), false); err != nil {
		return podNamespaces{}, err
	}
	if _, err := PodUserNS(cfg); err != nil {
		return podNamespaces{}, err
	}
	return podNamespaces{
		hostNetwork: no.GetNetwork() == runtimeapi.NamespaceMode_NODE,
		hostIPC:     no.GetIpc() == runtimeapi.NamespaceMode_NODE,
		hostPID:     no.GetPid() == runtimeapi.NamespaceMode_NODE,
	}, nil
}

// checkNamespaceMode refuses modes that are not defined, and TARGET where it
// means nothing (everywhere but a container's pid).
func checkNamespaceMode(field string, m runtimeapi.NamespaceMode, targetOK bool) error {
	switch m {
	case runtimeapi.NamespaceMode_POD, runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_NODE:
		return nil
	case runtimeapi.NamespaceMode_TARGET:
		if targetOK {
			return nil
		}
	}
	return invalidf("%s %s: not a valid mode here", field, m)
}

// sandboxNamespaces are the infra container's namespaces: new ones for
// everything the pod does not share with the host; the network one is the
// pinned namespace when there is one.
func sandboxNamespaces(ns podNamespaces, netnsPath string, cgroupV2 bool) []specs.LinuxNamespace {
	out := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if !ns.hostNetwork {
		out = append(out, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netnsPath})
		// Kubernetes ties the UTS namespace to the network one: a
		// host-network pod sees the node's hostname.
		out = append(out, specs.LinuxNamespace{Type: specs.UTSNamespace})
	}
	if !ns.hostIPC {
		out = append(out, specs.LinuxNamespace{Type: specs.IPCNamespace})
	}
	// The infra container has its own pid namespace unless the pod uses the
	// host's; with CONTAINER mode the workloads then make their own.
	if !ns.hostPID {
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace})
	}
	if cgroupV2 {
		out = append(out, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return out
}

// containerNamespaces joins the pod's network, IPC and UTS namespaces (or
// the host's) by their pinned paths, and the pid namespace the config's
// pid mode asks for.
func containerNamespaces(o ContainerOptions, ns podNamespaces, cgroupV2 bool) ([]specs.LinuxNamespace, error) {
	pinned := func(path, what string) error {
		if path == "" {
			return invalidf("the pod's %s namespace is not pinned: cannot join it", what)
		}
		return nil
	}
	out := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if !ns.hostNetwork {
		if err := pinned(o.NetNSPath, "network"); err != nil {
			return nil, err
		}
		if err := pinned(o.UTSNSPath, "uts"); err != nil {
			return nil, err
		}
		out = append(out,
			specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: o.NetNSPath},
			specs.LinuxNamespace{Type: specs.UTSNamespace, Path: o.UTSNSPath})
	}
	if !ns.hostIPC {
		if err := pinned(o.IPCNSPath, "ipc"); err != nil {
			return nil, err
		}
		out = append(out, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: o.IPCNSPath})
	}

	const field = "linux.security_context.namespace_options.pid"
	mode := o.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid()
	if err := checkNamespaceMode(field, mode, true); err != nil {
		return nil, err
	}
	if (mode == runtimeapi.NamespaceMode_NODE) != ns.hostPID {
		return nil, invalidf("%s %s: does not match the pod's pid mode", field, mode)
	}
	switch mode {
	case runtimeapi.NamespaceMode_POD:
		if err := pinned(o.PIDNSPath, "pid"); err != nil {
			return nil, err
		}
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: o.PIDNSPath})
	case runtimeapi.NamespaceMode_CONTAINER:
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace})
	case runtimeapi.NamespaceMode_TARGET:
		if o.TargetPid <= 0 {
			return nil, invalidf("linux.security_context.namespace_options.target_id %q: target container is not running", o.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetTargetId())
		}
		// The target is a container of the pod whose pid was just
		// checked to run; it has no pin of its own.
		out = append(out, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: fmt.Sprintf("/proc/%d/ns/pid", o.TargetPid)})
	}
	if cgroupV2 {
		out = append(out, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	return out, nil
}
