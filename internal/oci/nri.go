package oci

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NRI adjustments and updates.
//
// Errors name the plugin that set the field (from the owners the merge
// recorded) and the field, for example
//
//	nri plugin "10-res" adjusts process.scheduler: runc supports OCI runtime spec up to 1.0.2-dev, the field needs 1.1.0: not implemented
//
// and are classified with errdefs:
//
//   - ErrInvalidArgument: the value is malformed or not allowed (a relative
//     mount destination, a non-namespaced sysctl, CPU shares of 1).
//   - ErrNotImplemented: the runtime, the host or crind's configuration
//     cannot honour the field (scheduler on an OCI 1.0 runtime, unified
//     files on a cgroup v1 host, swap without swap accounting, CDI devices
//     or block I/O classes with none configured, a change runc update
//     cannot make).
//   - ErrNotFound: a CDI device, block I/O class or RDT class name nothing
//     defines.

// AdjustOptions say what a container's NRI adjustment may use and how to
// name the plugins behind it in errors.
type AdjustOptions struct {
	// ContainerID is the container being created; Owners is keyed by it.
	ContainerID string
	// Owners tells which plugin set which field; errors name it. Nil means
	// errors say "an NRI plugin".
	Owners *api.OwningPlugins
	// Features is the OCI runtime's features document (nil: unknown, only
	// what OCI 1.0 runtimes honour is accepted). A field the runtime
	// cannot honour is an error naming the plugin and the field.
	Features *features.Features
	// RuntimeName names the runtime in errors ("runc").
	RuntimeName string
	// Host is the node's description; nil means DetectHost().
	Host *Host
	// OOMScoreAdjMin is crind's own oom_score_adj: lower values are
	// clamped to it, as for CRI requests.
	OOMScoreAdjMin int
	// CDISpecDirs are the CDI registry directories CDI device names are
	// resolved in; empty means CDI devices are refused.
	CDISpecDirs []string
	// BlockioClass and RdtClass resolve class names to resources; nil
	// means no class is configured and asking for one is an error.
	BlockioClass func(name string) (*specs.LinuxBlockIO, error)
	RdtClass     func(name string) (*specs.LinuxIntelRdt, error)
	// HostNetwork and HostIPC say that the container's pod uses the
	// node's network or IPC namespace: a plugin's net.* or IPC sysctl
	// would change the node's, and a network device cannot be moved into
	// the node's own namespace, so those adjustments are refused. Both
	// false: the pod has namespaces of its own.
	HostNetwork, HostIPC bool

	// memswFile is probed on cgroup v1 hosts for swap accounting; empty
	// means the real one (tests point it elsewhere).
	memswFile string
}

// ApplyAdjustment applies every field of an NRI adjustment to s, or fails
// naming the plugin and the field: nothing is ignored. On error s may be
// partly changed; callers build a new spec for a retry.
//
// Removals ("-key" entries) of annotations, mounts, env variables and
// devices are applied before additions, as the NRI merge records them;
// namespaces are applied in order. Mounts end up sorted so that a mount
// comes after the mounts of its parent directories.
func ApplyAdjustment(s *specs.Spec, adj *api.ContainerAdjustment, o AdjustOptions) error {
	if adj == nil {
		return nil
	}
	if s == nil {
		return invalidf("spec: missing")
	}
	a, err := newAdjuster(s, &o)
	if err != nil {
		return err
	}
	return a.apply(adj)
}

// UpdateOptions say how an NRI resources update reaches a runtime.
type UpdateOptions struct {
	// ContainerID is the container updated; Owners is keyed by it.
	ContainerID string
	// Owners, when set, names the plugin behind each field in errors (the
	// owners a CreateContainer merge recorded, which cover its updates of
	// other containers too). Without an owner for the field, Plugin names
	// it; Plugin may be a list ("10-a, 20-b") or empty. With neither,
	// errors say "an NRI plugin", or "an NRI plugin's <Request>" when
	// Request names the NRI call the update came with ("UpdateContainers").
	Owners       *api.OwningPlugins
	Plugin       string
	Request      string
	Features     *features.Features
	RuntimeName  string
	Host         *Host
	BlockioClass func(name string) (*specs.LinuxBlockIO, error)
	RdtClass     func(name string) (*specs.LinuxIntelRdt, error)

	// memswFile: see AdjustOptions.
	memswFile string
}

// NRIResourcesFromCRI converts CRI resources to NRI's, as plugins see a
// pod's resources and overhead and the resources of an
// UpdateContainerResources request: the same mapping as CRI requests get
// (zero values are unset), without the checks, which the values passed
// when they came in. CPU and memory are always present; nil gives nil.
func NRIResourcesFromCRI(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := NRIResources(fromCRI(r))
	if out.Memory == nil {
		out.Memory = &api.LinuxMemory{}
	}
	if out.Cpu == nil {
		out.Cpu = &api.LinuxCPU{}
	}
	return out
}

// pluginError says which plugin did what to which field; err starts with
// the field.
func pluginError(plugin, verb string, err error) error {
	return requestError(plugin, "", verb, err)
}

// requestError is pluginError for a change that came with NRI call
// request (empty: unknown), naming the request when the plugin is unknown.
func requestError(plugin, request, verb string, err error) error {
	who := "an NRI plugin"
	switch {
	case plugin != "":
		who = fmt.Sprintf("nri plugin %q", plugin)
	case request != "":
		who = "an NRI plugin's " + request
	}
	return fmt.Errorf("%s %s %w", who, verb, err)
}
