package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/runtime"
)

// A pod checkpoint (CRI v1.37 CheckpointPod, RestorePod) is a directory
// the caller owns: crind writes into it one unpacked container checkpoint
// per container (what a CheckpointContainer archive holds) and, last, the
// manifest (checkpoint.PodManifest) that makes it whole. Every selected
// container is frozen before the first is dumped and all stay frozen
// until the last is, so the pod's containers are captured at one moment.

// CheckpointPod checkpoints the selected running containers of a pod into
// r.OutputPath and leaves them running. Bad requests are
// InvalidArgument, naming the field; a pod or container crind cannot
// checkpoint is FailedPrecondition, naming why. On error nothing is left
// in the output dir.
func (s *Service) CheckpointPod(ctx context.Context, r *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	out := r.GetOutputPath()
	if err := checkOutputPath("output_path", out); err != nil {
		return nil, err
	}
	if err := checkEmptyDir("output_path", out); err != nil {
		return nil, err
	}
	if err := noOptions(r.GetOptions()); err != nil {
		return nil, err
	}
	sb, err := s.getSandboxExact(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	ctrs, cp, err := s.podCheckpointContainers(sb, r.GetContainerIds())
	if err != nil {
		return nil, err
	}
	if err := checkpointablePod(sb); err != nil {
		return nil, err
	}
	if err := s.criu.check(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint pod %s: %w", sb.rec.ID, err)
	}
	ids := make([]string, len(ctrs))
	for i, c := range ctrs {
		ids[i] = containerID(c)
	}
	release, err := s.dumping.claim(ids...)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.checkpointPod(ctx, sb, ctrs, cp, out); err != nil {
		return nil, fmt.Errorf("checkpoint pod %s: %w", sb.rec.ID, err)
	}
	return &runtimeapi.CheckpointPodResponse{}, nil
}

// checkEmptyDir requires p to be an existing, empty directory.
func checkEmptyDir(field, p string) error {
	ents, err := os.ReadDir(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %q: does not exist: %w", field, p, errdefs.ErrInvalidArgument)
	case err != nil:
		return fmt.Errorf("%s %q: not a directory crind can read: %v: %w", field, p, err, errdefs.ErrInvalidArgument)
	case len(ents) > 0:
		return fmt.Errorf("%s %q: not empty (it holds %q): %w", field, p, ents[0].Name(), errdefs.ErrInvalidArgument)
	}
	return nil
}

// noOptions refuses runtime options: crind defines none.
func noOptions(opts map[string]string) error {
	if len(opts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return fmt.Errorf("options: crind has no checkpoint or restore options, got %q: %w", keys, errdefs.ErrInvalidArgument)
}

// checkpointablePod refuses pods whose containers CRIU cannot be made to
// dump and restore on their own: those that share the node's network, PID
// or IPC namespace, and those whose containers share the pod's PID
// namespace (CRIU dumps a process tree, and such a namespace holds other
// trees).
func checkpointablePod(sb *sandbox) error {
	sb.mu.Lock()
	ns := sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	id := sb.rec.ID
	sb.mu.Unlock()
	for _, n := range []struct {
		field string
		mode  runtimeapi.NamespaceMode
	}{
		{"network", ns.GetNetwork()},
		{"pid", ns.GetPid()},
		{"ipc", ns.GetIpc()},
	} {
		switch {
		case n.mode == runtimeapi.NamespaceMode_NODE:
			return fmt.Errorf("checkpoint pod %s: it uses the node's %s namespace (namespace_options.%s = NODE), which CRIU cannot checkpoint: %w", id, n.field, n.field, errdefs.ErrFailedPrecondition)
		case n.field == "pid" && n.mode == runtimeapi.NamespaceMode_POD:
			return fmt.Errorf("checkpoint pod %s: its containers share one PID namespace (namespace_options.pid = POD), which crind does not checkpoint: %w", id, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// podCheckpointContainers finds the containers ids names and checks each
// can be checkpointed: listed once, of pod sb, running, not on a
// terminal, without devices, on a handler that can checkpoint.
func (s *Service) podCheckpointContainers(sb *sandbox, ids []string) ([]*container, runtime.Checkpointer, error) {
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("container_ids: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	var cp runtime.Checkpointer
	ctrs := make([]*container, 0, len(ids))
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			return nil, nil, fmt.Errorf("container_ids: %q is listed twice: %w", id, errdefs.ErrInvalidArgument)
		}
		c, err := s.getContainerExact(id)
		if err != nil {
			return nil, nil, fmt.Errorf("container_ids[%d]: %w", i, err)
		}
		c.mu.Lock()
		podID := c.rec.SandboxID
		c.mu.Unlock()
		if podID != sb.rec.ID {
			return nil, nil, fmt.Errorf("container_ids[%d]: container %s belongs to pod %s, not to pod %s: %w", i, id, podID, sb.rec.ID, errdefs.ErrInvalidArgument)
		}
		ref, rt, err := s.running(c)
		if err != nil {
			return nil, nil, fmt.Errorf("container_ids[%d]: %w", i, err)
		}
		var ok bool
		if cp, ok = rt.(runtime.Checkpointer); !ok {
			return nil, nil, fmt.Errorf("checkpoint pod %s: its runtime handler cannot checkpoint (only handlers of type oci can): %w", sb.rec.ID, errdefs.ErrFailedPrecondition)
		}
		if ref.TTY {
			return nil, nil, fmt.Errorf("container_ids[%d]: container %s runs on a terminal, which crind does not checkpoint: %w", i, id, errdefs.ErrFailedPrecondition)
		}
		if n := len(c.config.GetDevices()); n > 0 {
			return nil, nil, fmt.Errorf("container_ids[%d]: container %s has %d devices, which CRIU cannot checkpoint: %w", i, id, n, errdefs.ErrFailedPrecondition)
		}
		ctrs = append(ctrs, c)
	}
	return ctrs, cp, nil
}

// checkpointPod freezes ctrs, dumps each into a staging dir, thaws them
// all, then moves the dumps into out and writes the manifest last. The
// staging dirs are named for their containers, so a crind that dies with
// them frozen has them thawed by the start-up sweep.
func (s *Service) checkpointPod(ctx context.Context, sb *sandbox, ctrs []*container, cp runtime.Checkpointer, out string) (retErr error) {
	staging := make([]string, len(ctrs))
	defer func() {
		for _, d := range staging {
			if d != "" {
				_ = os.RemoveAll(d)
			}
		}
	}()
	for i, c := range ctrs {
		d, err := s.checkpointStaging(c)
		if err != nil {
			return err
		}
		staging[i] = d
	}
	var frozen []string
	thaw := func() error {
		var errs []error
		for _, id := range frozen {
			if err := cp.Thaw(context.WithoutCancel(ctx), id); err != nil {
				s.log.ErrorContext(ctx, "thaw after pod checkpoint", "container_id", id, "error", err)
				errs = append(errs, err)
			}
		}
		frozen = nil
		return errors.Join(errs...)
	}
	defer func() { _ = thaw() }()
	for _, c := range ctrs {
		id := containerID(c)
		if err := cp.Freeze(ctx, id); err != nil {
			return err
		}
		frozen = append(frozen, id)
	}
	for i, c := range ctrs {
		if err := s.captureContainer(ctx, c, cp, staging[i], true); err != nil {
			return err
		}
	}
	if err := thaw(); err != nil {
		return err
	}
	m, err := s.podManifest(sb, ctrs, cp)
	if err != nil {
		return err
	}
	return writePodCheckpoint(out, staging, m)
}

func containerID(c *container) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.ID
}

// podManifest describes the checkpoint of ctrs of pod sb.
func (s *Service) podManifest(sb *sandbox, ctrs []*container, cp runtime.Checkpointer) (checkpoint.PodManifest, error) {
	sb.mu.Lock()
	podCfg, err := protojson.Marshal(sb.config)
	m := checkpoint.PodManifest{
		Version:          checkpoint.PodManifestVersion,
		Engine:           cp.Engine(),
		RuntimeHandler:   sb.rec.RuntimeHandler,
		PodSandboxID:     sb.rec.ID,
		PodConfig:        podCfg,
		CheckpointedTime: time.Now().UTC(),
	}
	sb.mu.Unlock()
	if err != nil {
		return m, err
	}
	for _, c := range ctrs {
		c.mu.Lock()
		cfg, err := protojson.Marshal(c.config)
		pc := checkpoint.PodContainer{Name: c.config.GetMetadata().GetName(), ID: c.rec.ID, Dir: c.rec.ID, Config: cfg}
		c.mu.Unlock()
		if err != nil {
			return m, err
		}
		m.Containers = append(m.Containers, pc)
	}
	return m, nil
}

// writePodCheckpoint moves the staged dumps into out, each to the dir its
// manifest entry names, and writes the manifest; on error it removes what
// it put into out.
func writePodCheckpoint(out string, staging []string, m checkpoint.PodManifest) (retErr error) {
	var written []string
	defer func() {
		if retErr != nil {
			for _, p := range written {
				_ = os.RemoveAll(p)
			}
		}
	}()
	for i, c := range m.Containers {
		dst := filepath.Join(out, c.Dir)
		written = append(written, dst)
		if err := checkpoint.MoveDir(staging[i], dst); err != nil {
			return fmt.Errorf("write the checkpoint of container %s: %w", c.ID, err)
		}
	}
	written = append(written, filepath.Join(out, checkpoint.PodManifestFile))
	return checkpoint.WritePodManifest(out, m)
}
