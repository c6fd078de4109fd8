package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/runtime"
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
	c, err := s.getContainerExact(r.GetContainerId())
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
		upds, err := h.UpdateContainer(ctx, s.podView(rec.SandboxID), view, oci.NRIResourcesFromCRI(r.GetLinux()))
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

// updateResources changes a created or running container's resources to
// change(recorded ones): runtime update, then record. It holds c.upd
// throughout, so updates do not interleave, and c.mu only to read and to
// record, so status, list and NRI Snapshot never wait for the runtime.
func (s *Service) updateResources(ctx context.Context, c *container, change func(*specs.LinuxResources) (*specs.LinuxResources, error)) error {
	rt, err := s.containerRuntime(c.rec)
	if err != nil {
		return err
	}
	c.upd.Lock()
	defer c.upd.Unlock()
	c.mu.Lock()
	rec := c.rec
	err = checkUpdatableLocked(c)
	var cur *specs.LinuxResources
	if err == nil {
		cur, err = recordedResources(rec)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	next, err := change(cur)
	if err != nil {
		return err
	}
	if err := rt.Update(ctx, rec.ID, next); err != nil {
		return fmt.Errorf("update container %s: %w", rec.ID, runtimeUpdateError(err))
	}
	// runc's update takes no huge page limits: write them as it would.
	if err := runtime.SetHugetlbLimits(rec.CgroupsPath, next.HugepageLimits); err != nil {
		return fmt.Errorf("update container %s: %w", rec.ID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		// Removed during the runtime update: nothing may write its record.
		return nil
	}
	return s.persistResourcesLocked(rec, next)
}

// recordedResources decodes the container's current OCI resources (empty
// when none were recorded).
func recordedResources(rec *store.Container) (*specs.LinuxResources, error) {
	cur := &specs.LinuxResources{}
	if len(rec.Resources) > 0 {
		if err := json.Unmarshal(rec.Resources, cur); err != nil {
			return nil, fmt.Errorf("decode recorded resources of %s: %w", rec.ID, err)
		}
	}
	return cur, nil
}

// persistResourcesLocked records new current resources; c.mu held.
func (s *Service) persistResourcesLocked(rec *store.Container, res *specs.LinuxResources) error {
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode resources of %s: %w", rec.ID, err)
	}
	rec.Resources = b
	return s.opts.Store.PutContainer(rec)
}

func checkUpdatableLocked(c *container) error {
	if st := c.rec.State; c.removed || (st != store.ContainerCreated && st != store.ContainerRunning) {
		return fmt.Errorf("container %s is %s: only created or running containers can be updated: %w", c.rec.ID, st, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// mergeResources applies a CRI resources update (the request's linux
// field) to the current OCI resources, through the same validation as
// CreateContainer and NRI (oci.MergeCRIResources): fields the request sets
// replace the current ones.
func mergeResources(cur *specs.LinuxResources, in *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	return oci.MergeCRIResources("linux", cur, in, nil)
}

// runtimeUpdateError classifies a failed runtime update: an error the
// runtime backend classified keeps its class; an OCI runtime that ran and
// refused the resources is errdefs.ErrInvalidArgument with its message
// (the values passed crin's checks, so the kernel or the runtime refused
// them for this container); one that could not be run, was killed or
// timed out is errdefs.ErrUnavailable (worth a retry).
func runtimeUpdateError(err error) error {
	for _, known := range []error{errdefs.ErrNotFound, errdefs.ErrFailedPrecondition, errdefs.ErrInvalidArgument,
		errdefs.ErrNotImplemented, errdefs.ErrUnavailable, errdefs.ErrResourceExhausted} {
		if errors.Is(err, known) {
			return err
		}
	}
	var re *runtime.RuntimeError
	if !errors.As(err, &re) {
		return err
	}
	var exit *exec.ExitError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
	case errors.As(err, &exit) && exit.Exited() && re.Msg != "":
		return fmt.Errorf("%s refused the resources: %w: %w", re.Runtime, err, errdefs.ErrInvalidArgument)
	default:
		// Not started (binary missing), killed by a signal, or silent.
		return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
	}
}
