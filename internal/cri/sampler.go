package cri

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// DefaultStatsPeriod is how often the stats sampler measures writable
// layers and takes CPU samples when Options.StatsPeriod is zero: kubelet
// asks for stats about every 10 s.
const DefaultStatsPeriod = 10 * time.Second

// minRateGap is the shortest span a CPU rate is computed over: below it
// the rate is mostly noise of when the cgroup was read.
const minRateGap = 500 * time.Millisecond

// writableLayers is the optional capability of Images to measure the
// writable layer of a container's rootfs.
type writableLayers interface {
	WritableLayerUsage(containerID string) (image.LayerUsage, error)
}

// cpuSample is a cumulative CPU usage at a time.
type cpuSample struct {
	usage uint64 // ns
	at    time.Time
}

// cpuSeries keeps the last two CPU samples of a cgroup.
type cpuSeries struct {
	prev, last cpuSample
}

// observe records a sample unless it is too close after the last one (a
// burst of requests must not shrink the span rates are computed over).
func (cs *cpuSeries) observe(s cpuSample) {
	if !cs.last.at.IsZero() && s.at.Sub(cs.last.at) < minRateGap {
		return
	}
	if s.usage < cs.last.usage {
		// The cgroup was recreated: start over.
		*cs = cpuSeries{}
	}
	cs.prev, cs.last = cs.last, s
}

// rate is the usage in nanocores between the latest sample at least
// minRateGap older than cur and cur; ok is false when there is none (the
// first sample of a cgroup) or the counter went backwards.
func (cs *cpuSeries) rate(cur cpuSample) (nanoCores uint64, ok bool) {
	base := cs.last
	if base.at.IsZero() || cur.at.Sub(base.at) < minRateGap {
		base = cs.prev
	}
	if base.at.IsZero() || cur.usage < base.usage {
		return 0, false
	}
	dt := cur.at.Sub(base.at)
	if dt < minRateGap {
		return 0, false
	}
	// ns of CPU per ns of wall time is cores; times 1e9 is nanocores.
	// Compute in float64: usage deltas times 1e9 overflow uint64.
	return uint64(float64(cur.usage-base.usage) / float64(dt.Nanoseconds()) * 1e9), true
}

// sampler holds the figures the stats sampler measured: writable layer
// usage per container and CPU samples per container and pod (by id;
// container and pod ids never collide).
type sampler struct {
	period time.Duration
	layers writableLayers // nil when Images cannot measure layers

	// mu guards the maps; never held across a walk or a cgroup read.
	mu  sync.Mutex
	fs  map[string]image.LayerUsage
	cpu map[string]*cpuSeries
}

func newSampler(period time.Duration, images Images) *sampler {
	if period <= 0 {
		period = DefaultStatsPeriod
	}
	sm := &sampler{period: period, fs: map[string]image.LayerUsage{}, cpu: map[string]*cpuSeries{}}
	sm.layers, _ = images.(writableLayers)
	return sm
}

// layer returns the last measure of a container's writable layer,
// measuring it now if there is none yet. ok is false when it cannot be
// measured.
func (sm *sampler) layer(id string) (image.LayerUsage, bool) {
	if sm.layers == nil {
		return image.LayerUsage{}, false
	}
	sm.mu.Lock()
	u, ok := sm.fs[id]
	sm.mu.Unlock()
	if ok {
		return u, true
	}
	u, err := sm.layers.WritableLayerUsage(id)
	if err != nil {
		return image.LayerUsage{}, false
	}
	sm.mu.Lock()
	sm.fs[id] = u
	sm.mu.Unlock()
	return u, true
}

// cpuRate records cur for id and returns the usage rate in nanocores.
func (sm *sampler) cpuRate(id string, cur cpuSample) (uint64, bool) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	cs := sm.cpu[id]
	if cs == nil {
		cs = &cpuSeries{}
		sm.cpu[id] = cs
	}
	r, ok := cs.rate(cur)
	cs.observe(cur)
	return r, ok
}

// runSampler measures until ctx ends: once at once, then every period.
func (s *Service) runSampler(ctx context.Context) {
	t := time.NewTicker(s.sampler.period)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleOnce measures the writable layer of every running container (and
// of any container never measured: an exited container's layer does not
// change), takes a CPU sample of every running container and ready pod,
// and forgets what is gone.
func (s *Service) sampleOnce(ctx context.Context) {
	sm := s.sampler
	live := map[string]bool{}
	for _, c := range s.allContainers() {
		c.mu.Lock()
		id, state, cg := c.rec.ID, c.rec.State, c.rec.CgroupsPath
		c.mu.Unlock()
		live[id] = true
		sm.mu.Lock()
		_, measured := sm.fs[id]
		sm.mu.Unlock()
		if sm.layers != nil && (state == store.ContainerRunning || !measured) {
			u, err := sm.layers.WritableLayerUsage(id)
			switch {
			case err == nil:
				sm.mu.Lock()
				sm.fs[id] = u
				sm.mu.Unlock()
			case !errors.Is(err, errdefs.ErrNotFound):
				s.log.DebugContext(ctx, "measure writable layer", "container_id", id, "error", err)
			}
		}
		if state == store.ContainerRunning && cg != "" {
			s.sampleCPU(id, cg)
		}
		if ctx.Err() != nil {
			return
		}
	}
	for _, sb := range s.allSandboxes() {
		sb.mu.Lock()
		id, state, cg := sb.rec.ID, sb.rec.State, sb.rec.CgroupParent
		sb.mu.Unlock()
		live[id] = true
		if state == store.SandboxReady && cg != "" {
			s.sampleCPU(id, cg)
		}
	}
	sm.mu.Lock()
	for id := range sm.fs {
		if !live[id] {
			delete(sm.fs, id)
		}
	}
	for id := range sm.cpu {
		if !live[id] {
			delete(sm.cpu, id)
		}
	}
	sm.mu.Unlock()
	// The image store's figure, measured now that the writable layers
	// are, so kubelet's ImageFsInfo finds it ready.
	if _, err := s.opts.Images.FsInfo(); err != nil {
		s.log.DebugContext(ctx, "measure image filesystem", "error", err)
	}
}

func (s *Service) sampleCPU(id, cgroupsPath string) {
	st, err := runtime.CgroupStats(cgroupsPath)
	if err != nil {
		return
	}
	s.sampler.cpuRate(id, cpuSample{usage: st.CPUUsageNanos, at: st.Timestamp})
}
