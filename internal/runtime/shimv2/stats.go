package shimv2

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"

	"github.com/crin-dev/crin/internal/runtime"
)

// Type URLs of the metrics a shim's Stats returns (containerd's cgroups
// packages, the same messages for every shim).
const (
	metricsV1URL = "io.containerd.cgroups.v1.Metrics"
	metricsV2URL = "io.containerd.cgroups.v2.Metrics"
)

// Stats asks the shim for a running container's usage, for shims whose
// containers' usage is not in their own cgroups: in gVisor a pod's
// containers all run inside its sandbox process, and the cgroup runsc
// makes for each workload container stays empty; the shim reports what
// the sandbox's kernel counts per container ("runsc events --stats").
// Other shims are errdefs.ErrNotImplemented (read the container's
// cgroup). A container that is not running is errdefs.ErrNotFound.
func (r *Runtime) Stats(ctx context.Context, id string) (*runtime.Stats, error) {
	if !r.shimStats {
		return nil, fmt.Errorf("stats of container %s: read its cgroup: %w", id, errdefs.ErrNotImplemented)
	}
	_, m, err := r.known(id)
	if err != nil {
		return nil, err
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return nil, fmt.Errorf("stats of container %s: %w: %w", id, err, errdefs.ErrNotFound)
	}
	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	resp, err := c.task.Stats(cctx, &task.StatsRequest{ID: id})
	if err != nil {
		err = fromShim(err)
		if st, serr := r.Status(ctx, id); serr == nil && st.State != runtime.StateRunning {
			return nil, fmt.Errorf("stats of container %s: %w: %w", id, err, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("stats of container %s: %w", id, err)
	}
	st, err := decodeMetrics(resp.GetStats().GetTypeUrl(), resp.GetStats().GetValue())
	if err != nil {
		return nil, fmt.Errorf("stats of container %s: %w", id, err)
	}
	st.Timestamp = time.Now()
	return st, nil
}

// decodeMetrics turns a shim's cgroup v1 or v2 metrics into Stats.
func decodeMetrics(url string, data []byte) (*runtime.Stats, error) {
	switch url {
	case metricsV2URL:
		var m v2.Metrics
		if err := proto.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", url, err)
		}
		mem := m.GetMemory()
		return &runtime.Stats{
			CPUUsageNanos:    m.GetCPU().GetUsageUsec() * 1000,
			CPUUserNanos:     m.GetCPU().GetUserUsec() * 1000,
			CPUSystemNanos:   m.GetCPU().GetSystemUsec() * 1000,
			MemoryUsageBytes: mem.GetUsage(),
			MemoryWorkingSet: sub0(mem.GetUsage(), mem.GetInactiveFile()),
			MemoryCacheBytes: mem.GetFile(),
			MemoryLimitBytes: limit(mem.GetUsageLimit()),
			PidsCurrent:      m.GetPids().GetCurrent(),
		}, nil
	case metricsV1URL:
		var m v1.Metrics
		if err := proto.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", url, err)
		}
		mem := m.GetMemory()
		return &runtime.Stats{
			CPUUsageNanos:    m.GetCPU().GetUsage().GetTotal(),
			CPUUserNanos:     m.GetCPU().GetUsage().GetUser(),
			CPUSystemNanos:   m.GetCPU().GetUsage().GetKernel(),
			MemoryUsageBytes: mem.GetUsage().GetUsage(),
			MemoryWorkingSet: sub0(mem.GetUsage().GetUsage(), mem.GetTotalInactiveFile()),
			MemoryCacheBytes: mem.GetCache(),
			MemoryLimitBytes: limit(mem.GetUsage().GetLimit()),
			PidsCurrent:      m.GetPids().GetCurrent(),
		}, nil
	default:
		return nil, fmt.Errorf("metrics of unknown type %q", url)
	}
}

func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// limit is 0 for "no limit" (the kernel's and runsc's huge values).
func limit(v uint64) uint64 {
	if v >= 1<<62 {
		return 0
	}
	return v
}
