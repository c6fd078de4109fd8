package checkpoint

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

	"github.com/crin-dev/crin/internal/runtime"
)

// RestorePod is the CRI's RestorePod: it makes a new pod from the pod
// checkpoint at r.CheckpointPath (CheckpointPod's). It runs the pod from
// r.Config and creates each container from its config in
// r.ContainerConfigs through the hub, each restoring its checkpointed
// processes when it is started. The containers are returned CREATED; the
// caller starts them. The checkpoint is only read. Bad requests are
// errdefs.ErrInvalidArgument, naming the field; a request the checkpoint
// does not match (another container set, image, command, args, working
// dir, env, user, namespaces or OCI runtime) is
// errdefs.ErrFailedPrecondition, naming what differs. On error nothing is
// left.
func (m *Manager) RestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (_ *runtimeapi.RestorePodResponse, retErr error) {
	path := r.GetCheckpointPath()
	man, err := m.checkRestorePod(ctx, r)
	if err != nil {
		return nil, err
	}
	podID, err := m.c.Hub.RunPod(ctx, r.GetConfig(), r.GetRuntimeHandler())
	if err != nil {
		return nil, fmt.Errorf("restore pod from %s: run the pod: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			m.undoRestorePod(ctx, podID)
		}
	}()
	resp := &runtimeapi.RestorePodResponse{PodSandboxId: podID}
	for _, cfg := range r.GetContainerConfigs() {
		name := cfg.GetMetadata().GetName()
		i := slices.IndexFunc(man.Containers, func(c PodContainer) bool { return c.Name == name })
		id, err := m.c.Hub.CreateContainer(ctx, podID, cfg, filepath.Join(path, man.Containers[i].Dir))
		if err != nil {
			return nil, fmt.Errorf("restore pod from %s: container %q: %w", path, name, err)
		}
		resp.RestoredContainers = append(resp.RestoredContainers, &runtimeapi.RestoredContainer{Name: name, ContainerId: id})
	}
	return resp, nil
}

// undoRestorePod stops and removes the pod a failed RestorePod made, with
// the containers it made in it.
func (m *Manager) undoRestorePod(ctx context.Context, podID string) {
	ctx = context.WithoutCancel(ctx)
	if err := m.c.Hub.StopPod(ctx, podID); err != nil {
		m.log.ErrorContext(ctx, "stop the pod of a failed restore", "pod_id", podID, "error", err)
		return
	}
	if err := m.c.Hub.RemovePod(ctx, podID); err != nil {
		m.log.ErrorContext(ctx, "remove the pod of a failed restore", "pod_id", podID, "error", err)
	}
}

// checkRestorePod checks a RestorePod request against itself and against
// the checkpoint it names, before anything is made, and returns the
// checkpoint's manifest.
func (m *Manager) checkRestorePod(ctx context.Context, r *runtimeapi.RestorePodRequest) (PodManifest, error) {
	var man PodManifest
	path := r.GetCheckpointPath()
	if err := checkOutputPath("checkpoint_path", path); err != nil {
		return man, err
	}
	if err := noOptions(r.GetOptions()); err != nil {
		return man, err
	}
	if r.GetConfig() == nil {
		return man, fmt.Errorf("config: must be set: %w", errdefs.ErrInvalidArgument)
	}
	if err := restoreConfigNames(r.GetContainerConfigs()); err != nil {
		return man, err
	}
	rt, err := m.c.Hub.Runtime(r.GetRuntimeHandler())
	if err != nil {
		return man, err
	}
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		return man, fmt.Errorf("runtime_handler %q: it cannot restore a checkpoint (only handlers of type oci can): %w", r.GetRuntimeHandler(), errdefs.ErrFailedPrecondition)
	}
	if man, err = readPodCheckpoint(path); err != nil {
		return man, err
	}
	if man.Engine != cp.Engine() {
		return man, fmt.Errorf("runtime_handler %q: it runs %s, and the checkpoint was written by %s, which alone can restore it: %w",
			r.GetRuntimeHandler(), cp.Engine(), man.Engine, errdefs.ErrFailedPrecondition)
	}
	if err := matchPodConfig(man, r.GetConfig()); err != nil {
		return man, err
	}
	if err := m.matchContainerConfigs(path, man, r.GetContainerConfigs()); err != nil {
		return man, err
	}
	if err := m.c.CRIU.Check(ctx); err != nil {
		return man, fmt.Errorf("restore pod from %s: %w", path, err)
	}
	return man, nil
}

