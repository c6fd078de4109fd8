package podstats

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// criticalMetrics are the metrics critest v1.37.0's "runtime should
// support listing pod sandbox metrics" requires a value of (its
// expectedMetricDescriptorNames less the ones it lets a runtime leave out
// or leave without a value).
var criticalMetrics = []string{
	"container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_throttled_seconds_total",
	"container_cpu_system_seconds_total", "container_cpu_usage_seconds_total", "container_cpu_user_seconds_total",
	"container_file_descriptors", "container_fs_inodes_free", "container_fs_inodes_total", "container_fs_limit_bytes",
	"container_fs_usage_bytes", "container_last_seen", "container_memory_cache", "container_memory_failcnt",
	"container_memory_failures_total", "container_memory_kernel_usage", "container_memory_mapped_file",
	"container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap", "container_memory_usage_bytes",
	"container_memory_working_set_bytes", "container_network_receive_bytes_total", "container_network_receive_errors_total",
	"container_network_receive_packets_dropped_total", "container_network_receive_packets_total",
	"container_network_transmit_bytes_total", "container_network_transmit_errors_total",
	"container_network_transmit_packets_dropped_total", "container_network_transmit_packets_total",
	"container_oom_events_total", "container_processes", "container_sockets", "container_spec_cpu_period",
	"container_spec_cpu_shares", "container_spec_memory_limit_bytes", "container_spec_memory_swap_limit_bytes",
	"container_start_time_seconds", "container_threads", "container_threads_max",
}

// critestMayBeAbsent are the metrics critest v1.37.0 lets a pod's metrics
// leave out (its unimplementedMetricDescriptors and
// optionalValuesForMetricDescriptors): every other descriptor crind
// returns must have a value in a plain pod, or critest fails it.
var critestMayBeAbsent = []string{
	"container_hugetlb_max_usage_bytes", "container_hugetlb_usage_bytes",
	"container_pressure_cpu_stalled_seconds_total", "container_pressure_cpu_waiting_seconds_total",
	"container_pressure_io_stalled_seconds_total", "container_pressure_io_waiting_seconds_total",
	"container_pressure_memory_stalled_seconds_total", "container_pressure_memory_waiting_seconds_total",
	"container_spec_cpu_quota", "container_spec_memory_reservation_limit_bytes", "container_ulimits_soft",
	"container_blkio_device_usage_total", "container_fs_reads_bytes_total", "container_fs_reads_total",
	"container_fs_writes_bytes_total", "container_fs_writes_total",
}

// A pod on a host with the least there can be (cgroup v1: no PSI, no
// hugetlb, no block I/O accounting), whose container has a CPU quota as
// critest's has, reports every descriptor critest does not let it omit.
func TestMetricsOfPlainPod(t *testing.T) {
	defs := metricDefs()
	base := []string{"c", "id", "img", "id", "ns", "pod"}
	st := &runtime.Stats{Detail: &runtime.Detail{CPUQuotaMicros: 20000}}
	ms := collect(defs, &figures{st: st, start: 100, now: 200, fs: &fsFigures{mountpoint: "/"}}, base, nil)
	ms = collect(defs, &figures{ifs: []ifaceCounters{{name: "eth0"}}}, base, ms)
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.Name] = true
	}
	for _, d := range defs {
		if !seen[d.name] && !slices.Contains(critestMayBeAbsent, d.name) {
			t.Errorf("%s is described but a plain pod has no value of it: critest's listing spec fails then", d.name)
		}
	}
}

// kubelet builds a Prometheus desc from each descriptor's LabelKeys and
// fills LabelValues in order: every metric must carry exactly as many
// values as its descriptor has keys, names must be unique, and no two
// metrics of one subject may share a name and label values (Prometheus
// refuses the whole scrape then).
func TestMetricLabelsMatchDescriptors(t *testing.T) {
	keys := map[string][]string{}
	for _, d := range New(Config{Source: &fakeSource{}, Images: noLayers{}}).MetricDescriptors() {
		if _, dup := keys[d.Name]; dup {
			t.Errorf("descriptor %s twice", d.Name)
		}
		if d.Help == "" || len(d.LabelKeys) == 0 {
			t.Errorf("descriptor %s: help %q, label keys %q; critest wants both", d.Name, d.Help, d.LabelKeys)
		}
		keys[d.Name] = d.LabelKeys
	}
	for _, n := range criticalMetrics {
		if _, ok := keys[n]; !ok {
			t.Errorf("no descriptor %s", n)
		}
	}

	ms := fullFigureMetrics(t)
	seen := map[string]bool{}
	series := map[string]bool{}
	for _, m := range ms {
		seen[m.Name] = true
		k, ok := keys[m.Name]
		if !ok {
			t.Errorf("metric %s has no descriptor", m.Name)
			continue
		}
		if len(m.LabelValues) != len(k) {
			t.Errorf("metric %s: %d label values %q, descriptor has %d keys", m.Name, len(m.LabelValues), m.LabelValues, len(k))
		}
		id := m.Name + "{" + strings.Join(m.LabelValues, ",") + "}"
		if series[id] {
			t.Errorf("series %s reported twice", id)
		}
		series[id] = true
	}
	for n := range keys {
		if !seen[n] {
			t.Errorf("descriptor %s is never reported", n)
		}
	}
}

