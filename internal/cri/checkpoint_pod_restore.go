package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/checkpoint"
	"github.com/crin-dev/crin/internal/runtime"
)

// RestorePod makes a new pod from the pod checkpoint at r.CheckpointPath
// (CheckpointPod's): it runs the pod from r.Config and creates each
// container from its config in r.ContainerConfigs, restoring its
// checkpointed processes when it is started. The containers are returned
// CREATED; the caller starts them. The checkpoint is only read. Bad
// requests are InvalidArgument, naming the field; a request the
// checkpoint does not match (another container set, image, command, args,
// working dir, env, user, namespaces or OCI runtime) is
// FailedPrecondition, naming what differs. On error nothing is left.
func (s *Service) RestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (_ *runtimeapi.RestorePodResponse, retErr error) {
	path := r.GetCheckpointPath()
	m, err := s.checkRestorePod(ctx, r)
	if err != nil {
		return nil, err
	}
	run, err := s.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: r.GetConfig(), RuntimeHandler: r.GetRuntimeHandler()})
	if err != nil {
		return nil, fmt.Errorf("restore pod from %s: run the pod: %w", path, err)
	}
	podID := run.GetPodSandboxId()
	defer func() {
		if retErr != nil {
			s.undoRestorePod(ctx, podID)
		}
	}()
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: podID}
	for _, cfg := range r.GetContainerConfigs() {
		name := cfg.GetMetadata().GetName()
		i := slices.IndexFunc(m.Containers, func(c checkpoint.PodContainer) bool { return c.Name == name })
		id, err := s.createContainer(ctx, podID, cfg, filepath.Join(path, m.Containers[i].Dir))
		if err != nil {
			return nil, fmt.Errorf("restore pod from %s: container %q: %w", path, name, err)
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: name, ContainerId: id})
	}
	return resp, nil
}

// undoRestorePod stops and removes the pod a failed RestorePod made, with
// the containers it made in it.
func (s *Service) undoRestorePod(ctx context.Context, podID string) {
	ctx = context.WithoutCancel(ctx)
	if _, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		s.log.ErrorContext(ctx, "stop the pod of a failed restore", "pod_id", podID, "error", err)
		return
	}
	if _, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		s.log.ErrorContext(ctx, "remove the pod of a failed restore", "pod_id", podID, "error", err)
	}
}

// checkRestorePod checks a RestorePod request against itself and against
// the checkpoint it names, before anything is made, and returns the
// checkpoint's manifest.
func (s *Service) checkRestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (checkpoint.PodManifest, error) {
	var m checkpoint.PodManifest
	path := r.GetCheckpointPath()
	if err := checkOutputPath("checkpoint_path", path); err != nil {
		return m, err
	}
	if err := noOptions(r.GetOptions()); err != nil {
		return m, err
	}
	if r.GetConfig() == nil {
		return m, fmt.Errorf("config: must be set: %w", errdefs.ErrInvalidArgument)
	}
	if err := restoreConfigNames(r.GetContainerConfigs()); err != nil {
		return m, err
	}
	_, rt, err := s.runtimeFor(r.GetRuntimeHandler())
	if err != nil {
		return m, err
	}
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		return m, fmt.Errorf("runtime_handler %q: it cannot restore a checkpoint (only handlers of type oci can): %w", r.GetRuntimeHandler(), errdefs.ErrFailedPrecondition)
	}
	if st, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("checkpoint_path %q: does not exist: %w", path, errdefs.ErrNotFound)
	} else if err != nil || !st.IsDir() {
		return m, fmt.Errorf("checkpoint_path %q: not a directory: %w", path, errdefs.ErrInvalidArgument)
	}
	if m, err = checkpoint.ReadPodManifest(path); err != nil {
		if errdefs.IsNotFound(err) {
			return m, fmt.Errorf("checkpoint_path %q: %v: %w", path, err, errdefs.ErrInvalidArgument)
		}
		return m, fmt.Errorf("checkpoint_path %q: %w", path, err)
	}
	if m.Engine != cp.Engine() {
		return m, fmt.Errorf("runtime_handler %q: it runs %s, and the checkpoint was written by %s, which alone can restore it: %w",
			r.GetRuntimeHandler(), cp.Engine(), m.Engine, errdefs.ErrFailedPrecondition)
	}
	if err := matchPodConfig(m, r.GetConfig()); err != nil {
		return m, err
	}
	if err := s.matchContainerConfigs(path, m, r.GetContainerConfigs()); err != nil {
		return m, err
	}
	if err := s.criu.check(ctx); err != nil {
		return m, fmt.Errorf("restore pod from %s: %w", path, err)
	}
	return m, nil
}

