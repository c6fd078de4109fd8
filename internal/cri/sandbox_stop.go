package cri

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/trace"
)

// StopPodSandbox stops every container of the pod (each gets its NRI
// StopContainer), relays NRI StopPodSandbox (once per pod), then stops its
// infra process and tears its network down; the pod stays visible
// meanwhile. Stopping an unknown or stopped pod succeeds: the CRI contract
// says StopPodSandbox must be idempotent and must not return an error if
// all relevant resources have already been reclaimed.
func (s *Service) StopPodSandbox(ctx context.Context, r *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	sb, err := s.getSandboxExact(r.GetPodSandboxId())
	if s.sandboxGone(r.GetPodSandboxId(), err) {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	sb.op.Lock()
	defer sb.op.Unlock()
	if sb.removed {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err := s.stopSandboxLocked(ctx, sb); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// stopSandboxLocked stops the pod; sb.op held (rec is read under it and
// written under sb.mu too, see sandbox). Holding sb.op across the NRI
// calls is safe: nothing a plugin can trigger takes it (nri.go). The order
// is the one docs/state-machines.md gives:
//
//  1. every container is stopped, with its NRI StopContainer; a stop that
//     cannot make sure of it (ctx ended while another goroutine delivers
//     it) fails the call before anything else is torn down;
//  2. NRI StopPodSandbox, to every plugin even when one fails, while the
//     pod's network namespace and network are still there: a plugin that
//     moved a host device into the pod moves it back now;
//  3. the infra process (if the pod has one), the IPC/UTS/PID pins, CNI
//     DEL, the network namespace.
func (s *Service) stopSandboxLocked(ctx context.Context, sb *sandbox) error {
	for _, c := range s.podContainers(sb.rec.ID) {
		if err := s.stopContainer(ctx, c, 0); err != nil {
			return fmt.Errorf("stop container %s: %w", c.rec.ID, err)
		}
	}
	trace.Mark(ctx, "containers")
	rec := sb.rec
	log := s.log.With("pod_id", rec.ID)
	if err := s.deliverPodStop(ctx, sb); err != nil {
		return err
	}
	trace.Mark(ctx, "nri_stop_pod")
	if rec.State == store.SandboxReady && !rec.NoInfra {
		rt, ok := s.opts.Runtimes[rec.RuntimeHandler]
		if !ok {
			return fmt.Errorf("pod %s: runtime handler %q is no longer configured: %w", rec.ID, rec.RuntimeHandler, errdefs.ErrFailedPrecondition)
		}
		if err := stopInfra(ctx, rt, rec.ID); err != nil {
			return err
		}
	}
	s.releasePodShim(ctx, rec)
	if err := s.env.UnpinPodNamespaces(rec.ID); err != nil {
		return err
	}
	trace.Mark(ctx, "infra_unpin")
	if rec.NetNS != "" && !rec.NetworkTornDown {
		if err := s.opts.Network.Teardown(ctx, cniPod(rec, sb.config)); err != nil {
			return fmt.Errorf("tear down pod network: %w", err)
		}
		trace.Mark(ctx, "cni_del")
		if err := s.env.RemoveNetNS(rec.NetNS); err != nil {
			return err
		}
		sb.mu.Lock()
		rec.NetworkTornDown = true
		sb.mu.Unlock()
	}
	trace.Mark(ctx, "netns_remove")
	if rec.State != store.SandboxNotReady {
		sb.mu.Lock()
		rec.State = store.SandboxNotReady
		sb.mu.Unlock()
		log.InfoContext(ctx, "pod sandbox stopped")
		s.emitSandbox(eventStopped, sb)
	}
	defer trace.Mark(ctx, "store_not_ready")
	return s.opts.Store.PutSandbox(rec)
}

// deliverPodStop relays NRI StopPodSandbox once per pod and records that
// it did, so a StopPodSandbox retried after a later step failed does not
// repeat it. A plugin's failure is logged: the adaptation delivers the
// event to every plugin regardless, and the pod stops anyway. sb.op held.
func (s *Service) deliverPodStop(ctx context.Context, sb *sandbox) error {
	h := s.hooks()
	rec := sb.rec
	if h == nil || rec.NRIStopDelivered {
		return nil
	}
	tctx, cancel := teardownContext(ctx)
	defer cancel()
	if err := h.StopPodSandbox(tctx, sb.nriView()); err != nil {
		s.log.WarnContext(ctx, "nri stop pod sandbox", "pod_id", rec.ID, "error", err)
	}
	sb.mu.Lock()
	rec.NRIStopDelivered = true
	sb.mu.Unlock()
	return s.opts.Store.PutSandbox(rec)
}

// stopInfra kills the infra process and waits for it.
func stopInfra(ctx context.Context, rt runtime.Runtime, id string) error {
	st, err := rt.Status(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("infra status: %w", err)
	}
	if st.State == runtime.StateStopped {
		return nil
	}
	if err := rt.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil {
		return fmt.Errorf("kill infra: %w", err)
	}
	if _, err := rt.Wait(ctx, id); err != nil {
		return fmt.Errorf("wait infra: %w", err)
	}
	return nil
}
