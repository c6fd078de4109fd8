package cri

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// UpdateContainerResources changes a created or running container's
// resources in the runtime and records them.
func (s *Service) UpdateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if r.GetLinux() == nil {
		return nil, fmt.Errorf("linux: must be set on this Linux node: %w", errdefs.ErrInvalidArgument)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.rec
	if rec.State != store.ContainerCreated && rec.State != store.ContainerRunning {
		return nil, fmt.Errorf("container %s is %s: only created or running containers can be updated: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	var cur specs.LinuxResources
	if len(rec.Resources) > 0 {
		if err := json.Unmarshal(rec.Resources, &cur); err != nil {
			return nil, fmt.Errorf("decode recorded resources of %s: %w", rec.ID, err)
		}
	}
	next, err := mergeResources(&cur, r.GetLinux())
	if err != nil {
		return nil, err
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return nil, err
	}
	if err := rt.Update(ctx, rec.ID, next); err != nil {
		return nil, fmt.Errorf("update container %s: %w", rec.ID, err)
	}
	b, err := json.Marshal(next)
	if err != nil {
		return nil, err
	}
	rec.Resources = b
	if err := s.opts.Store.PutContainer(rec); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "container resources updated", "container_id", rec.ID)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// mergeResources applies a CRI resources update to the current OCI
// resources: fields the request sets replace the current ones.
func mergeResources(cur *specs.LinuxResources, in *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	out := *cur
	if out.CPU == nil {
		out.CPU = &specs.LinuxCPU{}
	} else {
		cpu := *out.CPU
		out.CPU = &cpu
	}
	if out.Memory == nil {
		out.Memory = &specs.LinuxMemory{}
	} else {
		m := *out.Memory
		out.Memory = &m
	}
	if in.CpuShares < 0 || in.CpuQuota < -1 || in.CpuPeriod < 0 || in.MemoryLimitInBytes < 0 {
		return nil, fmt.Errorf("linux: negative cpu_shares %d, cpu_quota %d, cpu_period %d or memory_limit_in_bytes %d: %w",
			in.CpuShares, in.CpuQuota, in.CpuPeriod, in.MemoryLimitInBytes, errdefs.ErrInvalidArgument)
	}
	if in.CpuShares > 0 {
		v := uint64(in.CpuShares)
		out.CPU.Shares = &v
	}
	if in.CpuQuota != 0 {
		v := in.CpuQuota
		out.CPU.Quota = &v
	}
	if in.CpuPeriod > 0 {
		v := uint64(in.CpuPeriod)
		out.CPU.Period = &v
	}
	if in.CpusetCpus != "" {
		out.CPU.Cpus = in.CpusetCpus
	}
	if in.CpusetMems != "" {
		out.CPU.Mems = in.CpusetMems
	}
	if in.MemoryLimitInBytes > 0 {
		v := in.MemoryLimitInBytes
		out.Memory.Limit = &v
	}
	if in.MemorySwapLimitInBytes != 0 {
		v := in.MemorySwapLimitInBytes
		out.Memory.Swap = &v
	}
	if len(in.HugepageLimits) > 0 {
		out.HugepageLimits = nil
		for _, h := range in.HugepageLimits {
			out.HugepageLimits = append(out.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: h.PageSize, Limit: h.Limit})
		}
	}
	if len(in.Unified) > 0 {
		out.Unified = in.Unified
	}
	return &out, nil
}
