// Package oci builds OCI runtime specs from CRI requests and image configs,
// and fits them to what a runtime's features say it accepts.
//
// Everything that reaches this package from a pod, a container config or an
// image is untrusted: every field is validated, and bad input is reported as
// errdefs.ErrInvalidArgument with a message that names the CRI field and the
// value, for example
//
//	linux.sysctls["kernel.foo"]: not a namespaced sysctl: invalid argument
//
// Files read from an image's rootfs (/etc/passwd, /etc/group) are opened
// through os.Root with symlinks resolved as if the rootfs were "/", so a
// hostile image can never make crind read a file outside it.
//
// # Two halves
//
// The spec half (build.go and the files it calls) turns CRI requests into
// specs: SandboxSpec, ContainerSpec, CRIResources, MergeCRIResources, Fit.
// The NRI half (the nri_*.go files) applies plugins' adjustments and
// updates to specs and resources (ApplyAdjustment, ApplyUpdate) and renders
// what plugins see of them (NRIContainer, NRIResources, NRIPodLinux,
// NRIResourcesFromCRI). They share the package because the NRI half must
// accept and refuse values by the same rules as the spec half (the check
// functions of resources.go, sysctl.go, mounts.go, seccomp.go) and fit them
// to the runtime by the same rules (fit.go). The NRI half calls those
// rules and small helpers (mount ordering, namespaces, env lists), never
// SandboxSpec or ContainerSpec; splitting it into its own package would
// mean exporting about forty of them.
//
// # Annotations
//
// The CRI annotations of the pod (for the sandbox) or of the container are
// copied into spec.Annotations. crin adds its own under the "io.crin."
// prefix (see the Annotation constants), and mirrors the type and sandbox id
// under the de-facto "io.kubernetes.cri." keys that VM-based shim v2
// runtimes (Kata) read to tell a pod's infra container from its workloads.
// A CRI annotation cannot override a key crin sets.
package oci

import (
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Annotation keys crin writes into every spec.
const (
	// AnnotationPrefix starts every key crin sets itself; CRI annotations
	// under it are refused, so none in a spec came from a client.
	AnnotationPrefix = "io.crin."
	// AnnotationContainerType is ContainerTypeSandbox or ContainerTypeContainer.
	AnnotationContainerType = "io.crin.container-type"
	// AnnotationSandboxID is the id of the pod the container belongs to.
	AnnotationSandboxID = "io.crin.sandbox-id"
	// AnnotationSandboxName, AnnotationSandboxNamespace and
	// AnnotationSandboxUID come from the pod's metadata.
	AnnotationSandboxName      = "io.crin.sandbox-name"
	AnnotationSandboxNamespace = "io.crin.sandbox-namespace"
	AnnotationSandboxUID       = "io.crin.sandbox-uid"
	// AnnotationContainerName is the container's metadata name.
	AnnotationContainerName = "io.crin.container-name"
	// AnnotationImageName is the image the container was created from, as
	// the CRI request names it.
	AnnotationImageName = "io.crin.image-name"

	// ContainerTypeSandbox marks a pod's infra container.
	ContainerTypeSandbox = "sandbox"
	// ContainerTypeContainer marks a workload container.
	ContainerTypeContainer = "container"

	// annotations understood by shim v2 runtimes such as Kata.
	criContainerTypeKey = "io.kubernetes.cri.container-type"
	criSandboxIDKey     = "io.kubernetes.cri.sandbox-id"
)

// ImageConfig is the part of an image's config a container spec uses.
// It is untrusted input. It repeats the first fields of
// image.RuntimeConfig, which the cri hub copies here: this package does
// not import internal/image.
type ImageConfig struct {
	User       string
	Env        []string
	Entrypoint []string
	Cmd        []string
	WorkingDir string
}

// Host describes what the node offers that changes a spec. A nil *Host in
// the options means DetectHost is called.
type Host struct {
	// CgroupV2 is true on a unified (cgroup v2 only) host. Hybrid and
	// legacy hosts are v1: linux.resources.unified is refused there.
	CgroupV2 bool
	// AppArmor is true when the kernel has AppArmor enabled.
	AppArmor bool
	// Capabilities is crind's capability bounding set: privileged
	// containers and "ALL" get these, and no container can get more. Nil
	// means every capability crin knows.
	Capabilities []string
	// NofileHard is the hard RLIMIT_NOFILE crind runs with; containers get
	// it as their hard limit (capped at 1048576) since crind may lack the
	// privilege to raise it. Zero means 1048576.
	NofileHard uint64
	// NoHugetlb is true when the host has no hugetlb cgroup controller
	// (none mounted on v1, none enabled on v2): kubelet's hugepage limits
	// (a zero limit per page size the pod did not ask for) cannot be
	// applied there, and runc refuses a spec that names them.
	NoHugetlb bool
}

// SandboxOptions describe a pod's infra container (crin-pause).
type SandboxOptions struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
	// Rootfs is the shared read-only pause rootfs (see PreparePauseRoot).
	Rootfs string
	// PauseBinary is bind-mounted read-only at /pause and run as the process.
	PauseBinary string
	// NetNSPath is the pinned network namespace; empty for host network.
	// Empty for a pod network gives the sandbox a new, unpinned namespace.
	NetNSPath string
	// CgroupsPath is the infra container's linux.cgroupsPath.
	CgroupsPath string
	// UserNSPath is the pod's user namespace pinned as a file, required
	// when the pod has one (PodUserNS).
	UserNSPath string
	// OOMScoreAdjMin is crind's own oom_score_adj: lower values are
	// clamped to it (root here lacks CAP_SYS_RESOURCE). The infra container
	// asks for -998, as kubelet's pods expect.
	OOMScoreAdjMin int
	// SeccompProfileRoot is the directory Localhost seccomp profiles are
	// resolved in when the profile path is relative.
	SeccompProfileRoot string
	// Host is the node's description; nil means DetectHost().
	Host *Host
}

