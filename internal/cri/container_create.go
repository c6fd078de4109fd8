package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/podenv"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/trace"
)

// CreateContainer creates a container in a ready pod: reserve its name,
// mount its rootfs, build its spec, let NRI plugins adjust it, and create
// it in the runtime, then relay NRI PostCreateContainer. It becomes visible
// only when all of that worked; any failure (a plugin's included) undoes
// every step.
func (s *Service) CreateContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	id, err := s.createContainer(ctx, r.GetPodSandboxId(), r.GetConfig(), "")
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

// createContainer is CreateContainer. A container restored by RestorePod
// names the dir of its checkpoint in from (checkpoint.Manager.RestorePod).
func (s *Service) createContainer(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, from string) (_ string, retErr error) {
	if err := s.validateCreateRequest(cfg); err != nil {
		return "", err
	}
	sb, err := s.getSandboxExact(podID)
	if err != nil {
		return "", err
	}
	// sb.op, not sb.mu: it is held across the NRI calls (see nri.go).
	sb.op.Lock()
	defer sb.op.Unlock()
	rt, err := s.readyPodRuntime(sb)
	if err != nil {
		return "", err
	}
	pod := sb.rec
	id, name := newID(), containerName(cfg, sb.config)
	log := s.log.With("pod_id", pod.ID, "container_id", id, "container", cfg.Metadata.Name)

	var undo rollback
	defer func() {
		if retErr != nil {
			undo.run(ctx, log)
		}
	}()
	img, restore, err := s.createImage(ctx, id, cfg, rt, from, &undo)
	if err != nil {
		return "", err
	}
	rec, err := newContainerRecord(id, name, sb, cfg, img)
	if err != nil {
		return "", err
	}
	rec.RestoreFrom = restore
	if err := prepareLog(rec, cfg); err != nil {
		return "", err
	}
	// The name and the record, in state creating, in one write: a crind
	// killed at any later point finds them on restart and undoes the rest.
	if err := s.opts.Store.ReserveContainer(rec); err != nil {
		if errdefs.IsAlreadyExists(err) {
			return "", fmt.Errorf("config.metadata: %w", err)
		}
		return "", err
	}
	undo.add("release name", func(context.Context) error { return s.opts.Store.Release(store.KindContainer, name, id) })
	undo.add("delete record", func(context.Context) error { return s.opts.Store.DeleteContainer(id) })

	if err := s.prepareRootfs(ctx, rec, &undo); err != nil {
		return "", err
	}
	spec, userns, err := s.containerSpec(ctx, sb, rec, cfg, img)
	if err != nil {
		return "", err
	}
	h := s.hooks()
	if h != nil {
		if rec.NRIOwners, err = s.createHook(ctx, h, sb, rec, cfg, spec, &undo); err != nil {
			return "", err
		}
	}
	// After NRI: the mounts plugins added are id-mapped too.
	if err := s.idmapContainer(spec, userns, rec, &undo); err != nil {
		return "", err
	}
	if err := recordSpec(rec, spec); err != nil {
		return "", err
	}
	if err := s.createInRuntime(ctx, rt, pod.RuntimeHandler, rec, cfg, spec, &undo); err != nil {
		return "", err
	}
	rec.State = store.ContainerCreated
	if err := s.opts.Store.PutContainer(rec); err != nil {
		return "", err
	}
	rec.Spec = nil // stored; Store.ContainerSpec reads it back
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("create container: %w", err)
	}
	c := s.publishContainer(rec, cfg, spec)
	log.InfoContext(ctx, "container created", "image", rec.ImageName)
	if h != nil {
		postCreateHook(ctx, log, h, sb, c)
	}
	return id, nil
}

// postCreateHook relays NRI PostCreateContainer for the created container
// c; the container stands whatever the plugins say.
func postCreateHook(ctx context.Context, log *slog.Logger, h nriHooks, sb *sandbox, c *container) {
	trace.Mark(ctx, "store_publish")
	defer trace.Mark(ctx, "nri_post_create")
	c.mu.Lock()
	view := nriContainerLocked(c)
	c.mu.Unlock()
	if err := h.PostCreateContainer(ctx, sb.nriView(), view); err != nil {
		log.WarnContext(ctx, "nri post create container", "error", err)
	}
}

