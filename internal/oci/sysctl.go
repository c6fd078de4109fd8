package oci

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// sysctlName is a dot- or slash-separated list of segments of lower-case
// letters, digits, '-' and '_', starting and ending with a letter or digit.
var sysctlName = regexp.MustCompile(`^[a-z0-9]([-_a-z0-9]*[a-z0-9])?([./][a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$`)

// maxSysctlValue bounds a sysctl value; /proc/sys files take a page.
const maxSysctlValue = 4096

// sysctlNS is the namespace a namespaced sysctl belongs to.
type sysctlNS int

const (
	sysctlNone sysctlNS = iota
	sysctlIPC
	sysctlNet
	sysctlUTS
)

func classifySysctl(name string) sysctlNS {
	n := strings.ReplaceAll(name, "/", ".")
	switch {
	case strings.HasPrefix(n, "kernel.shm"),
		strings.HasPrefix(n, "kernel.msg"),
		n == "kernel.sem", n == "kernel.sem_next_id",
		strings.HasPrefix(n, "fs.mqueue."):
		return sysctlIPC
	case strings.HasPrefix(n, "net."):
		return sysctlNet
	case n == "kernel.hostname", n == "kernel.domainname":
		return sysctlUTS
	}
	return sysctlNone
}

// podNamespaces says which of a pod's namespaces are the host's.
type podNamespaces struct {
	hostNetwork bool
	hostIPC     bool
	hostPID     bool
}

// ownUTS reports whether the pod has its own UTS namespace: Kubernetes
// ties it to the network one (sandboxNamespaces), so a host-network pod
// has the node's.
func (ns podNamespaces) ownUTS() bool { return !ns.hostNetwork }

// checkSysctls validates a pod's linux.sysctls: only sysctls of the pod's
// own IPC, network and UTS namespaces are allowed, never those of a
// namespace it shares with the host. It returns a copy.
func checkSysctls(in map[string]string, ns podNamespaces) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	// Sorted so the first bad key reported is stable.
	for _, k := range slices.Sorted(maps.Keys(in)) {
		v := in[k]
		if len(k) > 256 || !sysctlName.MatchString(k) {
			return nil, invalidf("linux.sysctls[%q]: not a valid sysctl name", k)
		}
		switch classifySysctl(k) {
		case sysctlNone:
			return nil, invalidf("linux.sysctls[%q]: not a namespaced sysctl", k)
		case sysctlIPC:
			if ns.hostIPC {
				return nil, invalidf("linux.sysctls[%q]: not allowed with host IPC", k)
			}
		case sysctlNet:
			if ns.hostNetwork {
				return nil, invalidf("linux.sysctls[%q]: not allowed with host network", k)
			}
		case sysctlUTS:
			if !ns.ownUTS() {
				return nil, invalidf("linux.sysctls[%q]: not allowed with host network (the pod shares the host's UTS namespace)", k)
			}
		}
		if len(v) > maxSysctlValue || strings.ContainsAny(v, "\n\x00") {
			return nil, invalidf("linux.sysctls[%q] value %q: not a valid sysctl value", k, v)
		}
		out[k] = v
	}
	return out, nil
}
