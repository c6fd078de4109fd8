package podstats

import (
	"context"
	"errors"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// minRateGap is the shortest span a CPU rate is computed over: below it
// the rate is mostly noise of when the cgroup was read.
const minRateGap = 500 * time.Millisecond

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

// layer returns the last measure of a container's writable layer,
// measuring it now if there is none yet. ok is false when it cannot be
// measured.
func (c *Collector) layer(id string) (image.LayerUsage, bool) {
	if c.layers == nil {
		return image.LayerUsage{}, false
	}
	c.mu.Lock()
	u, ok := c.fs[id]
	c.mu.Unlock()
	if ok {
		return u, true
	}
	u, err := c.layers.WritableLayerUsage(id)
	if err != nil {
		return image.LayerUsage{}, false
	}
	c.mu.Lock()
	c.fs[id] = u
	c.mu.Unlock()
	return u, true
}

// cpuRate records cur for id and returns the usage rate in nanocores.
func (c *Collector) cpuRate(id string, cur cpuSample) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := c.cpu[id]
	if cs == nil {
		cs = &cpuSeries{}
		c.cpu[id] = cs
	}
	r, ok := cs.rate(cur)
	cs.observe(cur)
	return r, ok
}

// Run runs the sampler until ctx ends: a sweep at once, then one every
// period. The caller owns the goroutine it runs on.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.period)
	defer t.Stop()
	for {
		c.SampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SampleOnce is one sweep: it measures the writable layer of every running
// container (and of any container never measured: an exited container's
// layer does not change), takes a CPU sample of every running container
// and ready pod, forgets what is gone, and has the image filesystem
// measured. What it cannot measure is logged (Debug) and left as it was.
func (c *Collector) SampleOnce(ctx context.Context) {
	live := map[string]bool{}
	for _, ctr := range c.src.Containers() {
		live[ctr.ID] = true
		c.sampleLayer(ctx, ctr)
		if ctr.State == store.ContainerRunning && ctr.CgroupsPath != "" {
			c.sampleCPU(ctr.ID, ctr.CgroupsPath)
		}
		if ctx.Err() != nil {
			return
		}
	}
	for _, p := range c.src.Pods() {
		live[p.ID] = true
		if p.State == store.SandboxReady && p.CgroupParent != "" {
			c.sampleCPU(p.ID, p.CgroupParent)
		}
	}
	c.mu.Lock()
	for id := range c.fs {
		if !live[id] {
			delete(c.fs, id)
		}
	}
	for id := range c.cpu {
		if !live[id] {
			delete(c.cpu, id)
		}
	}
	c.mu.Unlock()
	// The image store's figure, measured now that the writable layers
	// are, so kubelet's ImageFsInfo finds it ready.
	if _, err := c.images.FsInfo(); err != nil {
		c.log.DebugContext(ctx, "measure image filesystem", "error", err)
	}
}

// sampleLayer measures ctr's writable layer if it is running or was
// never measured.
func (c *Collector) sampleLayer(ctx context.Context, ctr Container) {
	if c.layers == nil {
		return
	}
	c.mu.Lock()
	_, measured := c.fs[ctr.ID]
	c.mu.Unlock()
	if ctr.State != store.ContainerRunning && measured {
		return
	}
	u, err := c.layers.WritableLayerUsage(ctr.ID)
	switch {
	case err == nil:
		c.mu.Lock()
		c.fs[ctr.ID] = u
		c.mu.Unlock()
	case !errors.Is(err, errdefs.ErrNotFound):
		c.log.DebugContext(ctx, "measure writable layer", "container_id", ctr.ID, "error", err)
	}
}

func (c *Collector) sampleCPU(id, cgroupsPath string) {
	st, err := runtime.CgroupStats(cgroupsPath)
	if err != nil {
		return
	}
	c.cpuRate(id, cpuSample{usage: st.CPUUsageNanos, at: st.Timestamp})
}