// readPodCheckpoint reads the manifest of the pod checkpoint at path,
// which must be a directory: errors name checkpoint_path.
func readPodCheckpoint(path string) (PodManifest, error) {
	if st, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return PodManifest{}, fmt.Errorf("checkpoint_path %q: does not exist: %w", path, errdefs.ErrNotFound)
	} else if err != nil || !st.IsDir() {
		return PodManifest{}, fmt.Errorf("checkpoint_path %q: not a directory: %w", path, errdefs.ErrInvalidArgument)
	}
	man, err := ReadPodManifest(path)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return man, fmt.Errorf("checkpoint_path %q: %v: %w", path, err, errdefs.ErrInvalidArgument)
		}
		return man, fmt.Errorf("checkpoint_path %q: %w", path, err)
	}
	return man, nil
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
func matchPodConfig(m PodManifest, cfg *runtimeapi.PodSandboxConfig) error {
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
func (m *Manager) matchContainerConfigs(path string, man PodManifest, cfgs []*runtimeapi.ContainerConfig) error {
	old := map[string]*runtimeapi.ContainerConfig{}
	dirs := map[string]string{}
	for _, c := range man.Containers {
		var cfg runtimeapi.ContainerConfig
		if err := protojson.Unmarshal(c.Config, &cfg); err != nil {
			return fmt.Errorf("checkpoint_path %q: the config of container %q: %v: %w", path, c.Name, err, errdefs.ErrInvalidArgument)
		}
		old[c.Name] = &cfg
		dirs[c.Name] = filepath.Join(path, c.Dir)
	}
	if len(cfgs) != len(old) {
		return fmt.Errorf("container_configs: %d containers, the checkpoint holds %d (%s): %w", len(cfgs), len(old), podContainerNames(man), errdefs.ErrFailedPrecondition)
	}
	for i, c := range cfgs {
		name := c.GetMetadata().GetName()
		was, ok := old[name]
		if !ok {
			return fmt.Errorf("container_configs[%d].metadata.name %q: the checkpoint holds no such container (it holds %s): %w", i, name, podContainerNames(man), errdefs.ErrFailedPrecondition)
		}
		if err := m.matchContainerConfig(fmt.Sprintf("container_configs[%d]", i), dirs[name], was, c); err != nil {
			return err
		}
	}
	return nil
}

func podContainerNames(m PodManifest) []string {
	names := make([]string, 0, len(m.Containers))
	for _, c := range m.Containers {
		names = append(names, c.Name)
	}
	return names
}

// matchContainerConfig requires cfg to describe the process checkpointed
// with config was into dir: the same image, command, args, working dir,
// env and user, and no terminal.
func (m *Manager) matchContainerConfig(field, dir string, was, cfg *runtimeapi.ContainerConfig) error {
	if cfg.GetTty() {
		return fmt.Errorf("%s.tty: crind does not restore containers on a terminal: %w", field, errdefs.ErrFailedPrecondition)
	}
	if err := m.sameImage(field, dir, cfg); err != nil {
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
func (m *Manager) sameImage(field, dir string, cfg *runtimeapi.ContainerConfig) error {
	ck, err := ReadConfig(dir)
	if err != nil {
		return fmt.Errorf("%s: the checkpoint of this container: %v: %w", field, err, errdefs.ErrInvalidArgument)
	}
	was, err := m.checkpointedImage(ck)
	if err != nil {
		return fmt.Errorf("%s.image.image: %w", field, err)
	}
	ref := cfg.GetImage().GetImage()
	img, err := m.c.Images.Get(ref)
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
