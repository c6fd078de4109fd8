package podstats

import (
	"errors"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// ContainerStats reads ctr's stats: CPU, memory, swap and IO pressure from
// its cgroup (or ctr.Usage) while it is created or running (none once the cgroup is
// gone), its writable layer as the sampler last measured it. It fails
// when the cgroup cannot be read.
func (c *Collector) ContainerStats(ctr Container) (*runtimeapi.ContainerStats, error) {
	out := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: ctr.ID, Metadata: ctr.Metadata, Labels: ctr.Labels, Annotations: ctr.Annotations,
		},
		WritableLayer: c.writableLayer(ctr.ID),
	}
	if ctr.State != store.ContainerRunning && ctr.State != store.ContainerCreated {
		return out, nil
	}
	st, err := usage(ctr)
	if errors.Is(err, errdefs.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	fillCPUMem(st, &out.Cpu, &out.Memory)
	c.fillNanoCores(ctr.ID, st, out.Cpu)
	out.Swap, out.Io = swapUsage(st), ioUsage(st)
	return out, nil
}

// usage is ctr's usage: from ctr.Usage when it has one that answers,
// else from its cgroup.
func usage(ctr Container) (*runtime.Stats, error) {
	if ctr.Usage != nil {
		st, err := ctr.Usage()
		if !errors.Is(err, errdefs.ErrNotImplemented) {
			return st, err
		}
	}
	return runtime.CgroupStats(ctr.CgroupsPath)
}

// ListContainerStats is the ContainerStats of each of cs, leaving out
// those that are gone.
func (c *Collector) ListContainerStats(cs []Container) ([]*runtimeapi.ContainerStats, error) {
	var out []*runtimeapi.ContainerStats
	for _, ctr := range cs {
		st, err := c.ContainerStats(ctr)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// psi is a runtime.Pressure as CRI carries it (total in nanoseconds); nil
// stays nil, so kubelet reads "no PSI here" rather than zero pressure.
func psi(p *runtime.Pressure) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	line := func(l runtime.PressureLine) *runtimeapi.PsiData {
		return &runtimeapi.PsiData{Total: uint64(l.Total), Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
	}
	return &runtimeapi.PsiStats{Some: line(p.Some), Full: line(p.Full)}
}

// ioUsage is the cgroup's IO pressure, the one IO figure CRI carries;
// nil without PSI.
func ioUsage(st *runtime.Stats) *runtimeapi.IoUsage {
	if st.IOPressure == nil {
		return nil
	}
	return &runtimeapi.IoUsage{Timestamp: st.Timestamp.UnixNano(), Psi: psi(st.IOPressure)}
}

// swapUsage is the cgroup's swap, where the host accounts it.
func swapUsage(st *runtime.Stats) *runtimeapi.SwapUsage {
	if !st.HasSwap {
		return nil
	}
	u := &runtimeapi.SwapUsage{Timestamp: st.Timestamp.UnixNano(), SwapUsageBytes: &runtimeapi.UInt64Value{Value: st.SwapUsageBytes}}
	if st.SwapLimitBytes > 0 {
		u.SwapAvailableBytes = &runtimeapi.UInt64Value{Value: sub0(st.SwapLimitBytes, st.SwapUsageBytes)}
	}
	return u
}

func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// writableLayer is the container's writable layer usage as the sampler
// last measured it (measured now the first time). Its FsId is the
// mountpoint of the filesystem holding it, which kubelet looks up for
// capacity; without a measure only the timestamp is set.
func (c *Collector) writableLayer(id string) *runtimeapi.FilesystemUsage {
	u, ok := c.layer(id)
	if !ok {
		return &runtimeapi.FilesystemUsage{Timestamp: time.Now().UnixNano()}
	}
	return &runtimeapi.FilesystemUsage{
		Timestamp:  u.Time.UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
	}
}

// fillNanoCores sets the CPU rate between the last sample at least
// minRateGap old and this one; left unset for a cgroup's first sample
// (kubelet then computes it from its own previous reading).
func (c *Collector) fillNanoCores(id string, st *runtime.Stats, cpu *runtimeapi.CpuUsage) {
	if r, ok := c.cpuRate(id, cpuSample{usage: st.CPUUsageNanos, at: st.Timestamp}); ok {
		cpu.UsageNanoCores = &runtimeapi.UInt64Value{Value: r}
	}
}

func fillCPUMem(st *runtime.Stats, cpu **runtimeapi.CpuUsage, mem **runtimeapi.MemoryUsage) {
	ts := st.Timestamp.UnixNano()
	*cpu = &runtimeapi.CpuUsage{
		Timestamp:            ts,
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: st.CPUUsageNanos},
		Psi:                  psi(st.CPUPressure),
	}
	*mem = &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: st.MemoryWorkingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: st.MemoryUsageBytes},
		RssBytes:        &runtimeapi.UInt64Value{Value: st.MemoryRSSBytes},
		PageFaults:      &runtimeapi.UInt64Value{Value: st.MemoryPageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: st.MemoryMajorFaults},
		Psi:             psi(st.MemoryPressure),
	}
	if st.MemoryLimitBytes > 0 {
		avail := uint64(0)
		if st.MemoryLimitBytes > st.MemoryWorkingSet {
			avail = st.MemoryLimitBytes - st.MemoryWorkingSet
		}
		(*mem).AvailableBytes = &runtimeapi.UInt64Value{Value: avail}
	}
}

// PodSandboxStats reads p's stats: CPU, memory, processes and IO
// pressure from its cgroup and its network from its network namespace
// while it is ready, and the ContainerStats of its containers. It fails
// when a cgroup cannot be read.
func (c *Collector) PodSandboxStats(p Pod) (*runtimeapi.PodSandboxStats, error) {
	out := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id: p.ID, Metadata: p.Metadata, Labels: p.Labels, Annotations: p.Annotations,
		},
		Linux: &runtimeapi.LinuxPodSandboxStats{},
	}
	if p.State == store.SandboxReady {
		if err := c.podCgroup(p, out.Linux); err != nil {
			return nil, err
		}
	}
	if p.State == store.SandboxReady && p.NetNS != "" {
		// Best effort: a pod whose netns is going away has no figures.
		if n, err := podNetwork(p.NetNS); err == nil {
			out.Linux.Network = n
		}
	}
	for _, ctr := range c.src.PodContainers(p.ID) {
		cst, err := c.ContainerStats(ctr)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		if cst != nil {
			out.Linux.Containers = append(out.Linux.Containers, cst)
		}
	}
	return out, nil
}

// podCgroup fills out with the figures of p's cgroup, none when it is
// gone.
func (c *Collector) podCgroup(p Pod, out *runtimeapi.LinuxPodSandboxStats) error {
	st, err := runtime.CgroupStats(p.CgroupParent)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	fillCPUMem(st, &out.Cpu, &out.Memory)
	c.fillNanoCores(p.ID, st, out.Cpu)
	out.Process = &runtimeapi.ProcessUsage{
		Timestamp:    st.Timestamp.UnixNano(),
		ProcessCount: &runtimeapi.UInt64Value{Value: st.PidsCurrent},
	}
	out.Io = ioUsage(st)
	return nil
}

// ListPodSandboxStats is the PodSandboxStats of each of ps.
func (c *Collector) ListPodSandboxStats(ps []Pod) ([]*runtimeapi.PodSandboxStats, error) {
	var out []*runtimeapi.PodSandboxStats
	for _, p := range ps {
		st, err := c.PodSandboxStats(p)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}
