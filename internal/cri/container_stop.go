package cri

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/trace"
)

// StopContainer sends the container its stop signal, waits up to the
// request's timeout, then kills it, and relays NRI StopContainer (unless it
// was delivered already: it is delivered once per container; when another
// goroutine is delivering it and ctx ends first, the error is ctx's).
// Stopping an unknown or exited container succeeds: the CRI contract says
// StopContainer "must not return an error if the container has already
// been stopped".
func (s *Service) StopContainer(ctx context.Context, r *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := s.getContainerExact(r.GetContainerId())
	if s.containerGone(r.GetContainerId(), err) {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if r.GetTimeout() < 0 {
		return nil, fmt.Errorf("timeout %d: must not be negative: %w", r.GetTimeout(), errdefs.ErrInvalidArgument)
	}
	if err := s.stopContainer(ctx, c, seconds(r.GetTimeout())); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// stopContainer stops c (see stopProcess), then makes sure NRI
// StopContainer was delivered for it, exactly once, before returning: when
// ctx ends while another goroutine is still delivering it, the error is
// ctx's, so no caller reports a stop plugins may not have heard of yet.
func (s *Service) stopContainer(ctx context.Context, c *container, grace time.Duration) error {
	if err := s.stopProcess(ctx, c, grace); err != nil {
		return err
	}
	defer trace.Mark(ctx, "nri_stop")
	return s.deliverStop(ctx, c)
}

// stopProcess stops c: the stop signal, then SIGKILL after grace. It does
// not hold c.mu while waiting, so the exit monitor can record the exit.
func (s *Service) stopProcess(ctx context.Context, c *container, grace time.Duration) error {
	c.mu.Lock()
	state, id := c.rec.State, c.rec.ID
	c.mu.Unlock()
	rt, err := s.containerRuntime(c.rec)
	if err != nil {
		return err
	}
	log := s.log.With("container_id", id)
	trace.Mark(ctx, "lookup")
	switch state {
	case store.ContainerExited:
		return nil
	case store.ContainerCreated:
		// Never started: its init waits in the runtime; kill it and record.
		if err := rt.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil {
			return fmt.Errorf("kill created container: %w", err)
		}
		st, err := rt.Status(ctx, id)
		if err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		if st.State != runtime.StateStopped {
			st = runtime.Status{State: runtime.StateStopped, ExitCode: 137, FinishedAt: time.Now()}
		}
		s.recordExit(c, st)
		return nil
	}
	if grace > 0 {
		sig := s.stopSignal(c)
		if err := rt.Signal(ctx, id, sig, runtime.SignalOptions{}); err != nil {
			return fmt.Errorf("signal %v: %w", sig, err)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.done:
			log.InfoContext(ctx, "container stopped", "signal", sig.String())
			return nil
		case <-t.C:
			log.InfoContext(ctx, "container ignored stop signal, killing", "signal", sig.String(), "grace", grace)
		case <-ctx.Done():
			return fmt.Errorf("stop container %s: %w", id, ctx.Err())
		}
	}
	if err := rt.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}); err != nil {
		return fmt.Errorf("kill container: %w", err)
	}
	trace.Mark(ctx, "runtime_kill")
	defer trace.Mark(ctx, "wait_exit")
	select {
	case <-c.done:
		log.InfoContext(ctx, "container killed")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for container %s to die: %w", id, ctx.Err())
	}
}

// stopSignal is the signal recorded at creation (see resolveStopSignal);
// records made before crin recorded it fall back to the image's, then
// SIGTERM.
func (s *Service) stopSignal(c *container) syscall.Signal {
	c.mu.Lock()
	recorded, imageID := c.rec.StopSignal, c.rec.ImageID
	c.mu.Unlock()
	if sig, ok := parseSignal(recorded); ok {
		return sig
	}
	img, err := s.opts.Images.Get(imageID)
	if err != nil || img.Config.StopSignal == "" {
		return syscall.SIGTERM
	}
	if sig, ok := parseSignal(img.Config.StopSignal); ok {
		return sig
	}
	return syscall.SIGTERM
}

// resolveStopSignal picks a new container's stop signal: the CRI config's
// stop_signal, else the image's StopSignal, else SIGTERM. A config signal
// Linux does not have is InvalidArgument naming it; an image signal crin
// cannot read gives SIGTERM, as it always did (the image is not the
// caller's to fix).
func resolveStopSignal(cfg runtimeapi.Signal, image string) (syscall.Signal, error) {
	if cfg != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		sig, ok := signalFromCRI(cfg)
		if !ok {
			return 0, fmt.Errorf("config.stop_signal %v: not a Linux signal: %w", cfg, errdefs.ErrInvalidArgument)
		}
		return sig, nil
	}
	if sig, ok := parseSignal(image); ok {
		return sig, nil
	}
	return syscall.SIGTERM, nil
}

// CRI numbers the real-time signals from 35 (SIGRTMIN) to 65 (SIGRTMAX);
// Linux from 34 to 64.
const criSignalRTMin = 35

// criSignalAliases are the CRI signal names Go's table does not know.
var criSignalAliases = map[string]syscall.Signal{
	"SIGCLD": syscall.SIGCHLD, "SIGPOLL": syscall.SIGIO, "SIGIOT": syscall.SIGABRT,
}

// signalFromCRI maps a CRI Signal to the Linux signal.
func signalFromCRI(v runtimeapi.Signal) (syscall.Signal, bool) {
	if v >= criSignalRTMin && v <= criSignalRTMin+30 {
		return syscall.Signal(v - 1), true
	}
	name := strings.TrimPrefix(v.String(), "SIGNAL_")
	if sig, ok := criSignalAliases[name]; ok {
		return sig, true
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}

// signalToCRI maps a Linux signal to the CRI Signal (RUNTIME_DEFAULT when
// it has none).
func signalToCRI(sig syscall.Signal) runtimeapi.Signal {
	if sig >= criSignalRTMin-1 && sig <= criSignalRTMin+29 {
		return runtimeapi.Signal(sig + 1)
	}
	if v, ok := runtimeapi.Signal_value["SIGNAL_"+unix.SignalName(sig)]; ok {
		return runtimeapi.Signal(v)
	}
	return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
}

// recordedStopSignal is what ContainerStatus reports as the container's
// stop signal.
func recordedStopSignal(rec *store.Container) runtimeapi.Signal {
	sig, ok := parseSignal(rec.StopSignal)
	if !ok {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	return signalToCRI(sig)
}

// parseSignal reads a signal as a number or a name, with or without SIG.
func parseSignal(v string) (syscall.Signal, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), true
	}
	name := strings.ToUpper(v)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig, ok := criSignalAliases[name]; ok {
		return sig, true
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}
