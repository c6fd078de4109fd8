package cri

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/nri"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// createHook relays NRI CreateContainer for a container whose spec is
// built and fit, applies the plugins' merged adjustment to spec, fits it
// again, and applies the plugins' updates to other containers. It returns
// who owns which adjusted field. sb.op is held.
//
// From the call on the container is in Snapshot, and the rollback sends
// NRI RemoveContainer: a plugin may have seen (and allocated for) the
// container even when a later plugin, the adjustment or the runtime create
// failed, and it must not keep a phantom. A container that never came into
// being gets only that one event (no StopContainer: it never ran).
func (s *Service) createHook(ctx context.Context, h nriHooks, sb *sandbox, rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec, undo *rollback) (map[string]string, error) {
	id, handler := rec.ID, sb.rec.RuntimeHandler
	view := nriContainerView(rec, cfg, spec)
	view.State = api.ContainerState_CONTAINER_CREATED
	undo.add("nri remove container", func(ctx context.Context) error {
		return h.RemoveContainer(ctx, sb.nriView(), proto.Clone(view).(*api.Container))
	})
	addPending(s, s.pendingCtrs, id, view, undo)

	res, err := h.CreateContainer(ctx, sb.nriView(), proto.Clone(view).(*api.Container))
	if err != nil {
		return nil, fmt.Errorf("nri create container %s: %w", id, err)
	}
	// An empty adjustment leaves the spec alone (and needs no applier).
	if proto.Size(res.Adjust) > 0 {
		ns := sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions()
		err := oci.ApplyAdjustment(spec, res.Adjust, oci.AdjustOptions{
			ContainerID:    id,
			Owners:         res.Owners,
			Features:       s.features[handler],
			RuntimeName:    handler,
			OOMScoreAdjMin: s.opts.OOMScoreAdjMin,
			CDISpecDirs:    s.opts.CDISpecDirs,
			BlockioClass:   s.opts.BlockioClass,
			RdtClass:       s.opts.RdtClass,
			HostNetwork:    ns.GetNetwork() == runtimeapi.NamespaceMode_NODE,
			HostIPC:        ns.GetIpc() == runtimeapi.NamespaceMode_NODE,
		})
		if err != nil {
			return nil, fmt.Errorf("apply nri adjustment to container %s: %w", id, err)
		}
		if err := oci.Fit(spec, s.features[handler]); err != nil {
			return nil, fmt.Errorf("runtime %s: adjusted spec of container %s: %w", handler, id, err)
		}
		adjusted := nriContainerView(rec, cfg, spec)
		adjusted.State = api.ContainerState_CONTAINER_CREATED
		s.mu.Lock()
		s.pendingCtrs[id] = adjusted
		s.mu.Unlock()
	}
	// The merge's owners cover its updates of other containers too (keyed
	// by their ids), so errors name the plugin behind each field.
	src := updateSource{request: "CreateContainer", owners: res.Owners}
	if err := failedUpdatesError(s.applyUpdates(ctx, res.Update, id, src)); err != nil {
		return nil, fmt.Errorf("create container %s: %w", id, err)
	}
	return nri.OwnersTable(res.Owners, id), nil
}
