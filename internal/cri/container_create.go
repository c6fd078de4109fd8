package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// CreateContainer creates a container in a ready pod: reserve its name,
// mount its rootfs, build its spec, let NRI plugins adjust it, and create
// it in the runtime, then relay NRI PostCreateContainer. It becomes visible
// only when all of that worked; any failure (a plugin's included) undoes
// every step.
func (s *Service) CreateContainer(ctx context.Context, r *runtimeapi.CreateContainerRequest) (_ *runtimeapi.CreateContainerResponse, retErr error) {
	cfg := r.GetConfig()
	if err := validateContainerConfig(cfg); err != nil {
		return nil, err
	}
	if err := oci.CheckImageMounts(cfg.GetMounts()); err != nil {
		return nil, err
	}
	sb, err := s.getSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	// sb.op, not sb.mu: it is held across the NRI calls (see nri.go).
	sb.op.Lock()
	defer sb.op.Unlock()
	pod := sb.rec
	if sb.removed || pod.State != store.SandboxReady {
		return nil, fmt.Errorf("pod sandbox %s is not ready: %w", pod.ID, errdefs.ErrFailedPrecondition)
	}
	podCfg := sb.config
	rt, ok := s.opts.Runtimes[pod.RuntimeHandler]
	if !ok {
		return nil, fmt.Errorf("pod %s: runtime handler %q is no longer configured: %w", pod.ID, pod.RuntimeHandler, errdefs.ErrFailedPrecondition)
	}
	md, pmd := cfg.Metadata, podCfg.GetMetadata()
	id := newID()
	name := fmt.Sprintf("%s_%s_%s_%s_%d", md.Name, pmd.GetName(), pmd.GetNamespace(), pmd.GetUid(), md.Attempt)
	log := s.log.With("pod_id", pod.ID, "container_id", id, "container", md.Name)

	img, err := s.opts.Images.Get(cfg.Image.Image)
	if err != nil {
		return nil, fmt.Errorf("config.image.image %q: %w", cfg.Image.Image, err)
	}
	stopSig, err := resolveStopSignal(cfg.GetStopSignal(), img.Config.StopSignal)
	if err != nil {
		return nil, err
	}

	var undo rollback
	defer func() {
		if retErr != nil {
			undo.run(ctx, log)
		}
	}()
	if err := s.opts.Store.Reserve(store.KindContainer, name, id); err != nil {
		return nil, fmt.Errorf("config.metadata: %w", err)
	}
	undo.add("release name", func(context.Context) error { return s.opts.Store.Release(store.KindContainer, name, id) })

	rec := &store.Container{
		ID:          id,
		SandboxID:   pod.ID,
		Name:        name,
		State:       store.ContainerCreating,
		ImageRef:    cfg.Image.Image,
		ImageID:     img.ID,
		ImageName:   imageName(img, cfg.Image.Image),
		ImageDigest: imageDigest(img),
		CgroupsPath: filepath.Join(pod.CgroupParent, id),
		CreatedAt:   time.Now().UnixNano(),
		StopSignal:  strconv.Itoa(int(stopSig)),
	}
	if dir, p := podCfg.GetLogDirectory(), cfg.GetLogPath(); dir != "" && p != "" {
		rec.LogPath = filepath.Join(dir, p)
	}
	if rec.Config, err = proto.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode container config: %w", err)
	}
	if err := s.opts.Store.PutContainer(rec); err != nil {
		return nil, err
	}
	undo.add("delete record", func(context.Context) error { return s.opts.Store.DeleteContainer(id) })

	rootfs, err := s.opts.Images.PrepareRootfs(ctx, id, img.ID)
	if err != nil {
		return nil, fmt.Errorf("prepare rootfs: %w", err)
	}
	// Releasing the rootfs releases the image volumes too.
	undo.add("release rootfs", func(ctx context.Context) error { return s.releaseRootfs(ctx, id) })
	rec.Rootfs = rootfs
	imageVolumes, err := s.prepareImageVolumes(ctx, rec, cfg.GetMounts())
	if err != nil {
		return nil, err
	}

	ipcShm := ""
	if podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() != runtimeapi.NamespaceMode_NODE {
		ipcShm = filepath.Join(pod.PodDir, "shm")
	}
	targetPid, err := s.targetPid(cfg)
	if err != nil {
		return nil, err
	}
	userns, err := oci.PodUserNS(podCfg)
	if err != nil {
		return nil, err
	}
	usernsPin := ""
	if userns != nil {
		usernsPin = s.usernsPin(pod.ID)
	}
	spec, err := oci.ContainerSpec(oci.ContainerOptions{
		ID:        id,
		SandboxID: pod.ID,
		TargetPid: targetPid,
		Config:    cfg,
		Sandbox:   podCfg,
		Image: oci.ImageConfig{
			User: img.Config.User, Env: img.Config.Env, Entrypoint: img.Config.Entrypoint,
			Cmd: img.Config.Cmd, WorkingDir: img.Config.WorkingDir, StopSignal: img.Config.StopSignal,
		},
		Rootfs:             rootfs,
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
		return nil, err
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
		return nil, err
	}
	if err := oci.Fit(spec, s.features[pod.RuntimeHandler]); err != nil {
		return nil, fmt.Errorf("runtime %s: %w", pod.RuntimeHandler, err)
	}
	h := s.hooks()
	if h != nil {
		if rec.NRIOwners, err = s.createHook(ctx, h, sb, rec, cfg, spec, &undo); err != nil {
			return nil, err
		}
	}
	if userns != nil {
		// After NRI: the mounts plugins added are id-mapped too.
		dir := s.usernsCtrDir(pod.ID, id)
		undo.add("remove id-mapped mounts", func(ctx context.Context) error { return s.releaseUserNSDir(ctx, id, dir) })
		if err := s.idmapSpec(spec, userns, pod.ID, dir, idmapOptions{overlay: true}); err != nil {
			return nil, err
		}
	}
	rec.Annotations = spec.Annotations
	if spec.Linux != nil && spec.Linux.Resources != nil {
		rec.Resources, _ = json.Marshal(spec.Linux.Resources)
	}
	if rec.Spec, err = json.Marshal(spec); err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	if rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
	}
	if err := rt.Create(ctx, runtime.CreateRequest{
		ID: id, Spec: spec, LogPath: rec.LogPath,
		Stdin: cfg.GetStdin(), StdinOnce: cfg.GetStdinOnce(),
	}); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	undo.add("delete container", func(ctx context.Context) error { return s.deleteFromRuntime(ctx, pod.RuntimeHandler, id) })
	rec.State = store.ContainerCreated
	if err := s.opts.Store.PutContainer(rec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	c := &container{rec: rec, config: cfg, base: nriContainerBase(rec, cfg, spec), done: make(chan struct{})}
	s.mu.Lock()
	delete(s.pendingCtrs, id)
	s.containers[id] = c
	s.mu.Unlock()
	s.emitContainer(eventCreated, c)
	log.InfoContext(ctx, "container created", "image", rec.ImageName)
	if h != nil {
		c.mu.Lock()
		view := nriContainerLocked(c)
		c.mu.Unlock()
		if err := h.PostCreateContainer(ctx, sb.nriView(), view); err != nil {
			log.WarnContext(ctx, "nri post create container", "error", err)
		}
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
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