// ContainerOptions describe a workload container.
type ContainerOptions struct {
	ID          string
	Config      *runtimeapi.ContainerConfig
	Sandbox     *runtimeapi.PodSandboxConfig
	Image       ImageConfig
	Rootfs      string // mounted overlay of the image
	CgroupsPath string
	// IPCNSPath, UTSNSPath and PIDNSPath are the pod's namespaces pinned
	// as files; the container joins them by these paths (never through
	// /proc/<infra pid>, which a reused pid could make another process's).
	// Each is required when the pod does not use the host's namespace
	// (PIDNSPath only for the POD pid mode).
	IPCNSPath string
	UTSNSPath string
	PIDNSPath string
	// SandboxID is the pod's id, recorded in the annotations.
	SandboxID string
	// TargetPid is the init process of the container named by
	// namespace_options.target_id; required for the TARGET pid mode.
	TargetPid int
	NetNSPath string // empty for host network
	// UserNSPath is the pod's user namespace pinned as a file, required
	// when the pod has one (PodUserNS).
	UserNSPath string
	// HostnamePath, HostsPath and ResolvConfPath are bind-mounted at
	// /etc/hostname, /etc/hosts and /etc/resolv.conf unless the config
	// mounts something there itself. Empty means not mounted.
	HostnamePath   string
	HostsPath      string
	ResolvConfPath string
	// ShmPath is the pod's /dev/shm (a tmpfs on the host) for pods that do
	// not use host IPC; empty means a private tmpfs.
	ShmPath        string
	OOMScoreAdjMin int
	// SeccompProfileRoot is the directory Localhost seccomp profiles are
	// resolved in when the profile path is relative.
	SeccompProfileRoot string
	// Host is the node's description; nil means DetectHost().
	Host *Host
	// ImageVolumes holds, for each mount of Config that names an image
	// (Config.Mounts[i]), the host path bind-mounted read-only in its
	// place: the image's prepared read-only view, with image_sub_path
	// already resolved inside it. An image mount without one is refused.
	ImageVolumes map[int]string
}

// PreparePauseRoot makes the shared read-only rootfs of infra containers in
// dir (idempotent).
func PreparePauseRoot(dir string) error {
	return preparePauseRoot(dir)
}

// invalidf returns an errdefs.ErrInvalidArgument error whose message starts
// with the formatted text (which names the field and the value).
func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// unsupportedf returns an errdefs.ErrNotImplemented error.
func unsupportedf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrNotImplemented)...)
}
