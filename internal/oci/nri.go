package oci

import (
	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

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
	// PodNamespaces tells which namespaces the container shares with its
	// pod (for sysctl validation); zero means the usual pod sharing (net,
	// ipc, uts private to the pod).
	HostNetwork, HostIPC bool
}

// ApplyAdjustment applies every field of an NRI adjustment to s, or fails
// naming the plugin and the field: nothing is ignored. On error s may be
// partly changed; callers build a new spec for a retry.
func ApplyAdjustment(s *specs.Spec, adj *api.ContainerAdjustment, o AdjustOptions) error {
	if adj == nil {
		return nil
	}
	return errdefs.ErrNotImplemented
}

// UpdateOptions say how an NRI resources update reaches a runtime.
type UpdateOptions struct {
	// ContainerID and Plugin name the update in errors; Plugin may be a
	// list ("10-a, 20-b") or empty.
	ContainerID  string
	Plugin       string
	Features     *features.Features
	RuntimeName  string
	Host         *Host
	BlockioClass func(name string) (*specs.LinuxBlockIO, error)
	RdtClass     func(name string) (*specs.LinuxIntelRdt, error)
}

// ApplyUpdate returns cur with the NRI update applied. Fields the
// runtime's update command cannot change on a running container are an
// error naming them, never dropped.
func ApplyUpdate(cur *specs.LinuxResources, upd *api.LinuxResources, o UpdateOptions) (*specs.LinuxResources, error) {
	return nil, errdefs.ErrNotImplemented
}

// NRIContainer fills the spec-derived fields of c (args, env, mounts,
// hooks, rlimits, user, linux: namespaces, devices, resources, oom score
// adj, cgroups path, io priority, seccomp, sysctls, scheduler, RDT,
// memory policy, net devices) from s.
func NRIContainer(s *specs.Spec, c *api.Container) {}

// NRIResources converts OCI resources to NRI's; nil gives nil.
func NRIResources(r *specs.LinuxResources) *api.LinuxResources { return nil }

// NRIPodLinux fills the spec-derived linux fields of a pod (namespaces,
// cgroups path, resources) from its infra container's spec.
func NRIPodLinux(s *specs.Spec) *api.LinuxPodSandbox { return nil }
