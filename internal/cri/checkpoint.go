package cri

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/runtime"
)

// Checkpoint and restore need CRIU; internal/checkpoint does the work (a
// checkpoint.Manager, s.ckpt) and the hub answers for it:
// CheckpointContainer writes an archive CreateContainer restores from
// (createImage), and CheckpointPod writes a pod's checkpoint RestorePod
// makes a new pod from (checkpoint_pod.go). docs/checkpoint.md tells the
// whole story.

// newCheckpoints is the Manager that checkpoints and restores s's
// containers; criu nil means the real "criu check".
func newCheckpoints(s *Service, criu checkpoint.CRIUChecker) *checkpoint.Manager {
	return checkpoint.New(checkpoint.Config{
		RootDir:         s.opts.RootDir,
		RestoreArchives: s.opts.RestoreArchives,
		DefaultRuntime:  s.opts.DefaultRuntime,
		Hub:             ckptHub{s},
		Images:          s.opts.Images,
		Specs:           s.opts.Store,
		CRIU:            criu,
		Logger:          s.log,
	})
}

// CheckpointContainer writes a checkpoint archive of a running container
// to location and leaves the container running (checkpoint.Manager's
// CheckpointContainer says how it fails).
func (s *Service) CheckpointContainer(ctx context.Context, r *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if err := s.ckpt.CheckpointContainer(ctx, r); err != nil {
		return nil, err
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// createImage finds the image of a container to create. An absolute path
// in config.image.image names a checkpoint archive, and a container
// RestorePod makes names its checkpoint's dir in from: both are restored
// (checkpoint.Manager.RestoreImage), and the dir the container is
// restored from is returned too.
func (s *Service) createImage(ctx context.Context, id string, cfg *runtimeapi.ContainerConfig, rt runtime.Runtime, from string, undo *rollback) (*image.Image, string, error) {
	ref := cfg.GetImage().GetImage()
	if from == "" && !filepath.IsAbs(ref) {
		img, err := s.opts.Images.Get(ref)
		if err != nil {
			return nil, "", fmt.Errorf("config.image.image %q: %w", ref, err)
		}
		return img, "", nil
	}
	return s.ckpt.RestoreImage(ctx, id, cfg, rt, from, undo.add)
}

// ckptHub is the hub as a checkpoint.Manager sees it.
type ckptHub struct{ s *Service }

var _ checkpoint.Hub = ckptHub{}

func (h ckptHub) Container(id string) (checkpoint.Container, error) {
	c, err := h.s.getContainerExact(id)
	if err != nil {
		return checkpoint.Container{}, err
	}
	c.mu.Lock()
	rec := c.rec
	c.mu.Unlock()
	rt, _ := h.s.containerRuntime(rec)
	return checkpoint.Container{
		ID: rec.ID, PodID: rec.SandboxID, Name: c.config.GetMetadata().GetName(), Config: c.config,
		Image: rec.ImageRef, ImageID: rec.ImageID, ImageName: rec.ImageName,
		CreatedAt: time.Unix(0, rec.CreatedAt), Handler: h.s.handlerOf(rec.SandboxID), Runtime: rt,
	}, nil
}

func (h ckptHub) Running(id string) (runtime.Runtime, error) {
	c, err := h.s.getContainerExact(id)
	if err != nil {
		return nil, err
	}
	_, rt, err := h.s.running(c)
	return rt, err
}

func (h ckptHub) Pod(id string) (checkpoint.Pod, error) {
	sb, err := h.s.getSandboxExact(id)
	if err != nil {
		return checkpoint.Pod{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return checkpoint.Pod{ID: sb.rec.ID, Handler: sb.rec.RuntimeHandler, Config: sb.config}, nil
}

func (h ckptHub) Runtime(handler string) (runtime.Runtime, error) {
	_, rt, err := h.s.runtimeFor(handler)
	return rt, err
}

func (h ckptHub) RunPod(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r, err := h.s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	return r.GetPodSandboxId(), err
}

func (h ckptHub) CreateContainer(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, from string) (string, error) {
	return h.s.createContainer(ctx, podID, cfg, from)
}

func (h ckptHub) StopPod(ctx context.Context, id string) error {
	_, err := h.s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

func (h ckptHub) RemovePod(ctx context.Context, id string) error {
	_, err := h.s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}
