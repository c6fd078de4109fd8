package checkpoint

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

	"github.com/crin-dev/crin/internal/runtime"
)

// Every container CheckpointPod selects is frozen before the first is
// dumped and all stay frozen until the last is, so the pod's containers
// are captured at one moment. What it writes is described in pod.go.

// CheckpointPod is the CRI's CheckpointPod: it checkpoints the selected
// running containers of a pod into r.OutputPath and leaves them running.
// Bad requests are errdefs.ErrInvalidArgument, naming the field; an
// unknown pod or container errdefs.ErrNotFound; a pod or container crind
// cannot checkpoint errdefs.ErrFailedPrecondition, naming why. On error
// nothing is left in the output dir.
func (m *Manager) CheckpointPod(ctx context.Context, r *runtimeapi.CheckpointPodRequest) error {
	out := r.GetOutputPath()
	if err := checkOutputPath("output_path", out); err != nil {
		return err
	}
	if err := checkEmptyDir("output_path", out); err != nil {
		return err
	}
	if err := noOptions(r.GetOptions()); err != nil {
		return err
	}
	pod, err := m.c.Hub.Pod(r.GetPodSandboxId())
	if err != nil {
		return err
	}
	ctrs, cp, err := m.podContainers(pod, r.GetContainerIds())
	if err != nil {
		return err
	}
	if err := checkpointablePod(pod); err != nil {
		return err
	}
	if err := m.c.CRIU.Check(ctx); err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", pod.ID, err)
	}
	ids := make([]string, len(ctrs))
	for i, c := range ctrs {
		ids[i] = c.ID
	}
	release, err := m.dumping.claim(ids...)
	if err != nil {
		return err
	}
	defer release()
	if err := m.checkpointPod(ctx, pod, ctrs, cp, out); err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", pod.ID, err)
	}
	return nil
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
func checkpointablePod(pod Pod) error {
	ns := pod.Config.GetLinux().GetSecurityContext().GetNamespaceOptions()
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
			return fmt.Errorf("checkpoint pod %s: it uses the node's %s namespace (namespace_options.%s = NODE), which CRIU cannot checkpoint: %w", pod.ID, n.field, n.field, errdefs.ErrFailedPrecondition)
		case n.field == "pid" && n.mode == runtimeapi.NamespaceMode_POD:
			return fmt.Errorf("checkpoint pod %s: its containers share one PID namespace (namespace_options.pid = POD), which crind does not checkpoint: %w", pod.ID, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// podContainers finds the containers ids names and checks each can be
// checkpointed: listed once, of pod, running, not on a terminal, without
// devices, on a handler that can checkpoint.
func (m *Manager) podContainers(pod Pod, ids []string) ([]Container, runtime.Checkpointer, error) {
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("container_ids: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	var cp runtime.Checkpointer
	ctrs := make([]Container, 0, len(ids))
	for i, id := range ids {
		if slices.Contains(ids[:i], id) {
			return nil, nil, fmt.Errorf("container_ids: %q is listed twice: %w", id, errdefs.ErrInvalidArgument)
		}
		c, err := m.c.Hub.Container(id)
		if err != nil {
			return nil, nil, fmt.Errorf("container_ids[%d]: %w", i, err)
		}
		if c.PodID != pod.ID {
			return nil, nil, fmt.Errorf("container_ids[%d]: container %s belongs to pod %s, not to pod %s: %w", i, id, c.PodID, pod.ID, errdefs.ErrInvalidArgument)
		}
		rt, err := m.c.Hub.Running(id)
		if err != nil {
			return nil, nil, fmt.Errorf("container_ids[%d]: %w", i, err)
		}
		var ok bool
		if cp, ok = rt.(runtime.Checkpointer); !ok {
			return nil, nil, fmt.Errorf("checkpoint pod %s: its runtime handler cannot checkpoint (only handlers of type oci can): %w", pod.ID, errdefs.ErrFailedPrecondition)
		}
		if c.Config.GetTty() {
			return nil, nil, fmt.Errorf("container_ids[%d]: container %s runs on a terminal, which crind does not checkpoint: %w", i, id, errdefs.ErrFailedPrecondition)
		}
		if n := len(c.Config.GetDevices()); n > 0 {
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
func (m *Manager) checkpointPod(ctx context.Context, pod Pod, ctrs []Container, cp runtime.Checkpointer, out string) error {
	staging := make([]string, len(ctrs))
	defer func() {
		for _, d := range staging {
			if d != "" {
				_ = os.RemoveAll(d)
			}
		}
	}()
	for i, c := range ctrs {
		d, err := m.staging(c.ID)
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
				m.log.ErrorContext(ctx, "thaw after pod checkpoint", "container_id", id, "error", err)
				errs = append(errs, err)
			}
		}
		frozen = nil
		return errors.Join(errs...)
	}
	defer func() { _ = thaw() }()
	for _, c := range ctrs {
		if err := cp.Freeze(ctx, c.ID); err != nil {
			return err
		}
		frozen = append(frozen, c.ID)
	}
	for i, c := range ctrs {
		if err := m.capture(ctx, c, cp, staging[i], callerFroze); err != nil {
			return err
		}
	}
	if err := thaw(); err != nil {
		return err
	}
	man, err := podManifest(pod, ctrs, cp)
	if err != nil {
		return err
	}
	return writePodCheckpoint(out, staging, man)
}

// podManifest describes the checkpoint of ctrs of pod.
func podManifest(pod Pod, ctrs []Container, cp runtime.Checkpointer) (PodManifest, error) {
	podCfg, err := protojson.Marshal(pod.Config)
	m := PodManifest{
		Version:          PodManifestVersion,
		Engine:           cp.Engine(),
		RuntimeHandler:   pod.Handler,
		PodSandboxID:     pod.ID,
		PodConfig:        podCfg,
		CheckpointedTime: time.Now().UTC(),
	}
	if err != nil {
		return m, err
	}
	for _, c := range ctrs {
		cfg, err := protojson.Marshal(c.Config)
		if err != nil {
			return m, err
		}
		m.Containers = append(m.Containers, PodContainer{Name: c.Name, ID: c.ID, Dir: c.ID, Config: cfg})
	}
	return m, nil
}

// writePodCheckpoint moves the staged dumps into out, each to the dir its
// manifest entry names, and writes the manifest; on error it removes what
// it put into out.
func writePodCheckpoint(out string, staging []string, m PodManifest) (retErr error) {
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
		if err := MoveDir(staging[i], dst); err != nil {
			return fmt.Errorf("write the checkpoint of container %s: %w", c.ID, err)
		}
	}
	written = append(written, filepath.Join(out, PodManifestFile))
	return WritePodManifest(out, m)
}
