package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// The CRI metrics (ListMetricDescriptors, ListPodSandboxMetrics) carry the
// cAdvisor names kubelet's /metrics/cadvisor serves, so dashboards work the
// same when kubelet takes them from the runtime (PodAndContainerStatsFromCRI).
//
// Values are uint64. Seconds counters (container_cpu_*_seconds_total,
// container_pressure_*) are whole seconds, truncated: the name promises
// seconds and kubelet hands the value to Prometheus as float64(value), so
// nanoseconds would be off by 1e9; the precise CPU figure is
// ContainerStats.cpu.usage_core_nano_seconds.
//
// Every metric's LabelValues follow its descriptor's LabelKeys, in order:
// container, id, image, name, namespace, pod (cAdvisor's), then the
// metric's own, as cAdvisor has them (interface for network metrics,
// device for filesystem ones, ...: metricDef.extra). For a container, id
// and name are its id and container its name; the pod's own metrics (its
// cgroup, its network) are labelled container "" (the pod cgroup) or "POD"
// (the network, as cAdvisor labels the infra container) with the pod id.

// ListMetricDescriptors describes every metric ListPodSandboxMetrics
// reports.
func (s *Service) ListMetricDescriptors(ctx context.Context, r *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	resp := &runtimeapi.ListMetricDescriptorsResponse{}
	for _, d := range metricDefs() {
		resp.Descriptors = append(resp.Descriptors, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: d.labelKeys()})
	}
	return resp, nil
}

// ListPodSandboxMetrics reports the metrics of every ready pod and its
// running containers, read now (filesystem usage as last sampled).
func (s *Service) ListPodSandboxMetrics(ctx context.Context, r *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	pods, err := s.podMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxMetricsResponse{PodMetrics: pods}, nil
}

// StreamPodSandboxMetrics is ListPodSandboxMetrics sent in chunks.
func (s *Service) StreamPodSandboxMetrics(r *runtimeapi.StreamPodSandboxMetricsRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	pods, err := s.podMetrics(srv.Context())
	if err != nil {
		return err
	}
	return sendChunked(pods, func(p []*runtimeapi.PodSandboxMetrics) *runtimeapi.StreamPodSandboxMetricsResponse {
		return &runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: p}
	}, srv.Send)
}

func (s *Service) podMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	mp := &metricsPass{defs: metricDefs(), now: time.Now().Unix(), devs: deviceNames{}}
	var out []*runtimeapi.PodSandboxMetrics
	for _, sb := range s.allSandboxes() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sb.mu.Lock()
		rec, md := sb.rec, sb.config.GetMetadata()
		id, state, cg, netns, created := rec.ID, rec.State, rec.CgroupParent, rec.NetNS, rec.CreatedAt
		sb.mu.Unlock()
		if state != store.SandboxReady {
			continue
		}
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: id}
		mp.namespace, mp.pod = md.GetNamespace(), md.GetName()
		st, err := cgroupDetail(cg)
		if err != nil {
			return nil, err
		}
		if st != nil {
			f := &figures{st: st, start: created / 1e9, now: mp.now, devName: mp.devs.name}
			pm.Metrics = collect(mp.defs, f, mp.labels("", id, ""), pm.Metrics)
		}
		if netns != "" {
			if ifs, err := readNetDev(netns); err == nil {
				pm.Metrics = collect(mp.defs, &figures{ifs: ifs}, mp.labels("POD", id, ""), pm.Metrics)
			}
		}
		for _, c := range s.podContainers(id) {
			cm, err := s.containerMetrics(c, mp)
			if err != nil {
				return nil, err
			}
			if cm != nil {
				pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
			}
		}
		out = append(out, pm)
	}
	return out, nil
}

// metricsPass is what one ListPodSandboxMetrics call shares between its
// pods and containers.
type metricsPass struct {
	defs []metricDef
	now  int64 // unix seconds
	devs deviceNames
	// namespace and pod are the current pod's metadata.
	namespace, pod string
}

// labels are the base label values of a subject of the current pod.
func (mp *metricsPass) labels(container, id, image string) []string {
	return []string{container, id, image, id, mp.namespace, mp.pod}
}

// containerMetrics are the metrics of c; nil when it is not running.
func (s *Service) containerMetrics(c *container, mp *metricsPass) (*runtimeapi.ContainerMetrics, error) {
	c.mu.Lock()
	cid, name, image, cstate, ccg, started := c.rec.ID, c.config.GetMetadata().GetName(), c.rec.ImageName, c.rec.State, c.rec.CgroupsPath, c.rec.StartedAt
	c.mu.Unlock()
	if cstate != store.ContainerRunning {
		return nil, nil
	}
	st, err := cgroupDetail(ccg)
	if err != nil {
		return nil, err
	}
	f := &figures{st: st, start: started / 1e9, now: mp.now, devName: mp.devs.name}
	if u, ok := s.sampler.layer(cid); ok {
		f.fs, f.fsTime = &fsFigures{mountpoint: u.Mountpoint, usedBytes: u.UsedBytes}, u.Time.UnixNano()
		var sfs unix.Statfs_t
		if unix.Statfs(u.Mountpoint, &sfs) == nil {
			f.fs.limitBytes = sfs.Blocks * uint64(sfs.Bsize)
			f.fs.inodes, f.fs.inodesFree = sfs.Files, sfs.Ffree
		}
	}
	ms := collect(mp.defs, f, mp.labels(name, cid, image), make([]*runtimeapi.Metric, 0, len(mp.defs)+8))
	return &runtimeapi.ContainerMetrics{ContainerId: cid, Metrics: ms}, nil
}

// cgroupDetail reads a cgroup for the metrics; nil (and no error) when it
// is gone.
func cgroupDetail(path string) (*runtime.Stats, error) {
	st, err := runtime.CgroupStatsDetail(path)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	return st, err
}

// collect appends to out the metrics defs compute from f, labelled with
// base and each metric's extra labels.
func collect(defs []metricDef, f *figures, base []string, out []*runtimeapi.Metric) []*runtimeapi.Metric {
	e := &emitter{base: base, out: out}
	for i := range defs {
		e.def, e.ts = &defs[i], 0
		if e.def.sampled {
			e.ts = f.fsTime
		}
		e.def.values(f, e)
	}
	return e.out
}

// deviceNames names block devices by number ("/dev/sda", as cAdvisor's
// device label does), each looked up once per request.
type deviceNames map[[2]uint32]string

func (n deviceNames) name(major, minor uint32) string {
	k := [2]uint32{major, minor}
	if v, ok := n[k]; ok {
		return v
	}
	v := fmt.Sprintf("%d:%d", major, minor)
	if b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", major, minor)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if dev, ok := strings.CutPrefix(line, "DEVNAME="); ok {
				v = "/dev/" + dev
			}
		}
	}
	n[k] = v
	return v
}