// restoreConfigNames requires each container config to have a name, once.
func restoreConfigNames(cfgs []*runtimeapi.ContainerConfig) error {
	if len(cfgs) == 0 {
		return fmt.Errorf("container_configs: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for i, c := range cfgs {
		name := c.GetMetadata().GetName()
		if name == "" {
			return fmt.Errorf("container_configs[%d].metadata.name: must not be empty: %w", i, errdefs.ErrInvalidArgument)
		}
		if seen[name] {
			return fmt.Errorf("container_configs[%d].metadata.name %q: named twice: %w", i, name, errdefs.ErrInvalidArgument)
		}
		seen[name] = true
	}
	return nil
}

// matchPodConfig requires the new pod to use the namespaces the
// checkpointed one used: CRIU restores processes into namespaces of the
// kinds they were dumped from.
func matchPodConfig(m checkpoint.PodManifest, cfg *runtimeapi.PodSandboxConfig) error {
	var old runtimeapi.PodSandboxConfig
	if err := protojson.Unmarshal(m.PodConfig, &old); err != nil {
		return fmt.Errorf("checkpoint's pod config: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	was := old.GetLinux().GetSecurityContext().GetNamespaceOptions()
	is := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	for _, n := range []struct {
		field    string
		was, now runtimeapi.NamespaceMode
	}{
		{"network", was.GetNetwork(), is.GetNetwork()},
		{"pid", was.GetPid(), is.GetPid()},
		{"ipc", was.GetIpc(), is.GetIpc()},
	} {
		if n.was != n.now {
			return fmt.Errorf("config.linux.security_context.namespace_options.%s: %s, the checkpointed pod's was %s: %w", n.field, n.now, n.was, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// matchContainerConfigs requires cfgs to name exactly the checkpointed
// containers and each to describe the process that was checkpointed.
func (s *Service) matchContainerConfigs(path string, m checkpoint.PodManifest, cfgs []*runtimeapi.ContainerConfig) error {
	old := map[string]*runtimeapi.ContainerConfig{}
	dirs := map[string]string{}
	for _, c := range m.Containers {
		var cfg runtimeapi.ContainerConfig
		if err := protojson.Unmarshal(c.Config, &cfg); err != nil {
			return fmt.Errorf("checkpoint_path %q: the config of container %q: %v: %w", path, c.Name, err, errdefs.ErrInvalidArgument)
		}
		old[c.Name] = &cfg
		dirs[c.Name] = filepath.Join(path, c.Dir)
	}
	if len(cfgs) != len(old) {
		return fmt.Errorf("container_configs: %d containers, the checkpoint holds %d (%s): %w", len(cfgs), len(old), podContainerNames(m), errdefs.ErrFailedPrecondition)
	}
	for i, c := range cfgs {
		name := c.GetMetadata().GetName()
		was, ok := old[name]
		if !ok {
			return fmt.Errorf("container_configs[%d].metadata.name %q: the checkpoint holds no such container (it holds %s): %w", i, name, podContainerNames(m), errdefs.ErrFailedPrecondition)
		}
		if err := s.matchContainerConfig(fmt.Sprintf("container_configs[%d]", i), dirs[name], was, c); err != nil {
			return err
		}
	}
	return nil
}

func podContainerNames(m checkpoint.PodManifest) []string {
	names := make([]string, 0, len(m.Containers))
	for _, c := range m.Containers {
		names = append(names, c.Name)
	}
	return names
}

// matchContainerConfig requires cfg to describe the process checkpointed
// with config was into dir: the same image, command, args, working dir,
// env and user, and no terminal.
func (s *Service) matchContainerConfig(field, dir string, was, cfg *runtimeapi.ContainerConfig) error {
	if cfg.GetTty() {
		return fmt.Errorf("%s.tty: crind does not restore containers on a terminal: %w", field, errdefs.ErrFailedPrecondition)
	}
	if err := s.sameImage(field, dir, cfg); err != nil {
		return err
	}
	wasSC, isSC := was.GetLinux().GetSecurityContext(), cfg.GetLinux().GetSecurityContext()
	for _, f := range []struct {
		name     string
		was, now proto.Message
	}{
		{"command", &runtimeapi.ContainerConfig{Command: was.GetCommand()}, &runtimeapi.ContainerConfig{Command: cfg.GetCommand()}},
		{"args", &runtimeapi.ContainerConfig{Args: was.GetArgs()}, &runtimeapi.ContainerConfig{Args: cfg.GetArgs()}},
		{"working_dir", &runtimeapi.ContainerConfig{WorkingDir: was.GetWorkingDir()}, &runtimeapi.ContainerConfig{WorkingDir: cfg.GetWorkingDir()}},
		{"envs", &runtimeapi.ContainerConfig{Envs: was.GetEnvs()}, &runtimeapi.ContainerConfig{Envs: cfg.GetEnvs()}},
		{"linux.security_context.run_as_user", wasSC.GetRunAsUser(), isSC.GetRunAsUser()},
		{"linux.security_context.run_as_group", wasSC.GetRunAsGroup(), isSC.GetRunAsGroup()},
		{"linux.security_context.run_as_username", &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: wasSC.GetRunAsUsername()}, &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: isSC.GetRunAsUsername()}},
		{"linux.security_context.supplemental_groups", &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: wasSC.GetSupplementalGroups()}, &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: isSC.GetSupplementalGroups()}},
	} {
		if !proto.Equal(f.was, f.now) {
			return fmt.Errorf("%s.%s: differs from the checkpointed container's (%s, was %s): %w", field, f.name, compact(f.now), compact(f.was), errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// sameImage requires cfg's image to be, on this node, the image the
// container checkpointed into dir ran.
func (s *Service) sameImage(field, dir string, cfg *runtimeapi.ContainerConfig) error {
	ck, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return fmt.Errorf("%s: the checkpoint of this container: %v: %w", field, err, errdefs.ErrInvalidArgument)
	}
	was, err := s.checkpointedImage(ck)
	if err != nil {
		return fmt.Errorf("%s.image.image: %w", field, err)
	}
	ref := cfg.GetImage().GetImage()
	img, err := s.opts.Images.Get(ref)
	if err != nil {
		return fmt.Errorf("%s.image.image %q: %v: %w", field, ref, err, errdefs.ErrFailedPrecondition)
	}
	if img.ID != was.ID {
		return fmt.Errorf("%s.image.image %q: it is image %s, the checkpointed container ran %s: %w", field, ref, img.ID, was.ID, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// compact is m in one line of protobuf's JSON, at most 256 bytes.
func compact(m proto.Message) string {
	b, _ := protojson.Marshal(m)
	if len(b) > 256 {
		return string(b[:256]) + "..."
	}
	return string(b)
}