// readyPodRuntime is the runtime of pod sb, which must be ready to take
// containers; the caller holds sb.op.
func (s *Service) readyPodRuntime(sb *sandbox) (runtime.Runtime, error) {
	if err := checkReadyLocked(sb); err != nil {
		return nil, err
	}
	pod := sb.rec
	rt, ok := s.opts.Runtimes[pod.RuntimeHandler]
	if !ok {
		return nil, fmt.Errorf("pod %s: runtime handler %q is no longer configured: %w", pod.ID, pod.RuntimeHandler, errdefs.ErrFailedPrecondition)
	}
	return rt, nil
}

// containerName is the unique name a container of pod podCfg is reserved
// under: its name, attempt and the pod's identity.
func containerName(cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig) string {
	md, pmd := cfg.GetMetadata(), podCfg.GetMetadata()
	return fmt.Sprintf("%s_%s_%s_%s_%d", md.GetName(), pmd.GetName(), pmd.GetNamespace(), pmd.GetUid(), md.GetAttempt())
}

// idmapContainer id-maps the mounts of spec (rootfs overlay included) for
// the pod's user namespace userns, if it has one.
func (s *Service) idmapContainer(spec *specs.Spec, userns *oci.UserNS, rec *store.Container, undo *rollback) error {
	if userns == nil {
		return nil
	}
	id, podID := rec.ID, rec.SandboxID
	dir := s.env.UserNSCtrDir(podID, id)
	undo.add("remove id-mapped mounts", func(ctx context.Context) error { return s.env.ReleaseUserNSDir(ctx, id, dir) })
	return s.env.IDMapSpec(spec, userns, podID, dir, podenv.IDMapOptions{Overlay: true})
}

// newContainerRecord is the record of a new container id of pod sb from
// image img, in state creating.
func newContainerRecord(id, name string, sb *sandbox, cfg *runtimeapi.ContainerConfig, img *image.Image) (*store.Container, error) {
	stopSig, err := resolveStopSignal(cfg.GetStopSignal(), img.Config.StopSignal)
	if err != nil {
		return nil, err
	}
	rec := &store.Container{
		ID:          id,
		SandboxID:   sb.rec.ID,
		Name:        name,
		State:       store.ContainerCreating,
		ImageRef:    cfg.Image.Image,
		ImageID:     img.ID,
		ImageName:   imageName(img, cfg.Image.Image),
		ImageDigest: imageDigest(img),
		CgroupsPath: cgroup.Container(sb.rec.CgroupParent, id),
		CreatedAt:   time.Now().UnixNano(),
		StopSignal:  strconv.Itoa(int(stopSig)),
	}
	if dir, p := sb.config.GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		rec.LogPath, rec.LogRoot = filepath.Join(dir, p), dir
	}
	if rec.Config, err = proto.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode container config: %w", err)
	}
	return rec, nil
}

// prepareRootfs mounts the rootfs of container rec from its image.
func (s *Service) prepareRootfs(ctx context.Context, rec *store.Container, undo *rollback) error {
	trace.Mark(ctx, "lookup_store_put")
	defer trace.Mark(ctx, "rootfs_mount")
	id := rec.ID
	rootfs, err := s.opts.Images.PrepareRootfs(ctx, id, rec.ImageID)
	if err != nil {
		return fmt.Errorf("prepare rootfs: %w", err)
	}
	rec.Rootfs = rootfs
	// Releasing the rootfs releases the image volumes too.
	undo.add("release rootfs", func(ctx context.Context) error {
		s.ckpt.RemoveRestoreDir(ctx, id)
		return s.cleanups.ReleaseRootfs(ctx, id)
	})
	if rec.RestoreFrom != "" {
		return s.ckpt.ApplyRootfsDiff(ctx, rec.ID, rec.RestoreFrom)
	}
	return nil
}

