package checkpoint

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
)

// Hub is what a Manager needs of the CRI hub (internal/cri): its pods and
// containers, and making new ones as RunPodSandbox and CreateContainer
// do. Errors are the hub's own, returned as they are: an unknown id is
// errdefs.ErrNotFound, an id not of crind's form
// errdefs.ErrInvalidArgument.
type Hub interface {
	// Container finds a container by its full id.
	Container(id string) (Container, error)
	// Running returns the runtime of container id, which must be
	// running (errdefs.ErrFailedPrecondition otherwise).
	Running(id string) (runtime.Runtime, error)
	// Pod finds a pod by its full id.
	Pod(id string) (Pod, error)
	// Runtime is the runtime of handler ("" for the default) as
	// RunPodSandbox picks it: unknown is errdefs.ErrInvalidArgument, not
	// ready errdefs.ErrFailedPrecondition.
	Runtime(handler string) (runtime.Runtime, error)
	// RunPod runs a pod from cfg on handler as RunPodSandbox does and
	// returns its id.
	RunPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error)
	// CreateContainer creates a container in pod podID from cfg as
	// CreateContainer does, to be restored from the checkpoint dir from
	// (Manager.RestoreImage), and returns its id.
	CreateContainer(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, from string) (string, error)
	// StopPod and RemovePod stop and remove a pod as StopPodSandbox and
	// RemovePodSandbox do, with its containers.
	StopPod(ctx context.Context, id string) error
	RemovePod(ctx context.Context, id string) error
}

// Container is a container as the hub knows it when it is looked up.
type Container struct {
	ID    string
	PodID string
	// Name is the name in its CRI metadata.
	Name string
	// Config is what it was created from; shared with the hub, so not
	// to be changed.
	Config *runtimeapi.ContainerConfig
	// Image is the image as asked for, ImageID its id, ImageName the
	// name it was pulled by.
	Image, ImageID, ImageName string
	CreatedAt                 time.Time
	// Handler is its pod's runtime handler ("" when the pod names none).
	Handler string
	// Runtime is its pod's runtime; nil when the pod is gone or its
	// handler is no longer configured.
	Runtime runtime.Runtime
}

// Pod is a pod as the hub knows it when it is looked up.
type Pod struct {
	ID string
	// Handler is its runtime handler.
	Handler string
	// Config is what it was run from; shared with the hub, so not to be
	// changed.
	Config *runtimeapi.PodSandboxConfig
}

// Images is what a Manager needs of the image service.
type Images interface {
	Get(ref string) (*image.Image, error)
	// RootfsDiff writes the container's writable layer as an OCI layer
	// tar, leaving out the paths in exclude.
	RootfsDiff(ctx context.Context, containerID string, w io.Writer, exclude []string) error
	// ApplyRootfsDiff applies such a tar to a new container's writable
	// layer.
	ApplyRootfsDiff(ctx context.Context, containerID string, r io.Reader) error
}

// Specs reads the OCI spec the hub recorded for a container (the store).
type Specs interface {
	ContainerSpec(id string) ([]byte, error)
}

// CRIUChecker says whether CRIU works on this host: nil, or an
// errdefs.ErrFailedPrecondition error saying why not.
type CRIUChecker interface {
	Check(ctx context.Context) error
}

