package checkpoint

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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// Annotations checkpointctl reads from spec.dump to name a container that
// is neither Podman's nor CRI-O's (containerd's keys).
const (
	ckptContainerName = "io.kubernetes.cri.container-name"
	ckptSandboxName   = "io.kubernetes.cri.sandbox-name"
	ckptSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
)

// CheckpointContainer is the CRI's CheckpointContainer: it writes a
// checkpoint archive of a running container to r.Location and leaves the
// container running. Bad requests are refused before CRIU is asked
// (errdefs.ErrInvalidArgument, naming the field); an unknown container is
// errdefs.ErrNotFound; one not running, whose handler cannot checkpoint,
// on a terminal or being checkpointed already, or a CRIU that does not
// work, is errdefs.ErrFailedPrecondition. Nothing is left at r.Location
// on error.
func (m *Manager) CheckpointContainer(ctx context.Context, r *runtimeapi.CheckpointContainerRequest) error {
	if err := checkOutputPath("location", r.GetLocation()); err != nil {
		return err
	}
	if err := checkLocationDir("location", r.GetLocation()); err != nil {
		return err
	}
	if r.GetTimeout() < 0 {
		return fmt.Errorf("timeout %d: must not be negative: %w", r.GetTimeout(), errdefs.ErrInvalidArgument)
	}
	c, err := m.c.Hub.Container(r.GetContainerId())
	if err != nil {
		return err
	}
	rt, err := m.c.Hub.Running(c.ID)
	if err != nil {
		return err
	}
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		return fmt.Errorf("checkpoint container %s: its runtime handler cannot checkpoint (only handlers of type oci can): %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if c.Config.GetTty() {
		return fmt.Errorf("checkpoint container %s: it runs on a terminal, which crind does not checkpoint: %w", c.ID, errdefs.ErrFailedPrecondition)
	}
	if err := m.c.CRIU.Check(ctx); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	release, err := m.dumping.claim(c.ID)
	if err != nil {
		return err
	}
	defer release()
	if err := m.checkpointContainer(ctx, c, cp, r.GetLocation()); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", c.ID, err)
	}
	return nil
}

// checkOutputPath requires an absolute, clean-able path.
func checkOutputPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s: must not be empty: %w", field, errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%s %q: must be an absolute path: %w", field, p, errdefs.ErrInvalidArgument)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%s %q: contains a NUL byte: %w", field, p, errdefs.ErrInvalidArgument)
	}
	return nil
}

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
// location (capture). Nothing is left at location on error.
func (m *Manager) checkpointContainer(ctx context.Context, c Container, cp runtime.Checkpointer, location string) error {
	staging, err := m.staging(c.ID)
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	if err := m.capture(ctx, c, cp, staging, notFrozen); err != nil {
		return err
	}
	return WriteArchive(location, staging)
}

// staging makes the dir container id's checkpoint is put together in,
// named for it so that the start-up sweep thaws it should crind die with
// it frozen.
func (m *Manager) staging(id string) (string, error) {
	if err := os.MkdirAll(m.workDir(), 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(m.workDir(), id+".")
}

// frozenBy says who freezes a container for its dump.
type frozenBy bool

const (
	notFrozen   frozenBy = false // the runtime freezes and thaws it
	callerFroze frozenBy = true  // the caller froze it and thaws it
)

// capture dumps c through cp into dir: CRIU's images (ImagesDir), its log
// and statistics, the writable layer taken while the container is frozen
// (RootfsDiffFile), the container's OCI spec (SpecDumpFile) and what it
// was created from (ConfigDumpFile).
func (m *Manager) capture(ctx context.Context, c Container, cp runtime.Checkpointer, dir string, frozen frozenBy) error {
	spec, err := m.spec(c)
	if err != nil {
		return err
	}
	diff, err := os.OpenFile(filepath.Join(dir, RootfsDiffFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer diff.Close()
	// The kernel's file systems are mounted over these; what runc left in
	// the upper dir for them is no state of the container's.
	exclude := []string{"/proc", "/sys", "/dev"}
	for _, mnt := range spec.Mounts {
		exclude = append(exclude, mnt.Destination)
	}
	err = cp.Checkpoint(ctx, c.ID, runtime.CheckpointRequest{
		ImagePath: filepath.Join(dir, ImagesDir),
		WorkPath:  dir,
		Frozen:    bool(frozen),
		WhilePaused: func(ctx context.Context) error {
			if err := m.c.Images.RootfsDiff(ctx, c.ID, diff, exclude); err != nil {
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
	cfg := ContainerConfig{
		ID:               c.ID,
		Name:             c.Name,
		RootfsImage:      c.Image,
		RootfsImageRef:   c.ImageID,
		RootfsImageName:  c.ImageName,
		Runtime:          cmp.Or(c.Handler, m.c.DefaultRuntime),
		CreatedTime:      c.CreatedAt.UTC(),
		CheckpointedTime: time.Now().UTC(),
	}
	if err := WriteConfig(dir, cfg); err != nil {
		return err
	}
	return WriteSpec(dir, spec)
}

// spec is the container's recorded OCI spec with the names checkpoint
// tools show added.
func (m *Manager) spec(c Container) (*specs.Spec, error) {
	raw, err := m.c.Specs.ContainerSpec(c.ID)
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
	spec.Annotations[ckptContainerName] = c.Name
	if pod, err := m.c.Hub.Pod(c.PodID); err == nil {
		spec.Annotations[ckptSandboxName] = pod.Config.GetMetadata().GetName()
		spec.Annotations[ckptSandboxNS] = pod.Config.GetMetadata().GetNamespace()
	}
	return &spec, nil
}

// Sweep thaws the containers of checkpoints a crind that died left
// unfinished (their dirs under RootDir/checkpoints) and removes the dirs.
// Failures are logged.
func (m *Manager) Sweep(ctx context.Context) {
	dir := m.workDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		id, _, _ := strings.Cut(e.Name(), ".")
		if c, err := m.c.Hub.Container(id); err == nil {
			if cp, ok := c.Runtime.(runtime.Checkpointer); ok {
				if err := cp.Thaw(ctx, id); err != nil {
					m.log.WarnContext(ctx, "thaw a container a checkpoint left frozen", "container_id", id, "error", err)
				} else {
					m.log.InfoContext(ctx, "thawed a container a checkpoint left frozen", "container_id", id)
				}
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			m.log.WarnContext(ctx, "remove an unfinished checkpoint", "dir", e.Name(), "error", err)
		}
	}
}
