package cri

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/podstats"
	"github.com/crin-dev/crin/internal/runtime"
)

// The stats and metrics RPCs: the hub finds and checks what a request
// names, internal/podstats reads the figures (docs/kubelet-stats.md).

// ContainerStats reports a container's resource usage. Unknown is NotFound.
func (s *Service) ContainerStats(ctx context.Context, r *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := s.getContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, err := s.stats.ContainerStats(s.statsContainer(c))
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports the usage of the containers matching the
// filter; containers whose cgroup is gone (exited) are skipped.
func (s *Service) ListContainerStats(ctx context.Context, r *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	if err := checkContainerFilter(f); err != nil {
		return nil, err
	}
	var cs []podstats.Container
	for _, c := range s.allContainers() {
		v := s.statsContainer(c)
		if (f.GetId() == "" || hasPrefix(v.ID, f.GetId())) &&
			(f.GetPodSandboxId() == "" || hasPrefix(v.PodID, f.GetPodSandboxId())) &&
			labelsMatch(v.Labels, f.GetLabelSelector()) {
			cs = append(cs, v)
		}
	}
	st, err := s.stats.ListContainerStats(cs)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: st}, nil
}

// PodSandboxStats reports a pod's usage (its cgroup parent) and its
// containers'. Unknown is NotFound.
func (s *Service) PodSandboxStats(ctx context.Context, r *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := s.getSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	st, err := s.stats.PodSandboxStats(statsPod(sb))
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats reports the usage of the pods matching the filter.
func (s *Service) ListPodSandboxStats(ctx context.Context, r *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := r.GetFilter()
	if err := checkPodFilter(f); err != nil {
		return nil, err
	}
	var ps []podstats.Pod
	for _, sb := range s.allSandboxes() {
		if v := statsPod(sb); (f.GetId() == "" || hasPrefix(v.ID, f.GetId())) && labelsMatch(v.Labels, f.GetLabelSelector()) {
			ps = append(ps, v)
		}
	}
	st, err := s.stats.ListPodSandboxStats(ps)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: st}, nil
}

// ListMetricDescriptors describes every metric ListPodSandboxMetrics
// reports.
func (s *Service) ListMetricDescriptors(ctx context.Context, r *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return &runtimeapi.ListMetricDescriptorsResponse{Descriptors: s.stats.MetricDescriptors()}, nil
}

// ListPodSandboxMetrics reports the metrics of every ready pod and its
// running containers, read now (filesystem usage as last sampled).
func (s *Service) ListPodSandboxMetrics(ctx context.Context, r *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	pods, err := s.stats.PodMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: pods}, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics sent in chunks.
func (s *Service) StreamPodSandboxMetrics(r *runtimeapi.StreamPodSandboxMetricsRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	pods, err := s.stats.PodMetrics(srv.Context())
	if err != nil {
		return err
	}
	return sendChunked(pods, func(p []*runtimeapi.PodSandboxMetrics) *runtimeapi.StreamPodSandboxMetricsResponse {
		return &runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: p}
	}, srv.Send)
}

// statsSource is the hub as internal/podstats sees it.
type statsSource struct{ s *Service }

var _ podstats.Source = statsSource{}

// Pods are the visible pods.
func (ss statsSource) Pods() []podstats.Pod {
	sbs := ss.s.allSandboxes()
	out := make([]podstats.Pod, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, statsPod(sb))
	}
	return out
}

// Containers are the visible containers.
func (ss statsSource) Containers() []podstats.Container {
	return ss.s.statsContainers(ss.s.allContainers())
}

// PodContainers are the containers of pod podID.
func (ss statsSource) PodContainers(podID string) []podstats.Container {
	return ss.s.statsContainers(ss.s.podContainers(podID))
}

func (s *Service) statsContainers(cs []*container) []podstats.Container {
	out := make([]podstats.Container, 0, len(cs))
	for _, c := range cs {
		out = append(out, s.statsContainer(c))
	}
	return out
}

// statsPod is a snapshot of sb for podstats.
func statsPod(sb *sandbox) podstats.Pod {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	rec, cfg := sb.rec, sb.config
	return podstats.Pod{
		ID: rec.ID, Metadata: cfg.GetMetadata(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		State: rec.State, CgroupParent: rec.CgroupParent, NetNS: rec.NetNS, CreatedAt: rec.CreatedAt,
	}
}

// statsReader is the optional capability of a runtime backend whose
// containers' usage is not in their own cgroups, so it reports it itself
// (gVisor: every container of a pod runs inside its sandbox process). One
// that returns errdefs.ErrNotImplemented for a container has its cgroup
// read instead.
type statsReader interface {
	Stats(ctx context.Context, id string) (*runtime.Stats, error)
}

// statsContainer is a snapshot of c for podstats; its Usage asks c's
// runtime when that reports usage itself (statsReader).
func (s *Service) statsContainer(c *container) podstats.Container {
	c.mu.Lock()
	rec, cfg := c.rec, c.config
	out := podstats.Container{
		ID: rec.ID, PodID: rec.SandboxID, Metadata: cfg.GetMetadata(), Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(),
		Image: rec.ImageName, State: rec.State, CgroupsPath: rec.CgroupsPath, StartedAt: rec.StartedAt,
	}
	c.mu.Unlock()
	if rt, err := s.containerRuntime(rec); err == nil {
		if sr, ok := rt.(statsReader); ok {
			id := rec.ID
			out.Usage = func() (*runtime.Stats, error) { return sr.Stats(s.ctx, id) }
		}
	}
	return out
}
