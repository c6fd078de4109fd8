package cri

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/runtime"
)

// Annotations checkpointctl reads from spec.dump to name a container that
// is neither Podman's nor CRI-O's (containerd's keys).
const (
	ckptContainerName = "io.kubernetes.cri.container-name"
	ckptSandboxName   = "io.kubernetes.cri.sandbox-name"
	ckptSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
)

// checkpointWorkDir is where archives are put together: one dir per
// checkpoint, named "<container id>.<random>". One left by a crind that
// died during a checkpoint names a container that may still be frozen;
// the start-up sweep thaws it and removes the dir (sweepCheckpoints).
func (s *Service) checkpointWorkDir() string { return filepath.Join(s.opts.RootDir, "checkpoints") }

// checkLocationDir requires the dir an archive goes to to exist.
func checkLocationDir(field, p string) error {
	st, err := os.Stat(filepath.Dir(p))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %q: its directory does not exist: %w", field, p, errdefs.ErrInvalidArgument)
	case err != nil:
		return fmt.Errorf("%s %q: %w", field, p, err)
	case !st.IsDir():
		return fmt.Errorf("%s %q: %s is not a directory: %w", field, p, filepath.Dir(p), errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkpointContainer dumps c through cp and writes the archive to
// location (captureContainer). Nothing is left at location on error.
func (s *Service) checkpointContainer(ctx context.Context, c *container, cp runtime.Checkpointer, location string) error {
	staging, err := s.checkpointStaging(c)
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	if err := s.captureContainer(ctx, c, cp, staging, false); err != nil {
		return err
	}
	return checkpoint.WriteArchive(location, staging)
}

// checkpointStaging makes the dir container c's checkpoint is put
// together in, named for it so that the start-up sweep thaws it should
// crind die with it frozen.
func (s *Service) checkpointStaging(c *container) (string, error) {
	c.mu.Lock()
	id := c.rec.ID
	c.mu.Unlock()
	if err := os.MkdirAll(s.checkpointWorkDir(), 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(s.checkpointWorkDir(), id+".")
}

// captureContainer dumps c through cp into dir: CRIU's images
// (checkpoint/), its log and statistics, the writable layer taken while
// the container is frozen (rootfs-diff.tar), the container's OCI spec
// (spec.dump) and what it was created from (config.dump). With frozen
// set, the caller froze c and thaws it.
func (s *Service) captureContainer(ctx context.Context, c *container, cp runtime.Checkpointer, dir string, frozen bool) error {
	c.mu.Lock()
	rec := *c.rec
	name := c.config.GetMetadata().GetName()
	c.mu.Unlock()
	spec, err := s.checkpointSpec(rec.ID, rec.SandboxID, name)
	if err != nil {
		return err
	}
	diff, err := os.OpenFile(filepath.Join(dir, checkpoint.RootfsDiffFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer diff.Close()
	// The kernel's file systems are mounted over these; what runc left in
	// the upper dir for them is no state of the container's.
	exclude := []string{"/proc", "/sys", "/dev"}
	for _, m := range spec.Mounts {
		exclude = append(exclude, m.Destination)
	}
	err = cp.Checkpoint(ctx, rec.ID, runtime.CheckpointRequest{
		ImagePath: filepath.Join(dir, checkpoint.ImagesDir),
		WorkPath:  dir,
		Frozen:    frozen,
		WhilePaused: func(ctx context.Context) error {
			if err := s.opts.Images.RootfsDiff(ctx, rec.ID, diff, exclude); err != nil {
				return fmt.Errorf("rootfs diff: %w", err)
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	if err := diff.Close(); err != nil {
		return fmt.Errorf("rootfs diff: %w", err)
	}
	cfg := checkpoint.ContainerConfig{
		ID:               rec.ID,
		Name:             name,
		RootfsImage:      rec.ImageRef,
		RootfsImageRef:   rec.ImageID,
		RootfsImageName:  rec.ImageName,
		Runtime:          cmp.Or(s.handlerOf(rec.SandboxID), s.opts.DefaultRuntime),
		CreatedTime:      time.Unix(0, rec.CreatedAt).UTC(),
		CheckpointedTime: time.Now().UTC(),
	}
	if err := checkpoint.WriteConfig(dir, cfg); err != nil {
		return err
	}
	return checkpoint.WriteSpec(dir, spec)
}

// checkpointSpec is the container's recorded OCI spec with the names
// checkpoint tools show added.
func (s *Service) checkpointSpec(id, podID, name string) (*specs.Spec, error) {
	raw, err := s.opts.Store.ContainerSpec(id)
	if err != nil {
		return nil, fmt.Errorf("read the container's spec: %w", err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("the container's spec is not recorded: %w", errdefs.ErrFailedPrecondition)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("decode the container's spec: %w", err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[ckptContainerName] = name
	if sb, err := s.getSandbox(podID); err == nil {
		sb.mu.Lock()
		spec.Annotations[ckptSandboxName] = sb.config.GetMetadata().GetName()
		spec.Annotations[ckptSandboxNS] = sb.config.GetMetadata().GetNamespace()
		sb.mu.Unlock()
	}
	return &spec, nil
}

// sweepCheckpoints thaws the containers of checkpoints a crind that died
// left unfinished (their dirs in checkpointWorkDir) and removes the dirs.
func (s *Service) sweepCheckpoints(ctx context.Context) {
	dir := s.checkpointWorkDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		id, _, _ := strings.Cut(e.Name(), ".")
		if c, err := s.getContainerExact(id); err == nil {
			c.mu.Lock()
			rec := c.rec
			c.mu.Unlock()
			if rt, err := s.containerRuntime(rec); err == nil {
				if cp, ok := rt.(runtime.Checkpointer); ok {
					if err := cp.Thaw(ctx, id); err != nil {
						s.log.WarnContext(ctx, "thaw a container a checkpoint left frozen", "container_id", id, "error", err)
					} else {
						s.log.InfoContext(ctx, "thawed a container a checkpoint left frozen", "container_id", id)
					}
				}
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			s.log.WarnContext(ctx, "remove an unfinished checkpoint", "dir", e.Name(), "error", err)
		}
	}
}
