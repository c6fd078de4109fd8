package oci

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// usernsField is the CRI field user namespace options come in.
const usernsField = "linux.security_context.namespace_options.userns_options"

// maxMappedID is the highest id a mapping may reach: (uid_t)-1 means "no
// id" to the kernel and is never mapped.
const maxMappedID = 1<<32 - 2

// UserNS is a pod's own user namespace: one range of uids and one of gids,
// each mapping container id 0 (and up) to unprivileged host ids.
type UserNS struct {
	UIDs []specs.LinuxIDMapping
	GIDs []specs.LinuxIDMapping
}

// RootUID and RootGID are the host ids of the container's root.
func (u *UserNS) RootUID() uint32 { return u.UIDs[0].HostID }

// RootGID is the host gid of the container's root group.
func (u *UserNS) RootGID() uint32 { return u.GIDs[0].HostID }

// PodUserNS reads and checks a pod's user namespace options: nil when the
// pod uses the host's (no options, or mode NODE). Mode POD needs exactly
// one uid and one gid mapping, each starting at container id 0, of
// positive length, not reaching past the highest id, and not mapping to
// host id 0: a pod whose root is the host's root gains nothing from a
// user namespace and loses what runs as root (kubelet hands out ranges
// from 65536 up). The pod must not share the host's network, IPC or PID
// namespace, which would be owned by the host's user namespace. Modes
// CONTAINER and TARGET are not defined for user namespaces (the CRI: "only
// POD and NODE"). Errors are errdefs.ErrInvalidArgument naming the field
// and value.
func PodUserNS(cfg *runtimeapi.PodSandboxConfig) (*UserNS, error) {
	no := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	u := no.GetUsernsOptions()
	if u == nil {
		// POD is the enum's zero value: only options that are there ask
		// for a user namespace.
		return nil, nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return nil, invalidf("%s: mode NODE with uid or gid mappings: mappings need mode POD", usernsField)
		}
		return nil, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return nil, invalidf("%s.mode %s: a user namespace is either the pod's (POD) or the node's (NODE)", usernsField, u.GetMode())
	}
	for _, h := range []struct {
		name string
		mode runtimeapi.NamespaceMode
	}{{"network", no.GetNetwork()}, {"ipc", no.GetIpc()}, {"pid", no.GetPid()}} {
		if h.mode == runtimeapi.NamespaceMode_NODE {
			return nil, invalidf("%s.mode POD: the pod uses the node's %s namespace, which a pod's user namespace cannot own", usernsField, h.name)
		}
	}
	uids, err := checkIDMappings(usernsField+".uids", u.GetUids())
	if err != nil {
		return nil, err
	}
	gids, err := checkIDMappings(usernsField+".gids", u.GetGids())
	if err != nil {
		return nil, err
	}
	return &UserNS{UIDs: uids, GIDs: gids}, nil
}

func checkIDMappings(field string, in []*runtimeapi.IDMapping) ([]specs.LinuxIDMapping, error) {
	if len(in) != 1 {
		return nil, invalidf("%s: %d mappings: exactly one is supported", field, len(in))
	}
	m := in[0]
	f := field + "[0]"
	switch {
	case m.GetLength() == 0:
		return nil, invalidf("%s.length 0: must be positive", f)
	case m.GetContainerId() != 0:
		return nil, invalidf("%s.container_id %d: must be 0, so that the container's root is mapped", f, m.GetContainerId())
	case m.GetHostId() == 0:
		return nil, invalidf("%s.host_id 0: would make the container's root the host's root", f)
	case uint64(m.GetHostId())+uint64(m.GetLength())-1 > maxMappedID:
		return nil, invalidf("%s: host_id %d with length %d: reaches past the highest id %d", f, m.GetHostId(), m.GetLength(), uint32(maxMappedID))
	}
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.GetHostId(), Size: m.GetLength()}}, nil
}

// checkContainerUserNS refuses a container whose own user namespace
// options (kubelet repeats the pod's) differ from its pod's.
func checkContainerUserNS(cfg *runtimeapi.ContainerConfig, pod *UserNS) error {
	u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if u == nil {
		return nil
	}
	mode := runtimeapi.NamespaceMode_NODE
	if pod != nil {
		mode = runtimeapi.NamespaceMode_POD
	}
	if u.GetMode() != mode {
		return invalidf("%s.mode %s: the pod's is %s", usernsField, u.GetMode(), mode)
	}
	if pod == nil {
		return nil
	}
	same := func(a []*runtimeapi.IDMapping, b []specs.LinuxIDMapping) bool {
		return len(a) == 0 || slices.EqualFunc(a, b, func(x *runtimeapi.IDMapping, y specs.LinuxIDMapping) bool {
			return x.GetContainerId() == y.ContainerID && x.GetHostId() == y.HostID && x.GetLength() == y.Size
		})
	}
	if !same(u.GetUids(), pod.UIDs) || !same(u.GetGids(), pod.GIDs) {
		return invalidf("%s: the container's mappings differ from its pod's", usernsField)
	}
	return nil
}

// joinUserNS makes a spec join the pod's pinned user namespace. runc 1.1
// needs the mappings beside the path (it derives the host ids of root
// from them).
func joinUserNS(l *specs.Linux, u *UserNS, path string) error {
	if u == nil {
		return nil
	}
	if path == "" {
		return invalidf("the pod's user namespace is not pinned: cannot join it")
	}
	l.Namespaces = append([]specs.LinuxNamespace{{Type: specs.UserNamespace, Path: path}}, l.Namespaces...)
	l.UIDMappings = slices.Clone(u.UIDs)
	l.GIDMappings = slices.Clone(u.GIDs)
	return nil
}
