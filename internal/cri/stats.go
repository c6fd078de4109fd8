package cri

import (
	"context"
	"errors"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// ContainerStats reports a container's resource usage. Unknown is NotFound.
func (s *Service) ContainerStats(ctx context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, err := s.containerStats(c)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports the usage of the containers matching the
// filter; containers whose cgroup is gone (exited) are skipped.
func (s *Service) ListContainerStats(ctx context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	if err := checkContainerFilter(f); err != nil {
		return nil, err
	}
	cs := s.allContainers()
	resp := &runtimeapi.ListContainerStatsResponse{}
	for _, c := range cs {
		c.mu.Lock()
		ok := (f.GetId() == "" || hasPrefix(c.rec.ID, f.GetId())) &&
			(f.GetPodSandboxId() == "" || hasPrefix(c.rec.SandboxID, f.GetPodSandboxId())) &&
			labelsMatch(c.config.GetLabels(), f.GetLabelSelector())
		c.mu.Unlock()
		if !ok {
			continue
		}
		st, err := s.containerStats(c)
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	return resp, nil
}

func (s *Service) containerStats(c *container) (*runtimeapi.ContainerStats, error) {
	c.mu.Lock()
	rec, cfg := c.rec, c.config
	id, cgroupsPath := rec.ID, rec.CgroupsPath
	running := rec.State == store.ContainerRunning || rec.State == store.ContainerCreated
	c.mu.Unlock()
	out := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: id, Metadata: cfg.GetMetadata(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		},
		WritableLayer: s.writableLayer(id),
	}
	if !running {
		return out, nil
	}
	st, err := runtime.CgroupStats(cgroupsPath)
	if errors.Is(err, errdefs.ErrNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	fillCPUMem(st, &out.Cpu, &out.Memory)
	s.fillNanoCores(id, st, out.Cpu)
	out.Swap, out.Io = swapUsage(st), ioUsage(st)
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
func (s *Service) writableLayer(id string) *runtimeapi.FilesystemUsage {
	u, ok := s.sampler.layer(id)
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
func (s *Service) fillNanoCores(id string, st *runtime.Stats, cpu *runtimeapi.CpuUsage) {
	if r, ok := s.sampler.cpuRate(id, cpuSample{usage: st.CPUUsageNanos, at: st.Timestamp}); ok {
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

// PodSandboxStats reports a pod's usage (its cgroup parent) and its
// containers'. Unknown is NotFound.
func (s *Service) PodSandboxStats(ctx context.Context, r *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := s.getSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	st, err := s.sandboxStats(sb)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats reports the usage of the pods matching the filter.
func (s *Service) ListPodSandboxStats(ctx context.Context, r *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := r.GetFilter()
	if err := checkPodFilter(f); err != nil {
		return nil, err
	}
	sbs := s.allSandboxes()
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	for _, sb := range sbs {
		sb.mu.Lock()
		ok := (f.GetId() == "" || hasPrefix(sb.rec.ID, f.GetId())) && labelsMatch(sb.config.GetLabels(), f.GetLabelSelector())
		sb.mu.Unlock()
		if !ok {
			continue
		}
		st, err := s.sandboxStats(sb)
		if err != nil {
			return nil, err
		}
		resp.Stats = append(resp.Stats, st)
	}
	return resp, nil
}

func (s *Service) sandboxStats(sb *sandbox) (*runtimeapi.PodSandboxStats, error) {
	sb.mu.Lock()
	rec, cfg := sb.rec, sb.config
	sb.mu.Unlock()
	out := &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id: rec.ID, Metadata: cfg.GetMetadata(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		},
		Linux: &runtimeapi.LinuxPodSandboxStats{},
	}
	if rec.State == store.SandboxReady {
		st, err := runtime.CgroupStats(rec.CgroupParent)
		switch {
		case err == nil:
			fillCPUMem(st, &out.Linux.Cpu, &out.Linux.Memory)
			s.fillNanoCores(rec.ID, st, out.Linux.Cpu)
			out.Linux.Process = &runtimeapi.ProcessUsage{
				Timestamp:    st.Timestamp.UnixNano(),
				ProcessCount: &runtimeapi.UInt64Value{Value: st.PidsCurrent},
			}
			out.Linux.Io = ioUsage(st)
		case !errors.Is(err, errdefs.ErrNotFound):
			return nil, err
		}
	}
	if rec.State == store.SandboxReady && rec.NetNS != "" {
		// Best effort: a pod whose netns is going away has no figures.
		if n, err := podNetwork(rec.NetNS); err == nil {
			out.Linux.Network = n
		}
	}
	for _, c := range s.podContainers(rec.ID) {
		cst, err := s.containerStats(c)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		if cst != nil {
			out.Linux.Containers = append(out.Linux.Containers, cst)
		}
	}
	return out, nil
}
