package cri

import (
	"encoding/json"
	"strings"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// This file renders pods and containers as NRI plugins see them.

// nriPod is the NRI view of a pod. linux is the spec-derived part
// (oci.NRIPodLinux of the infra spec; may be nil); the rest comes from the
// record and the CRI config.
func nriPod(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig, linux *api.LinuxPodSandbox) *api.PodSandbox {
	md := cfg.GetMetadata()
	l := &api.LinuxPodSandbox{}
	if linux != nil {
		l = proto.Clone(linux).(*api.LinuxPodSandbox)
	}
	l.CgroupParent = rec.CgroupParent
	if l.CgroupsPath == "" {
		l.CgroupsPath = cgroup.Container(rec.CgroupParent, rec.ID)
	}
	l.PodOverhead = oci.NRIResourcesFromCRI(cfg.GetLinux().GetOverhead())
	l.PodResources = oci.NRIResourcesFromCRI(cfg.GetLinux().GetResources())
	return &api.PodSandbox{
		Id:             rec.ID,
		Name:           md.GetName(),
		Uid:            md.GetUid(),
		Namespace:      md.GetNamespace(),
		Labels:         copyMap(cfg.GetLabels()),
		Annotations:    copyMap(cfg.GetAnnotations()),
		RuntimeHandler: rec.RuntimeHandler,
		Linux:          l,
		Pid:            uint32(rec.Pid),
		Ips:            append([]string(nil), rec.IPs...),
	}
}

// decodePodLinux decodes a record's NRILinux (nil when absent or corrupt).
func decodePodLinux(rec *store.Sandbox) *api.LinuxPodSandbox {
	if len(rec.NRILinux) == 0 {
		return nil
	}
	l := &api.LinuxPodSandbox{}
	if proto.Unmarshal(rec.NRILinux, l) != nil {
		return nil
	}
	return l
}

// podView is a copy of a pod's NRI view, for one event; a pod that is
// gone is reduced to its id (the adaptation orders events by it).
func (s *Service) podView(id string) *api.PodSandbox {
	s.mu.RLock()
	sb, ok := s.sandboxes[id]
	pending := s.pendingPods[id]
	s.mu.RUnlock()
	if ok {
		if p := sb.nri.load(); p != nil {
			return p
		}
	}
	if pending != nil {
		return proto.Clone(pending).(*api.PodSandbox)
	}
	return &api.PodSandbox{Id: id}
}

// nriContainerBase is the part of a container's NRI view that does not
// change after it was created, encoded: identity, labels, image, and
// everything oci.NRIContainer derives from its spec (nil spec: only the
// rest).
func nriContainerBase(rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) []byte {
	b, err := proto.Marshal(nriContainerView(rec, cfg, spec))
	if err != nil {
		return nil // not reached: the view is built from valid fields
	}
	return b
}

// nriContainerView is nriContainerBase's view, as a message.
func nriContainerView(rec *store.Container, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) *api.Container {
	c := &api.Container{}
	if spec != nil {
		oci.NRIContainer(spec, c)
		c.Annotations = copyMap(spec.Annotations)
	}
	c.Id = rec.ID
	c.PodSandboxId = rec.SandboxID
	c.Name = cfg.GetMetadata().GetName()
	c.Labels = copyMap(cfg.GetLabels())
	if c.Annotations == nil {
		c.Annotations = copyMap(rec.Annotations)
	}
	c.CreatedAt = rec.CreatedAt
	if c.CDIDevices == nil {
		for _, d := range cfg.GetCDIDevices() {
			c.CDIDevices = append(c.CDIDevices, &api.CDIDevice{Name: d.GetName()})
		}
	}
	c.Image = &api.Image{Name: rec.ImageName, Digest: rec.ImageDigest, ConfigDigest: rec.ImageID}
	return c
}

// decodeSpec decodes a stored spec (nil when absent or corrupt).
func decodeSpec(raw []byte) *specs.Spec {
	if len(raw) == 0 {
		return nil
	}
	sp := &specs.Spec{}
	if json.Unmarshal(raw, sp) != nil {
		return nil
	}
	return sp
}

// nriContainerLocked is a fresh NRI view of c as it is now; c.mu held.
func nriContainerLocked(c *container) *api.Container {
	out := &api.Container{}
	if len(c.base) > 0 {
		// Encoded by nriContainerBase: it decodes.
		_ = proto.Unmarshal(c.base, out)
	}
	rec := c.rec
	out.State = nriState(rec.State)
	out.Pid = uint32(rec.Pid)
	out.StartedAt = rec.StartedAt
	out.FinishedAt = rec.FinishedAt
	if rec.State == store.ContainerExited {
		out.ExitCode = rec.ExitCode
		out.StatusReason = rec.Reason
		out.StatusMessage = rec.Message
	}
	if cur, err := recordedResources(rec); err == nil {
		if r := oci.NRIResources(cur); r != nil {
			if out.Linux == nil {
				out.Linux = &api.LinuxContainer{}
			}
			out.Linux.Resources = r
		}
	}
	return out
}

func nriState(st store.ContainerState) api.ContainerState {
	switch st {
	case store.ContainerCreating, store.ContainerCreated:
		return api.ContainerState_CONTAINER_CREATED
	case store.ContainerRunning:
		return api.ContainerState_CONTAINER_RUNNING
	case store.ContainerExited:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

// imageDigest is the manifest digest of an image ("sha256:..."), taken
// from its first repo digest; "" when it has none.
func imageDigest(img *image.Image) string {
	for _, d := range img.RepoDigests {
		if _, dg, ok := strings.Cut(d, "@"); ok {
			return dg
		}
	}
	return ""
}

// copyMap copies a string map (nil for an empty one), so NRI views never
// share a map with a record or a config.
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// nriView is a copy of the pod's NRI view, for one event.
func (sb *sandbox) nriView() *api.PodSandbox {
	if p := sb.nri.load(); p != nil {
		return p
	}
	return &api.PodSandbox{Id: sb.rec.ID}
}

// encodedPod holds a pod's NRI view in its proto wire form (a third of
// the memory of the message), replaced whole; load decodes a fresh copy
// for each use.
type encodedPod struct{ b atomic.Pointer[[]byte] }

func (e *encodedPod) store(v *api.PodSandbox) {
	b, err := proto.Marshal(v)
	if err != nil {
		return // not reached: the view is built from valid fields
	}
	e.b.Store(&b)
}

// load is a copy of the view, or nil before store.
func (e *encodedPod) load() *api.PodSandbox {
	b := e.b.Load()
	if b == nil {
		return nil
	}
	v := &api.PodSandbox{}
	if proto.Unmarshal(*b, v) != nil {
		return nil
	}
	return v
}