// fullFigureMetrics are the metrics of a container with every figure
// there is (PSI, a quota, a device, a writable layer) and of a pod's
// network.
func fullFigureMetrics(t *testing.T) []*runtimeapi.Metric {
	t.Helper()
	defs := metricDefs()
	base := []string{"c", "id", "img", "id", "ns", "pod"}
	pr := &runtime.Pressure{Some: runtime.PressureLine{Total: 3500 * time.Millisecond}, Full: runtime.PressureLine{Total: 1200 * time.Millisecond}}
	st := &runtime.Stats{CPUUsageNanos: 2500e6, CPUPressure: pr, MemoryPressure: pr, IOPressure: pr, Detail: &runtime.Detail{
		CPUQuotaMicros: 20000, CPUPeriodMicros: 100000, CFSThrottledNanos: 1900e6, HasMaxOpenFiles: true, MaxOpenFiles: 1024,
		IO:      []runtime.DeviceIO{{Major: 8, Minor: 0, ReadBytes: 1, WriteBytes: 2}},
		Hugetlb: []runtime.HugetlbUsage{{Size: "2MB", UsageBytes: 4 << 20}, {Size: "1GB"}},
	}}
	devName := func(major, minor uint32) string { return "/dev/sda" }
	f := &figures{st: st, start: 100, now: 200, devName: devName, fs: &fsFigures{mountpoint: "/var", usedBytes: 5}, fsTime: 7}
	ms := collect(defs, f, base, nil)
	return collect(defs, &figures{ifs: []ifaceCounters{{name: "lo"}, {name: "eth0", rxBytes: 9}}}, base, ms)
}

func TestMetricValues(t *testing.T) {
	got := map[string]uint64{}
	for _, m := range fullFigureMetrics(t) {
		k := m.Name
		if len(m.LabelValues) > 6 {
			k += "/" + m.LabelValues[len(m.LabelValues)-1]
		}
		got[k] = m.Value.GetValue()
		if (m.Timestamp != 0) != slices.Contains([]string{"container_fs_usage_bytes", "container_fs_limit_bytes",
			"container_fs_inodes_total", "container_fs_inodes_free"}, m.Name) {
			t.Errorf("%s timestamp %d: only the sampled writable layer figures carry one", m.Name, m.Timestamp)
		}
	}
	want := map[string]uint64{
		"container_cpu_usage_seconds_total":           2, // whole seconds
		"container_cpu_cfs_throttled_seconds_total":   1,
		"container_spec_cpu_quota":                    20000,
		"container_spec_cpu_period":                   100000,
		"container_pressure_io_waiting_seconds_total": 3,
		"container_pressure_io_stalled_seconds_total": 1,
		"container_start_time_seconds":                100,
		"container_last_seen":                         200,
		"container_ulimits_soft/max_open_files":       1024,
		"container_blkio_device_usage_total/Write":    2,
		"container_fs_reads_bytes_total//dev/sda":     1,
		"container_fs_usage_bytes//var":               5,
		"container_network_receive_bytes_total/eth0":  9,
		"container_memory_failures_total/container":   0,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (reported %v), want %d", k, g, ok, v)
		}
	}
	if _, ok := got["container_network_receive_bytes_total/lo"]; ok {
		t.Error("loopback reported; cAdvisor leaves it out")
	}

	// A cgroup without a quota has no CFS figures, as with cAdvisor, and
	// a cgroup without PSI no pressure ones.
	ms := collect(metricDefs(), &figures{st: &runtime.Stats{Detail: &runtime.Detail{}}}, []string{"", "p", "", "p", "ns", "pod"}, nil)
	for _, m := range ms {
		if slices.Contains([]string{"container_cpu_cfs_periods_total", "container_spec_cpu_quota",
			"container_pressure_cpu_waiting_seconds_total"}, m.Name) {
			t.Errorf("%s reported for a cgroup without a quota or PSI", m.Name)
		}
	}
	if diff := cmp.Diff([]string{"", "p", "", "p", "ns", "pod"}, ms[0].LabelValues); diff != "" {
		t.Errorf("pod cgroup labels (-want +got):\n%s", diff)
	}
}