// Config configures a Manager.
type Config struct {
	// RootDir holds checkpoints being put together (RootDir/checkpoints)
	// and what containers are restored from (RootDir/restore).
	RootDir string
	// RestoreArchives lets CreateContainer restore a container from a
	// checkpoint archive given as its image (cri.restore_from_archives).
	RestoreArchives bool
	// DefaultRuntime is the handler recorded for a container whose pod
	// names none.
	DefaultRuntime string
	Hub            Hub
	Images         Images
	Specs          Specs
	// CRIU is asked before anything is frozen or restored; nil means
	// "criu check", its verdict kept for a minute (NewCRIU).
	CRIU CRIUChecker
	// Logger logs thaws and what could not be removed; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Manager checkpoints and restores containers and pods for the hub: the
// CRI's CheckpointContainer, CheckpointPod and RestorePod, and
// CreateContainer from a checkpoint. It keeps no state but the containers
// a checkpoint is dumping; what it made is named by paths derived from
// container ids.
type Manager struct {
	c   Config
	log *slog.Logger
	// dumping holds the containers a checkpoint is dumping.
	dumping busySet
}

// New returns a Manager for c.
func New(c Config) *Manager {
	if c.CRIU == nil {
		c.CRIU = NewCRIU()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return &Manager{c: c, log: c.Logger}
}

// Status says, in crind's verbose Status (crictl info), where checkpoint
// and restore work: the CRI has no feature flag for them.
type Status struct {
	// Available is whether CRIU passes "criu check" here; Reason says
	// why not.
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Handlers are the handlers whose runtime can checkpoint and restore.
	Handlers []string `json:"handlers"`
	// RestoreFromArchives is cri.restore_from_archives: whether
	// CreateContainer takes a checkpoint archive as its image.
	RestoreFromArchives bool `json:"restoreFromArchives"`
}

// Status is Status now, of the configured handlers (in the order
// given): those that are ready (Hub.Runtime) and whose runtime is a
// runtime.Checkpointer are listed. It runs "criu check" at most once a
// minute (CRIU); crind asks only for a verbose Status.
func (m *Manager) Status(ctx context.Context, handlers []string) Status {
	st := Status{RestoreFromArchives: m.c.RestoreArchives, Handlers: []string{}}
	for _, name := range handlers {
		if rt, err := m.c.Hub.Runtime(name); err == nil {
			if _, ok := rt.(runtime.Checkpointer); ok {
				st.Handlers = append(st.Handlers, name)
			}
		}
	}
	if err := m.c.CRIU.Check(ctx); err != nil {
		st.Reason = err.Error()
	} else {
		st.Available = true
	}
	return st
}

// workDir is where checkpoints are put together: one dir per container
// checkpoint, named "<container id>.<random>". One left by a crind that
// died during a checkpoint names a container that may still be frozen;
// the start-up sweep thaws it and removes the dir (Sweep).
func (m *Manager) workDir() string { return filepath.Join(m.c.RootDir, "checkpoints") }

// RestoreDir is where the checkpoint container id is restored from is
// kept, from its CreateContainer until it is removed (the hub's start-up
// sweep removes the dirs of containers no record owns).
func (m *Manager) RestoreDir(id string) string { return filepath.Join(m.RestoreDirs(), id) }

// RestoreDirs is the dir the RestoreDirs of all containers are in.
func (m *Manager) RestoreDirs() string { return filepath.Join(m.c.RootDir, "restore") }

// RemoveRestoreDir removes the checkpoint container id was restored from;
// a failure is logged (the start-up sweep removes it later).
func (m *Manager) RemoveRestoreDir(ctx context.Context, id string) {
	if m.c.RootDir == "" {
		return
	}
	if err := os.RemoveAll(m.RestoreDir(id)); err != nil {
		m.log.WarnContext(ctx, "remove the checkpoint a container was restored from", "container_id", id, "error", err)
	}
}

// busySet is a set of ids, each claimed by one operation at a time.
type busySet struct {
	mu  sync.Mutex
	ids map[string]bool
}

// claim adds ids to the set, all or none: one already there is
// FailedPrecondition (another checkpoint would freeze and thaw the
// container under this one). release takes them out again.
func (b *busySet) claim(ids ...string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.ids[id] {
			return nil, fmt.Errorf("container %s: another checkpoint of it is in progress: %w", id, errdefs.ErrFailedPrecondition)
		}
	}
	if b.ids == nil {
		b.ids = map[string]bool{}
	}
	for _, id := range ids {
		b.ids[id] = true
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, id := range ids {
			delete(b.ids, id)
		}
	}, nil
}
