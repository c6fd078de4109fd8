package cri

import (
	"context"
	"errors"
	"slices"

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
// Values are uint64. Seconds counters (container_cpu_*_seconds_total) are
// whole seconds, truncated: the name promises seconds and kubelet hands the
// value to Prometheus as float64(value), so nanoseconds would be off by
// 1e9; the precise figure is ContainerStats.cpu.usage_core_nano_seconds.
//
// Every metric's LabelValues follow its descriptor's LabelKeys, in order:
// container, id, image, name, namespace, pod (cAdvisor's), then interface
// for network metrics and device for filesystem ones. For a container, id
// and name are its id and container its name; the pod's own metrics (its
// cgroup, its network) are labelled container "" (the pod cgroup) or "POD"
// (the network, as cAdvisor labels the infra container) with the pod id.

// metricKind says which labels follow the base ones.
type metricKind int

const (
	kindCgroup metricKind = iota
	kindNetwork
	kindFs
)

// metricDef is one metric crind reports.
type metricDef struct {
	name, help string
	typ        runtimeapi.MetricType
	kind       metricKind
	// cgroup is the value of a cgroup metric.
	cgroup func(*runtime.Stats) uint64
	// cgroupIf is the value of a cgroup metric the host may not have
	// (PSI): reported only when ok.
	cgroupIf func(*runtime.Stats) (v uint64, ok bool)
	// net is the value of a network metric.
	net func(ifaceCounters) uint64
	// fs is the value of a filesystem metric.
	fs func(fsFigures) uint64
}

// fsFigures are a container's writable layer usage and its filesystem's
// capacity (statfs).
type fsFigures struct {
	usedBytes, limitBytes, inodes, inodesFree uint64
}

func labelKeys(k metricKind) []string {
	keys := []string{"container", "id", "image", "name", "namespace", "pod"}
	switch k {
	case kindNetwork:
		keys = append(keys, "interface")
	case kindFs:
		keys = append(keys, "device")
	}
	return keys
}

const (
	counter = runtimeapi.MetricType_COUNTER
	gauge   = runtimeapi.MetricType_GAUGE
)

func wholeSeconds(ns uint64) uint64 { return ns / 1e9 }

// metricDefs lists every metric, in the order they are reported.
func metricDefs() []metricDef {
	return []metricDef{
		{name: "container_cpu_usage_seconds_total", help: "Cumulative cpu time consumed in seconds (whole seconds).", typ: counter,
			cgroup: func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUUsageNanos) }},
		{name: "container_cpu_user_seconds_total", help: "Cumulative user cpu time consumed in seconds (whole seconds).", typ: counter,
			cgroup: func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUUserNanos) }},
		{name: "container_cpu_system_seconds_total", help: "Cumulative system cpu time consumed in seconds (whole seconds).", typ: counter,
			cgroup: func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUSystemNanos) }},
		{name: "container_memory_usage_bytes", help: "Current memory usage in bytes, including all memory regardless of when it was accessed.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryUsageBytes }},
		{name: "container_memory_working_set_bytes", help: "Current working set in bytes.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryWorkingSet }},
		{name: "container_memory_rss", help: "Size of RSS in bytes.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryRSSBytes }},
		{name: "container_memory_cache", help: "Number of bytes of page cache memory.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryCacheBytes }},
		{name: "container_memory_failcnt", help: "Number of memory usage hits limits.", typ: counter,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryFailcnt }},
		{name: "container_spec_memory_limit_bytes", help: "Memory limit for the container (0 when unlimited).", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.MemoryLimitBytes }},
		{name: "container_processes", help: "Number of processes running inside the container.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.Processes }},
		{name: "container_threads", help: "Number of threads running inside the container.", typ: gauge,
			cgroup: func(s *runtime.Stats) uint64 { return s.PidsCurrent }},
		pressureDef("cpu", "waiting", func(s *runtime.Stats) *runtime.Pressure { return s.CPUPressure }),
		pressureDef("cpu", "stalled", func(s *runtime.Stats) *runtime.Pressure { return s.CPUPressure }),
		pressureDef("memory", "waiting", func(s *runtime.Stats) *runtime.Pressure { return s.MemoryPressure }),
		pressureDef("memory", "stalled", func(s *runtime.Stats) *runtime.Pressure { return s.MemoryPressure }),
		pressureDef("io", "waiting", func(s *runtime.Stats) *runtime.Pressure { return s.IOPressure }),
		pressureDef("io", "stalled", func(s *runtime.Stats) *runtime.Pressure { return s.IOPressure }),

		{name: "container_network_receive_bytes_total", help: "Cumulative count of bytes received.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.rxBytes }},
		{name: "container_network_transmit_bytes_total", help: "Cumulative count of bytes transmitted.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.txBytes }},
		{name: "container_network_receive_packets_total", help: "Cumulative count of packets received.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.rxPackets }},
		{name: "container_network_transmit_packets_total", help: "Cumulative count of packets transmitted.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.txPackets }},
		{name: "container_network_receive_errors_total", help: "Cumulative count of errors encountered while receiving.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.rxErrors }},
		{name: "container_network_transmit_errors_total", help: "Cumulative count of errors encountered while transmitting.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.txErrors }},
		{name: "container_network_receive_packets_dropped_total", help: "Cumulative count of packets dropped while receiving.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.rxDrop }},
		{name: "container_network_transmit_packets_dropped_total", help: "Cumulative count of packets dropped while transmitting.", typ: counter, kind: kindNetwork,
			net: func(c ifaceCounters) uint64 { return c.txDrop }},

		{name: "container_fs_usage_bytes", help: "Number of bytes consumed by the container's writable layer.", typ: gauge, kind: kindFs,
			fs: func(f fsFigures) uint64 { return f.usedBytes }},
		{name: "container_fs_limit_bytes", help: "Number of bytes the filesystem holding the writable layer can hold.", typ: gauge, kind: kindFs,
			fs: func(f fsFigures) uint64 { return f.limitBytes }},
		{name: "container_fs_inodes_total", help: "Number of inodes of the filesystem holding the writable layer.", typ: gauge, kind: kindFs,
			fs: func(f fsFigures) uint64 { return f.inodes }},
		{name: "container_fs_inodes_free", help: "Number of available inodes of the filesystem holding the writable layer.", typ: gauge, kind: kindFs,
			fs: func(f fsFigures) uint64 { return f.inodesFree }},
	}
}

// pressureDef is cAdvisor's PSI counter of one resource: "waiting" is the
// time some task waited (PSI's some line), "stalled" the time all did
// (full), in whole seconds; reported only where the cgroup has PSI.
func pressureDef(resource, which string, p func(*runtime.Stats) *runtime.Pressure) metricDef {
	help := "Total time duration tasks in the container have waited due to " + resource + " congestion (whole seconds)."
	if which == "stalled" {
		help = "Total time duration no tasks in the container could make progress due to " + resource + " congestion (whole seconds)."
	}
	return metricDef{name: "container_pressure_" + resource + "_" + which + "_seconds_total", help: help, typ: counter,
		cgroupIf: func(s *runtime.Stats) (uint64, bool) {
			pr := p(s)
			if pr == nil {
				return 0, false
			}
			line := pr.Some
			if which == "stalled" {
				line = pr.Full
			}
			return wholeSeconds(uint64(line.Total)), true
		}}
}

// ListMetricDescriptors describes every metric ListPodSandboxMetrics
// reports.
func (s *Service) ListMetricDescriptors(ctx context.Context, r *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	resp := &runtimeapi.ListMetricDescriptorsResponse{}
	for _, d := range metricDefs() {
		resp.Descriptors = append(resp.Descriptors, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: labelKeys(d.kind)})
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
	defs := metricDefs()
	var out []*runtimeapi.PodSandboxMetrics
	for _, sb := range s.allSandboxes() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		sb.mu.Lock()
		rec, md := sb.rec, sb.config.GetMetadata()
		id, state, cg, netns := rec.ID, rec.State, rec.CgroupParent, rec.NetNS
		sb.mu.Unlock()
		if state != store.SandboxReady {
			continue
		}
		pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: id}
		base := func(container, cid, image string) []string {
			return []string{container, cid, image, cid, md.GetNamespace(), md.GetName()}
		}
		if st, err := runtime.CgroupStats(cg); err == nil {
			pm.Metrics = append(pm.Metrics, cgroupMetrics(defs, st, base("", id, ""))...)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
		if netns != "" {
			if ifs, err := readNetDev(netns); err == nil {
				pm.Metrics = append(pm.Metrics, networkMetrics(defs, ifs, base("POD", id, ""))...)
			}
		}
		for _, c := range s.podContainers(id) {
			c.mu.Lock()
			cid, name, image, cstate, ccg := c.rec.ID, c.config.GetMetadata().GetName(), c.rec.ImageName, c.rec.State, c.rec.CgroupsPath
			c.mu.Unlock()
			if cstate != store.ContainerRunning {
				continue
			}
			cm := &runtimeapi.ContainerMetrics{ContainerId: cid}
			labels := base(name, cid, image)
			if st, err := runtime.CgroupStats(ccg); err == nil {
				cm.Metrics = append(cm.Metrics, cgroupMetrics(defs, st, labels)...)
			} else if !errors.Is(err, errdefs.ErrNotFound) {
				return nil, err
			}
			if u, ok := s.sampler.layer(cid); ok {
				f := fsFigures{usedBytes: u.UsedBytes}
				var sfs unix.Statfs_t
				if unix.Statfs(u.Mountpoint, &sfs) == nil {
					f.limitBytes = sfs.Blocks * uint64(sfs.Bsize)
					f.inodes, f.inodesFree = sfs.Files, sfs.Ffree
				}
				cm.Metrics = append(cm.Metrics, fsMetrics(defs, f, append(slices.Clone(labels), u.Mountpoint), u.Time.UnixNano())...)
			}
			pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
		}
		out = append(out, pm)
	}
	return out, nil
}

func cgroupMetrics(defs []metricDef, st *runtime.Stats, labels []string) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, d := range defs {
		if d.cgroup != nil {
			out = append(out, &runtimeapi.Metric{Name: d.name, MetricType: d.typ, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: d.cgroup(st)}})
		}
		if d.cgroupIf != nil {
			if v, ok := d.cgroupIf(st); ok {
				out = append(out, &runtimeapi.Metric{Name: d.name, MetricType: d.typ, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v}})
			}
		}
	}
	return out
}

func networkMetrics(defs []metricDef, ifs []ifaceCounters, labels []string) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, c := range ifs {
		if c.name == "lo" {
			continue
		}
		l := append(slices.Clone(labels), c.name)
		for _, d := range defs {
			if d.net != nil {
				out = append(out, &runtimeapi.Metric{Name: d.name, MetricType: d.typ, LabelValues: l, Value: &runtimeapi.UInt64Value{Value: d.net(c)}})
			}
		}
	}
	return out
}

func fsMetrics(defs []metricDef, f fsFigures, labels []string, ts int64) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, d := range defs {
		if d.fs != nil {
			out = append(out, &runtimeapi.Metric{Name: d.name, Timestamp: ts, MetricType: d.typ, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: d.fs(f)}})
		}
	}
	return out
}
