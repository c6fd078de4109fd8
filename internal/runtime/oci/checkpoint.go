package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/runtime"
)

var _ runtime.Checkpointer = (*Runtime)(nil)

// resumeTimeout bounds the thaw after a checkpoint, whatever the caller's
// deadline: a container must not be left frozen.
const resumeTimeout = 30 * time.Second

// Checkpoint implements Checkpointer with "<runtime> pause", "<runtime>
// checkpoint --leave-running --file-locks" and "<runtime> resume". The
// dump is bounded by ctx (the CRI request's timeout), or by the backend's
// CommandTimeout when ctx has no deadline.
func (o *Runtime) Checkpoint(ctx context.Context, id string, req runtime.CheckpointRequest) (retErr error) {
	if err := o.checkRunning(ctx, id, "checkpoint"); err != nil {
		return err
	}
	for _, d := range []string{req.ImagePath, req.WorkPath} {
		// crun 1.21 opens both and does not make them.
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", id, err)
		}
	}
	if !req.Frozen {
		if err := o.freeze(ctx, id); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", id, err)
		}
		defer func() {
			if err := o.thaw(context.WithoutCancel(ctx), id); err != nil {
				o.log.ErrorContext(ctx, "thaw after checkpoint", "container_id", id, "error", err)
				if retErr == nil {
					retErr = fmt.Errorf("checkpoint container %s: %w", id, err)
				}
			}
		}()
	}
	timeout := o.cfg.CommandTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	args := []string{"checkpoint", "--leave-running", "--file-locks",
		"--image-path", req.ImagePath, "--work-path", req.WorkPath, id}
	if _, err := o.run(ctx, runOpts{timeout: timeout}, args...); err != nil {
		return fmt.Errorf("checkpoint container %s: %w (CRIU's log: %s)", id, err, filepath.Join(req.WorkPath, "dump.log"))
	}
	if req.WhilePaused != nil {
		if err := req.WhilePaused(ctx); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", id, err)
		}
	}
	return nil
}

// checkRunning requires container id to have started and to be running
// (a frozen container's processes are: it counts) before op.
func (o *Runtime) checkRunning(ctx context.Context, id, op string) error {
	dir, err := o.known(id)
	if err != nil {
		return err
	}
	if pending(dir) {
		return fmt.Errorf("%s container %s: it has not started: %w", op, id, errdefs.ErrFailedPrecondition)
	}
	st, err := o.Status(ctx, id)
	if err != nil {
		return fmt.Errorf("%s container %s: %w", op, id, err)
	}
	if st.State != runtime.StateRunning {
		return fmt.Errorf("%s container %s: container is %s: %w", op, id, st.State, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Freeze runs "<runtime> pause" on a running container.
func (o *Runtime) Freeze(ctx context.Context, id string) error {
	if err := o.checkRunning(ctx, id, "freeze"); err != nil {
		return err
	}
	if err := o.freeze(ctx, id); err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	return nil
}

func (o *Runtime) freeze(ctx context.Context, id string) error {
	if _, err := o.run(ctx, runOpts{timeout: resumeTimeout}, "pause", id); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	return nil
}

// Engine is the base name of the OCI runtime's binary.
func (o *Runtime) Engine() string { return filepath.Base(o.cfg.Binary) }

// Thaw runs "<runtime> resume" when the runtime says the container is
// paused.
func (o *Runtime) Thaw(ctx context.Context, id string) error {
	if _, err := o.known(id); err != nil {
		return err
	}
	st, err := o.runtimeState(ctx, id)
	if err != nil || st.Status != "paused" {
		return err
	}
	return o.thaw(ctx, id)
}

func (o *Runtime) thaw(ctx context.Context, id string) error {
	if _, err := o.run(ctx, runOpts{timeout: resumeTimeout}, "resume", id); err != nil {
		return fmt.Errorf("thaw container %s: %w", id, err)
	}
	return nil
}

// criuConfigAnnotation names a CRIU configuration file runc passes to
// CRIU (CRIU reads it after the options runc gives it, so it wins).
const criuConfigAnnotation = "org.criu.config"

// criuConfigFile, in a restored container's bundle, is that file.
const criuConfigFile = "criu.conf"

// restoreCgroupConfig has CRIU restore the container's processes into the
// container's own cgroup. runc 1.1 leaves CRIU's cgroup root unset on
// cgroup v2, and CRIU then puts them back into the cgroup they were
// dumped from, the checkpointed container's (cri-o/cri-o#6894): a
// "cgroup-root" line in a config file named by the spec's org.criu.config
// annotation sets it. crun sets it itself and ignores the annotation.
func restoreCgroupConfig(dir string, spec *specs.Spec) error {
	if spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return nil
	}
	path := filepath.Join(dir, criuConfigFile)
	line := "cgroup-root " + cgroup.Dir(spec.Linux.CgroupsPath) + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return err
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[criuConfigAnnotation] = path
	return nil
}

// restoredCgroupConfig empties the file restoreCgroupConfig wrote once
// the container is restored: a later checkpoint of it must not take the
// cgroup root for its own.
func restoredCgroupConfig(dir string) {
	path := filepath.Join(dir, criuConfigFile)
	if _, err := os.Stat(path); err == nil {
		_ = os.WriteFile(path, nil, 0o600)
	}
}