// createInRuntime creates container rec with spec in rt (the runtime of
// handler), its shim keeping stdin open as cfg asks.
func (s *Service) createInRuntime(ctx context.Context, rt runtime.Runtime, handler string, rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec, undo *rollback) error {
	trace.Mark(ctx, "nri_idmap_spec_encode")
	defer trace.Mark(ctx, "runtime_create")
	id := rec.ID
	if err := rt.Create(ctx, runtime.CreateRequest{
		ID: id, PodID: rec.SandboxID, Spec: spec, SpecJSON: rec.Spec, LogPath: rec.LogPath, LogRoot: rec.LogRoot,
		Stdin: cfg.GetStdin(), StdinOnce: cfg.GetStdinOnce(), RestoreFrom: checkpoint.RestoreImages(rec.RestoreFrom),
	}); err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	undo.add("delete container", func(ctx context.Context) error { return s.cleanups.DeleteFromRuntime(ctx, handler, id) })
	return nil
}

// containerSpec mounts the container's image volumes and builds its spec
// for the pod's runtime, CDI devices injected, as NRI plugins get to see
// it. It returns the pod's user namespace too: the caller id-maps the
// spec's mounts after NRI.
func (s *Service) containerSpec(ctx context.Context, sb *sandbox, rec *store.Container, cfg *runtimeapi.ContainerConfig, img *image.Image) (*specs.Spec, *oci.UserNS, error) {
	defer trace.Mark(ctx, "spec_build")
	pod, podCfg := sb.rec, sb.config
	imageVolumes, err := s.prepareImageVolumes(ctx, rec, cfg.GetMounts())
	if err != nil {
		return nil, nil, err
	}
	ipcShm := ""
	if podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() != runtimeapi.NamespaceMode_NODE {
		ipcShm = filepath.Join(pod.PodDir, "shm")
	}
	targetPid, err := s.targetPid(cfg)
	if err != nil {
		return nil, nil, err
	}
	userns, err := oci.PodUserNS(podCfg)
	if err != nil {
		return nil, nil, err
	}
	usernsPin := ""
	if userns != nil {
		usernsPin = s.env.UserNSPin(pod.ID)
	}
	spec, err := oci.ContainerSpec(oci.ContainerOptions{
		ID:        rec.ID,
		SandboxID: pod.ID,
		TargetPid: targetPid,
		Config:    cfg,
		Sandbox:   podCfg,
		Image: oci.ImageConfig{
			User: img.Config.User, Env: img.Config.Env, Entrypoint: img.Config.Entrypoint,
			Cmd: img.Config.Cmd, WorkingDir: img.Config.WorkingDir,
		},
		Rootfs:             rec.Rootfs,
		CgroupsPath:        rec.CgroupsPath,
		IPCNSPath:          pod.IPCNS,
		UTSNSPath:          pod.UTSNS,
		PIDNSPath:          pod.PIDNS,
		NetNSPath:          pod.NetNS,
		UserNSPath:         usernsPin,
		HostnamePath:       filepath.Join(pod.PodDir, "hostname"),
		HostsPath:          filepath.Join(pod.PodDir, "hosts"),
		ResolvConfPath:     filepath.Join(pod.PodDir, "resolv.conf"),
		ShmPath:            ipcShm,
		OOMScoreAdjMin:     s.opts.OOMScoreAdjMin,
		SeccompProfileRoot: s.opts.SeccompProfileRoot,
		ImageVolumes:       imageVolumes,
	})
	if err != nil {
		return nil, nil, err
	}
	// The runtime makes the terminal and hands it to the shim, which
	// keeps it (and stdin) for attach.
	spec.Process.Terminal = cfg.GetTty()
	var cdiNames []string
	for _, d := range cfg.GetCDIDevices() {
		cdiNames = append(cdiNames, d.GetName())
	}
	// Before NRI: plugins see the devices the config asked for, and one
	// nothing defines fails the call instead of being dropped.
	if err := oci.InjectCDIDevices(spec, "config.CDI_devices", cdiNames, s.opts.CDISpecDirs); err != nil {
		return nil, nil, err
	}
	if err := oci.Fit(spec, s.features[pod.RuntimeHandler]); err != nil {
		return nil, nil, fmt.Errorf("runtime %s: %w", pod.RuntimeHandler, err)
	}
	return spec, userns, nil
}

// recordSpec stores the final spec in rec (and the annotations and
// resources read from it).
func recordSpec(rec *store.Container, spec *specs.Spec) error {
	rec.Annotations = spec.Annotations
	var err error
	if spec.Linux != nil && spec.Linux.Resources != nil {
		if rec.Resources, err = json.Marshal(spec.Linux.Resources); err != nil {
			return fmt.Errorf("encode resources: %w", err)
		}
	}
	if rec.Spec, err = json.Marshal(spec); err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return nil
}

