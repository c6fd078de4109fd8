package podstats

import (
	"slices"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/store"
)

// fakeSource is a hub's pods and containers, set by the test.
type fakeSource struct {
	mu   sync.Mutex
	pods []Pod
	ctrs []Container
}

func (f *fakeSource) Pods() []Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pods)
}

func (f *fakeSource) Containers() []Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ctrs)
}

func (f *fakeSource) PodContainers(podID string) []Container {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Container
	for _, c := range f.ctrs {
		if c.PodID == podID {
			out = append(out, c)
		}
	}
	return out
}

// addPod adds a ready pod in cgroup cg.
func (f *fakeSource) addPod(id, cg string) Pod {
	p := Pod{
		ID: id, Metadata: &runtimeapi.PodSandboxMetadata{Name: id, Namespace: "default", Uid: id + "-uid"},
		Labels: map[string]string{"app": id}, State: store.SandboxReady, CgroupParent: cg, CreatedAt: time.Now().UnixNano(),
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = append(f.pods, p)
	return p
}

// addContainer adds a container of pod in state st, in cgroup cg.
func (f *fakeSource) addContainer(pod, id string, st store.ContainerState, cg string) Container {
	c := Container{
		ID: id, PodID: pod, Metadata: &runtimeapi.ContainerMetadata{Name: id}, Labels: map[string]string{"c": id},
		Image: "busybox", State: st, CgroupsPath: cg,
	}
	if st == store.ContainerRunning {
		c.StartedAt = time.Now().UnixNano()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs = append(f.ctrs, c)
	return c
}

// setState changes container id's state.
func (f *fakeSource) setState(id string, st store.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.ctrs {
		if f.ctrs[i].ID == id {
			f.ctrs[i].State = st
		}
	}
}

// remove forgets container id.
func (f *fakeSource) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs = slices.DeleteFunc(f.ctrs, func(c Container) bool { return c.ID == id })
}

// noLayers is an image service that cannot measure writable layers.
type noLayers struct{}

func (noLayers) FsInfo() (image.FsUsage, error) { return image.FsUsage{}, nil }

// layerImages measures writable layers; each measure grows the layer by 1
// MiB so a test sees when it was taken.
type layerImages struct {
	noLayers
	mu       sync.Mutex
	measures map[string]int
}

func newLayerImages() *layerImages { return &layerImages{measures: map[string]int{}} }

func (l *layerImages) WritableLayerUsage(id string) (image.LayerUsage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.measures[id]++
	return image.LayerUsage{Mountpoint: "/var", UsedBytes: uint64(l.measures[id]) << 20, InodesUsed: 3, Time: time.Now()}, nil
}

func (l *layerImages) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.measures[id]
}
