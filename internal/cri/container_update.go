package cri

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// UpdateContainerResources changes a created or running container's
// resources: NRI UpdateContainer (plugins may change the update and update
// other containers), runtime update, record, NRI PostUpdateContainer.
func (s *Service) UpdateContainerResources(ctx context.Context, r *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if r.GetLinux() == nil {
		return nil, fmt.Errorf("linux: must be set on this Linux node: %w", errdefs.ErrInvalidArgument)
	}
	c.op.Lock()
	defer c.op.Unlock()
	rec := c.rec
	c.mu.Lock()
	err = checkUpdatableLocked(c)
	var view *api.Container
	if err == nil {
		view = nriContainerLocked(c)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Validate the request before any plugin sees it.
	if _, err := mergeResources(&specs.LinuxResources{}, r.GetLinux()); err != nil {
		return nil, err
	}
	if _, err := s.containerRuntime(rec); err != nil {
		return nil, err
	}
	h := s.hooks()
	var own *api.ContainerUpdate
	if h != nil {
		upds, err := h.UpdateContainer(ctx, s.podView(rec.SandboxID), view, nriResourcesFromCRI(r.GetLinux()))
		if err != nil {
			return nil, fmt.Errorf("nri update container %s: %w", rec.ID, err)
		}
		for _, u := range upds {
			if u.GetContainerId() == rec.ID {
				own = u
			}
		}
		// Others first: a plugin making room for this container's growth
		// shrinks them before this one grows.
		if err := failedUpdatesError(s.applyUpdates(ctx, upds, rec.ID)); err != nil {
			return nil, fmt.Errorf("update container %s: %w", rec.ID, err)
		}
	}

	c.mu.Lock()
	err = s.updateResourcesLocked(ctx, c, r.GetLinux(), own)
	if err == nil && h != nil {
		view = nriContainerLocked(c)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "container resources updated", "container_id", rec.ID)
	if h != nil {
		if err := h.PostUpdateContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			s.log.WarnContext(ctx, "nri post update container", "container_id", rec.ID, "error", err)
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// updateResourcesLocked merges the request into the recorded resources
// (read now, so a plugin's update that landed meanwhile is kept), lets the
// plugins' update for this container supersede the fields it sets, and
// updates the runtime and the record. c.mu held.
func (s *Service) updateResourcesLocked(ctx context.Context, c *container, in *runtimeapi.LinuxContainerResources, own *api.ContainerUpdate) error {
	rec := c.rec
	// Checked again: the container may have exited during the NRI hook.
	if err := checkUpdatableLocked(c); err != nil {
		return err
	}
	cur, err := recordedResources(rec)
	if err != nil {
		return err
	}
	next, err := mergeResources(cur, in)
	if err != nil {
		return err
	}
	if res := own.GetLinux().GetResources(); res != nil {
		handler := s.handlerOf(rec.SandboxID)
		if next, err = oci.ApplyUpdate(next, res, s.updateOptions(rec.ID, handler)); err != nil {
			return fmt.Errorf("nri update of container %s: %w", rec.ID, err)
		}
	}
	rt, err := s.containerRuntime(rec)
	if err != nil {
		return err
	}
	if err := rt.Update(ctx, rec.ID, next); err != nil {
		return fmt.Errorf("update container %s: %w", rec.ID, err)
	}
	return s.persistResourcesLocked(rec, next)
}

func checkUpdatableLocked(c *container) error {
	if st := c.rec.State; c.removed || (st != store.ContainerCreated && st != store.ContainerRunning) {
		return fmt.Errorf("container %s is %s: only created or running containers can be updated: %w", c.rec.ID, st, errdefs.ErrFailedPrecondition)
	}
	return nil
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
