package cri

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// UpdatePodSandboxResources records a ready pod's new overhead and total
// resources and relays NRI UpdatePodSandbox (a plugin's error fails the
// call, nothing is recorded) and PostUpdatePodSandbox. kubelet sizes the
// pod cgroup itself before the call; the limits of the pod's infra
// container (when it has one) are crind's, sized at RunPodSandbox from the
// same fields, so they are updated here to what the new ones give (an
// update the runtime refuses fails the call, nothing is recorded). A field
// the request leaves unset keeps its value. Unknown is NotFound; a pod
// that is not ready is FailedPrecondition.
func (s *Service) UpdatePodSandboxResources(ctx context.Context, r *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	for _, f := range []struct {
		name string
		res  *runtimeapi.LinuxContainerResources
	}{{"overhead", r.GetOverhead()}, {"resources", r.GetResources()}} {
		if f.res == nil {
			continue
		}
		// The same rules as CreateContainer, UpdateContainerResources and
		// NRI: kubelet sizes the pod cgroup from these values.
		if _, err := oci.CRIResources(f.name, f.res, nil); err != nil {
			return nil, err
		}
	}
	sb, err := s.getSandboxExact(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if err := checkReadyLocked(sb); err != nil {
		return nil, err
	}
	rec := sb.rec
	cfg := proto.Clone(sb.config).(*runtimeapi.PodSandboxConfig)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	if r.GetOverhead() != nil {
		cfg.Linux.Overhead = r.GetOverhead()
	}
	if r.GetResources() != nil {
		cfg.Linux.Resources = r.GetResources()
	}
	b, err := proto.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode pod config: %w", err)
	}
	view := nriPod(rec, cfg, decodePodLinux(rec))
	h := s.hooks()
	if h != nil {
		err := h.UpdatePodSandbox(ctx, sb.nriView(), view.GetLinux().GetPodOverhead(), view.GetLinux().GetPodResources())
		if err != nil {
			return nil, fmt.Errorf("nri update pod sandbox %s: %w", rec.ID, err)
		}
	}
	if !rec.NoInfra {
		if err := s.updateInfra(ctx, rec, cfg); err != nil {
			return nil, err
		}
	}
	next := *rec
	next.Config = b
	if err := s.opts.Store.PutSandbox(&next); err != nil {
		return nil, err
	}
	sb.mu.Lock()
	rec.Config, sb.config = b, cfg
	sb.mu.Unlock()
	sb.nri.store(view)
	s.log.InfoContext(ctx, "pod sandbox resources updated", "pod_id", rec.ID)
	if h != nil {
		if err := h.PostUpdatePodSandbox(ctx, proto.Clone(view).(*api.PodSandbox)); err != nil {
			s.log.WarnContext(ctx, "nri post update pod sandbox", "pod_id", rec.ID, "error", err)
		}
	}
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// checkReadyLocked fails (FailedPrecondition) unless sb is a ready pod not
// removed: what CreateContainer and UpdatePodSandboxResources need of
// their pod. sb.op is held (it guards removed).
func checkReadyLocked(sb *sandbox) error {
	if rec := sb.rec; sb.removed || rec.State != store.SandboxReady {
		return fmt.Errorf("pod sandbox %s is %s, not ready: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// updateInfra gives pod rec's infra container the resources its spec would
// have with cfg (oci.SandboxResources, as RunPodSandbox gave them).
func (s *Service) updateInfra(ctx context.Context, rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) error {
	res, err := oci.SandboxResources(cfg.GetLinux(), nil)
	if err != nil {
		return err
	}
	rt, ok := s.opts.Runtimes[rec.RuntimeHandler]
	if !ok {
		return fmt.Errorf("pod %s: runtime handler %q is no longer configured: %w", rec.ID, rec.RuntimeHandler, errdefs.ErrFailedPrecondition)
	}
	if err := rt.Update(ctx, rec.ID, res); err != nil {
		return fmt.Errorf("update infra container of pod %s: %w", rec.ID, runtimeUpdateError(err))
	}
	return nil
}
