// Package podstats measures what kubelet asks a runtime about its pods and
// containers: the CRI stats (ContainerStats, PodSandboxStats and their
// lists) and the CRI metrics (ListMetricDescriptors,
// ListPodSandboxMetrics), from the cgroups (internal/runtime's readers),
// the pods' network namespaces and the writable layers; and it runs the
// stats sampler, which measures writable layers and takes CPU samples in
// the background. docs/kubelet-stats.md says where each figure comes from.
//
// The hub (internal/cri) answers the RPCs: it finds and checks what a
// request names and hands it over as a Pod or a Container, a snapshot of
// its record; the Collector reads the figures. What the Collector needs of
// the hub beyond that (every pod and container, for the sampler and the
// metrics) it asks through a Source.
package podstats

import (
	"log/slog"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// DefaultPeriod is how often the stats sampler measures writable layers
// and takes CPU samples when Config.Period is zero: kubelet asks for
// stats about every 10 s.
const DefaultPeriod = 10 * time.Second

// Pod is a pod as the Collector needs it: a snapshot of its record and
// config, taken by the hub.
type Pod struct {
	ID                  string
	Metadata            *runtimeapi.PodSandboxMetadata
	Labels, Annotations map[string]string
	State               store.SandboxState
	// CgroupParent is the pod's cgroup; NetNS its pinned network
	// namespace, empty for host network.
	CgroupParent, NetNS string
	// CreatedAt is when the pod was created, unix nanoseconds.
	CreatedAt int64
}

// Container is a container as the Collector needs it: a snapshot of its
// record and config, taken by the hub.
type Container struct {
	ID, PodID           string
	Metadata            *runtimeapi.ContainerMetadata
	Labels, Annotations map[string]string
	// Image is the image the container was created from, as recorded
	// (the metrics' image label).
	Image       string
	State       store.ContainerState
	CgroupsPath string
	// StartedAt is when the container started, unix nanoseconds; zero
	// before it did.
	StartedAt int64
	// Usage, when set, reads the container's usage instead of its cgroup:
	// its runtime reports it (gVisor, whose containers run inside the
	// sandbox process and leave their own cgroups empty). An
	// errdefs.ErrNotImplemented from it means: read the cgroup.
	Usage func() (*runtime.Stats, error)
}

// Source is what a Collector needs of the hub: the pods and containers
// it knows (visible to CRI clients), as they are now.
type Source interface {
	Pods() []Pod
	Containers() []Container
	// PodContainers are the containers of the pod with this id.
	PodContainers(podID string) []Container
}

// Images is what a Collector needs of the image service: the image
// filesystem's figure, which the sampler refreshes after each sweep. An
// Images that can also measure writable layers (WritableLayerUsage) has
// them measured; without it, the stats carry no writable layer usage.
type Images interface {
	FsInfo() (image.FsUsage, error)
}

// writableLayers is the optional capability of Images to measure the
// writable layer of a container's rootfs.
type writableLayers interface {
	WritableLayerUsage(containerID string) (image.LayerUsage, error)
}

// Config configures a Collector.
type Config struct {
	// Source lists the pods and containers; required.
	Source Source
	// Images measures the image filesystem and writable layers;
	// required.
	Images Images
	// Period is how often the sampler runs (Run); zero means
	// DefaultPeriod.
	Period time.Duration
	// Logger logs what the sampler could not measure (Debug); nil means
	// slog.Default().
	Logger *slog.Logger
}

// Collector reads pods' and containers' figures and keeps what the
// sampler measured: writable layer usage per container and CPU samples
// per container and pod (by id; container and pod ids never collide).
type Collector struct {
	src    Source
	images Images
	layers writableLayers // nil when Images cannot measure layers
	period time.Duration
	log    *slog.Logger

	// mu guards fs and cpu; never held across a walk or a cgroup read.
	mu  sync.Mutex
	fs  map[string]image.LayerUsage
	cpu map[string]*cpuSeries
}

// New returns a Collector for c. Nothing runs until Run.
func New(c Config) *Collector {
	if c.Period <= 0 {
		c.Period = DefaultPeriod
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	col := &Collector{
		src: c.Source, images: c.Images, period: c.Period, log: c.Logger,
		fs: map[string]image.LayerUsage{}, cpu: map[string]*cpuSeries{},
	}
	col.layers, _ = c.Images.(writableLayers)
	return col
}