// publishContainer makes the created container rec visible and tells
// event subscribers.
func (s *Service) publishContainer(rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) *container {
	c := &container{rec: rec, config: cfg, base: nriContainerBase(rec, cfg, spec), user: processUser(spec), done: make(chan struct{})}
	s.mu.Lock()
	delete(s.pendingCtrs, rec.ID)
	s.containers[rec.ID] = c
	s.mu.Unlock()
	s.emitContainer(eventCreated, c)
	return c
}

// validateCreateRequest is every check of a container config that needs
// no state.
func validateCreateRequest(cfg *runtimeapi.ContainerConfig) error {
	if err := validateContainerConfig(cfg); err != nil {
		return err
	}
	if err := validateContainerInput(cfg); err != nil {
		return err
	}
	return oci.CheckImageMounts(cfg.GetMounts())
}

func validateContainerConfig(cfg *runtimeapi.ContainerConfig) error {
	switch {
	case cfg == nil:
		return fmt.Errorf("config: must be set: %w", errdefs.ErrInvalidArgument)
	case cfg.GetMetadata() == nil:
		return fmt.Errorf("config.metadata: must be set: %w", errdefs.ErrInvalidArgument)
	case cfg.Metadata.Name == "":
		return fmt.Errorf("config.metadata.name: must not be empty: %w", errdefs.ErrInvalidArgument)
	case containsAny(cfg.Metadata.Name, "/_\x00\n") || len(cfg.Metadata.Name) > 253:
		return fmt.Errorf("config.metadata.name %q: must be at most 253 bytes without '/', '_', NUL or newline: %w", cfg.Metadata.Name, errdefs.ErrInvalidArgument)
	case cfg.GetImage().GetImage() == "":
		return fmt.Errorf("config.image.image: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	if p := cfg.GetLogPath(); p != "" && (filepath.IsAbs(p) || !filepath.IsLocal(p)) {
		return fmt.Errorf("config.log_path %q: must be relative to the pod's log_directory and stay inside it: %w", p, errdefs.ErrInvalidArgument)
	}
	return nil
}

// targetPid is the pid of the container whose PID namespace cfg asks to
// share (namespace mode TARGET), or 0.
func (s *Service) targetPid(cfg *runtimeapi.ContainerConfig) (int, error) {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET {
		return 0, nil
	}
	target, err := s.getContainer(ns.GetTargetId())
	if err != nil {
		return 0, fmt.Errorf("config.linux.security_context.namespace_options.target_id %q: %w", ns.GetTargetId(), err)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	if target.rec.State != store.ContainerRunning || target.rec.Pid == 0 {
		return 0, fmt.Errorf("config.linux.security_context.namespace_options.target_id %q: container is %s, not running: %w",
			ns.GetTargetId(), target.rec.State, errdefs.ErrFailedPrecondition)
	}
	return target.rec.Pid, nil
}

// prepareLog makes the directories of the container's CRI log beneath the
// pod's log directory and refuses a log_path the shim could not write
// without following a symbolic link or leaving that directory
// (crilog.PrepareLogPath), or that is too long once joined to it.
func prepareLog(rec *store.Container, cfg *runtimeapi.ContainerConfig) error {
	if rec.LogPath == "" {
		return nil
	}
	if len(rec.LogPath) > maxPathLen {
		return fmt.Errorf("config.log_path %q: %d bytes with the pod's log_directory, longer than %d: %w", cfg.GetLogPath(), len(rec.LogPath), maxPathLen, errdefs.ErrInvalidArgument)
	}
	// The pod's directory is kubelet's to make; crind made it when it
	// was missing, and still does.
	if err := os.MkdirAll(rec.LogRoot, 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	if err := crilog.PrepareLogPath(rec.LogRoot, rec.LogPath); err != nil {
		if errors.Is(err, crilog.ErrLogPath) {
			return fmt.Errorf("config.log_path %q: %w: %w", cfg.GetLogPath(), err, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("create log dir: %w", err)
	}
	return nil
}
