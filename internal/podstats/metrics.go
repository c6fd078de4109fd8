package podstats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
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

// MetricDescriptors describes every metric PodMetrics reports.
func (c *Collector) MetricDescriptors() []*runtimeapi.MetricDescriptor {
	var out []*runtimeapi.MetricDescriptor
	for _, d := range metricDefs() {
		out = append(out, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: d.labelKeys()})
	}
	return out
}

// PodMetrics reports the metrics of every ready pod and its running
// containers, read now (filesystem usage as last sampled). It fails when
// ctx ends or a cgroup cannot be read.
func (c *Collector) PodMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	mp := &metricsPass{defs: metricDefs(), now: time.Now().Unix(), devs: deviceNames{}}
	var out []*runtimeapi.PodSandboxMetrics
	for _, p := range c.src.Pods() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if p.State != store.SandboxReady {
			continue
		}
		pm, err := c.podMetrics(p, mp)
		if err != nil {
			return nil, err
		}
		out = append(out, pm)
	}
	return out, nil
}

// podMetrics are the metrics of a ready pod: its cgroup's, its network's
// and its running containers'.
func (c *Collector) podMetrics(p Pod, mp *metricsPass) (*runtimeapi.PodSandboxMetrics, error) {
	pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: p.ID}
	mp.namespace, mp.pod = p.Metadata.GetNamespace(), p.Metadata.GetName()
	st, err := cgroupDetail(p.CgroupParent)
	if err != nil {
		return nil, err
	}
	if st != nil {
		f := &figures{st: st, start: p.CreatedAt / 1e9, now: mp.now, devName: mp.devs.name}
		pm.Metrics = collect(mp.defs, f, mp.labels("", p.ID, ""), pm.Metrics)
	}
	if p.NetNS != "" {
		if ifs, err := readNetDev(p.NetNS); err == nil {
			pm.Metrics = collect(mp.defs, &figures{ifs: ifs}, mp.labels("POD", p.ID, ""), pm.Metrics)
		}
	}
	for _, ctr := range c.src.PodContainers(p.ID) {
		cm, err := c.containerMetrics(ctr, mp)
		if err != nil {
			return nil, err
		}
		if cm != nil {
			pm.ContainerMetrics = append(pm.ContainerMetrics, cm)
		}
	}
	return pm, nil
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

// containerMetrics are the metrics of ctr; nil when it is not running.
func (c *Collector) containerMetrics(ctr Container, mp *metricsPass) (*runtimeapi.ContainerMetrics, error) {
	if ctr.State != store.ContainerRunning {
		return nil, nil
	}
	st, err := cgroupDetail(ctr.CgroupsPath)
	if err != nil {
		return nil, err
	}
	f := &figures{st: st, start: ctr.StartedAt / 1e9, now: mp.now, devName: mp.devs.name}
	if u, ok := c.layer(ctr.ID); ok {
		f.fs, f.fsTime = &fsFigures{mountpoint: u.Mountpoint, usedBytes: u.UsedBytes}, u.Time.UnixNano()
		var sfs unix.Statfs_t
		if unix.Statfs(u.Mountpoint, &sfs) == nil {
			f.fs.limitBytes = sfs.Blocks * uint64(sfs.Bsize)
			f.fs.inodes, f.fs.inodesFree = sfs.Files, sfs.Ffree
		}
	}
	ms := collect(mp.defs, f, mp.labels(ctr.Metadata.GetName(), ctr.ID, ctr.Image), make([]*runtimeapi.Metric, 0, len(mp.defs)+8))
	return &runtimeapi.ContainerMetrics{ContainerId: ctr.ID, Metrics: ms}, nil
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
