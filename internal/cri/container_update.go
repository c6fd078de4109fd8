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
//
// Plugins' updates of other containers are applied first; their failures
// are logged and never fail this call (kubelet's resize of this container
// must not fail because a side update of another one did). A plugin's
// update of this container that cannot be applied fails the call, unless
// it is marked IgnoreFailure: then the request's resources alone are
// applied (docs/nri-engine.md).
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
		// shrinks them before this one grows. Failures are logged only.
		s.applyUpdates(ctx, upds, rec.ID, updateSource{request: "UpdateContainer"})
	}

	if err := s.updateWithPlugins(ctx, c, r.GetLinux(), own); err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "container resources updated", "container_id", rec.ID)
	if h != nil {
		c.mu.Lock()
		view = nriContainerLocked(c)
		c.mu.Unlock()
		if err := h.PostUpdateContainer(ctx, s.podView(rec.SandboxID), view); err != nil {
			s.log.WarnContext(ctx, "nri post update container", "container_id", rec.ID, "error", err)
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// updateWithPlugins merges the request into the recorded resources (read
// under c.upd, so a plugin's update that landed meanwhile is kept), lets
// the plugins' update for this container supersede the fields it sets, and
// updates the runtime and the record. When the plugins' part cannot be
// applied (refused, or the runtime update with it fails) and it is marked
// IgnoreFailure, the request alone is applied.
func (s *Service) updateWithPlugins(ctx context.Context, c *container, in *runtimeapi.LinuxContainerResources, own *api.ContainerUpdate) error {
	id := c.rec.ID
	res := own.GetLinux().GetResources()
	requestOnly := func(cur *specs.LinuxResources) (*specs.LinuxResources, error) { return mergeResources(cur, in) }
	if res == nil {
		return s.updateResources(ctx, c, requestOnly)
	}
	opts := s.updateOptions(id, s.handlerOf(c.rec.SandboxID))
	opts.Request = "UpdateContainer"
	var merged bool // the container was updatable and the plugins' part was tried
	err := s.updateResources(ctx, c, func(cur *specs.LinuxResources) (*specs.LinuxResources, error) {
		merged = true
		next, err := mergeResources(cur, in)
		if err != nil {
			return nil, err
		}
		if next, err = oci.ApplyUpdate(next, res, opts); err != nil {
			return nil, fmt.Errorf("nri update of container %s: %w", id, err)
		}
		return next, nil
	})
	if err == nil || !merged || !own.GetIgnoreFailure() {
		return err
	}
	s.log.WarnContext(ctx, "nri container update failed, applying the request alone", "container_id", id,
		"nri_request", opts.Request, "ignore_failure", true, "error", err)
	return s.updateResources(ctx, c, requestOnly)
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
