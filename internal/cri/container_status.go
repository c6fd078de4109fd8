package cri

import (
	"context"
	"encoding/json"
	"maps"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// ContainerStatus reports a container. Unknown is NotFound.
func (s *Service) ContainerStatus(ctx context.Context, r *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, cfg := c.rec, c.config
	st := &runtimeapi.ContainerStatus{
		Id:          rec.ID,
		Metadata:    cfg.GetMetadata(),
		State:       containerState(rec.State),
		CreatedAt:   rec.CreatedAt,
		StartedAt:   rec.StartedAt,
		FinishedAt:  rec.FinishedAt,
		ExitCode:    rec.ExitCode,
		Image:       &runtimeapi.ImageSpec{Image: rec.ImageName, UserSpecifiedImage: rec.ImageRef},
		ImageRef:    rec.ImageID,
		ImageId:     rec.ImageID,
		Reason:      rec.Reason,
		Message:     rec.Message,
		StopSignal:  recordedStopSignal(rec),
		Labels:      cfg.GetLabels(),
		Annotations: statusAnnotations(rec, cfg),
		Mounts:      s.statusMounts(rec, cfg.GetMounts()),
		LogPath:     rec.LogPath,
		Resources:   containerResources(rec),
		User:        c.userLocked(),
	}
	if img, err := s.opts.Images.Get(rec.ImageID); err == nil && len(img.RepoDigests) > 0 {
		st.ImageRef = img.RepoDigests[0]
	}
	var info map[string]string
	if r.GetVerbose() {
		info = map[string]string{}
		b, err := json.Marshal(struct {
			Pid         int                         `json:"pid"`
			SandboxID   string                      `json:"sandboxID"`
			Rootfs      string                      `json:"rootfs"`
			CgroupsPath string                      `json:"cgroupsPath"`
			Annotations map[string]string           `json:"runtimeAnnotations,omitempty"`
			NRIOwners   map[string]string           `json:"nriOwners,omitempty"`
			Config      *runtimeapi.ContainerConfig `json:"config"`
		}{rec.Pid, rec.SandboxID, rec.Rootfs, rec.CgroupsPath, rec.Annotations, rec.NRIOwners, cfg})
		if err == nil {
			info["info"] = string(b)
		}
		// Which NRI plugin set which field, as a JSON object of
		// field -> plugin ("{}" when no plugin adjusted the container).
		owners := rec.NRIOwners
		if owners == nil {
			owners = map[string]string{}
		}
		if b, err := json.Marshal(owners); err == nil {
			info["nriOwners"] = string(b)
		}
	}
	return &runtimeapi.ContainerStatusResponse{Status: st, Info: info}, nil
}

func containerState(s store.ContainerState) runtimeapi.ContainerState {
	switch s {
	case store.ContainerCreated:
		return runtimeapi.ContainerState_CONTAINER_CREATED
	case store.ContainerRunning:
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	case store.ContainerExited:
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_UNKNOWN
}

// containerResources renders the container's current resources.
func containerResources(rec *store.Container) *runtimeapi.ContainerResources {
	if len(rec.Resources) == 0 {
		return nil
	}
	r, err := recordedResources(rec)
	if err != nil {
		return nil
	}
	out := &runtimeapi.LinuxContainerResources{}
	if c := r.CPU; c != nil {
		if c.Period != nil {
			out.CpuPeriod = int64(*c.Period)
		}
		if c.Quota != nil {
			out.CpuQuota = *c.Quota
		}
		if c.Shares != nil {
			out.CpuShares = int64(*c.Shares)
		}
		out.CpusetCpus, out.CpusetMems = c.Cpus, c.Mems
	}
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			out.MemoryLimitInBytes = *m.Limit
		}
		if m.Swap != nil {
			out.MemorySwapLimitInBytes = *m.Swap
		}
	}
	for _, h := range r.HugepageLimits {
		out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
	}
	out.Unified = r.Unified
	return &runtimeapi.ContainerResources{Linux: out}
}

// ListContainers lists the visible containers matching the filter.
func (s *Service) ListContainers(ctx context.Context, r *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := r.GetFilter()
	if err := checkContainerFilter(f); err != nil {
		return nil, err
	}
	cs := s.allContainers()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range cs {
		c.mu.Lock()
		rec, cfg := c.rec, c.config
		ok := (f.GetId() == "" || hasPrefix(rec.ID, f.GetId())) &&
			(f.GetPodSandboxId() == "" || hasPrefix(rec.SandboxID, f.GetPodSandboxId())) &&
			(f.GetState() == nil || f.GetState().GetState() == containerState(rec.State)) &&
			labelsMatch(cfg.GetLabels(), f.GetLabelSelector())
		if ok {
			resp.Containers = append(resp.Containers, &runtimeapi.Container{
				Id:           rec.ID,
				PodSandboxId: rec.SandboxID,
				Metadata:     cfg.GetMetadata(),
				// kubelet reads the image id here (it matches it against
				// ListImages ids), not the name the pod asked for.
				Image:       &runtimeapi.ImageSpec{Image: rec.ImageID, UserSpecifiedImage: rec.ImageRef},
				ImageRef:    rec.ImageID,
				ImageId:     rec.ImageID,
				State:       containerState(rec.State),
				CreatedAt:   rec.CreatedAt,
				Labels:      cfg.GetLabels(),
				Annotations: statusAnnotations(rec, cfg),
			})
		}
		c.mu.Unlock()
	}
	return resp, nil
}

// statusAnnotations are the container's annotations as CRI clients see
// them: the config's, with those NRI plugins set or removed applied, but
// none of crin's own.
func statusAnnotations(rec *store.Container, cfg *runtimeapi.ContainerConfig) map[string]string {
	var out map[string]string
	for field := range rec.NRIOwners {
		key, ok := strings.CutPrefix(field, `annotation "`)
		if !ok {
			continue
		}
		key = strings.TrimSuffix(key, `"`)
		if out == nil {
			out = maps.Clone(cfg.GetAnnotations())
			if out == nil {
				out = map[string]string{}
			}
		}
		if v, set := rec.Annotations[key]; set {
			out[key] = v
		} else {
			delete(out, key)
		}
	}
	if out == nil {
		return cfg.GetAnnotations()
	}
	return out
}

// userLocked is the identity the container's process runs as, from the
// final OCI spec (after NRI adjustments): kubelet reports it as the
// container's effective uid, gid and groups. c.mu is held.
func (c *container) userLocked() *runtimeapi.ContainerUser { return c.user }

// processUser is the identity spec's process runs as (nil without a
// process), as ContainerStatus reports it.
func processUser(spec *specs.Spec) *runtimeapi.ContainerUser {
	if spec == nil || spec.Process == nil {
		return nil
	}
	u := spec.Process.User
	groups := make([]int64, 0, len(u.AdditionalGids)+1)
	groups = append(groups, int64(u.GID))
	for _, g := range u.AdditionalGids {
		if g != u.GID {
			groups = append(groups, int64(g))
		}
	}
	return &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
		Uid: int64(u.UID), Gid: int64(u.GID), SupplementalGroups: groups,
	}}
}
