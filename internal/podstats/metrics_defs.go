package podstats

import (
	"slices"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// figures are what the metrics of one labelled subject (a container, the
// pod's cgroup, the pod's network) are computed from; what is not at hand
// is nil or zero, and the metrics that need it are left out.
type figures struct {
	st  *runtime.Stats // with Detail
	ifs []ifaceCounters
	fs  *fsFigures
	// fsTime is when fs was measured (unix nanos): the fs metrics'
	// timestamp, so kubelet does not present an old walk as fresh.
	fsTime int64
	// start is when the container started (the pod: was created), unix
	// seconds; now is the time of the request, unix seconds.
	start, now int64
	// devName names a block device, as cAdvisor's device label does.
	devName func(major, minor uint32) string
}

// fsFigures are a container's writable layer usage and its filesystem's
// capacity (statfs), on the filesystem mounted at mountpoint.
type fsFigures struct {
	mountpoint                                string
	usedBytes, limitBytes, inodes, inodesFree uint64
}

// emitter collects the values of one metric of one subject; one per
// collect call, reused for every metric (no closure per metric).
type emitter struct {
	def  *metricDef
	base []string
	ts   int64
	out  []*runtimeapi.Metric
}

// emit reports one value of the metric, with the values of the labels the
// metric adds to the base ones.
func (e *emitter) emit(v uint64, extra ...string) {
	labels := e.base
	if len(extra) > 0 {
		labels = append(slices.Clip(e.base), extra...)
	}
	e.out = append(e.out, &runtimeapi.Metric{Name: e.def.name, Timestamp: e.ts, MetricType: e.def.typ, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v}})
}

// metricDef is one metric crind reports.
type metricDef struct {
	name, help string
	typ        runtimeapi.MetricType
	// extra are the label keys after the base ones.
	extra []string
	// sampled: the value is the stats sampler's (fsTime is its timestamp),
	// not read for this request.
	sampled bool
	values  func(f *figures, e *emitter)
}

// baseLabelKeys are cAdvisor's labels of every container metric.
var baseLabelKeys = [...]string{"container", "id", "image", "name", "namespace", "pod"}

func (d *metricDef) labelKeys() []string {
	return append(baseLabelKeys[:len(baseLabelKeys):len(baseLabelKeys)], d.extra...)
}

const (
	counter = runtimeapi.MetricType_COUNTER
	gauge   = runtimeapi.MetricType_GAUGE
)

func wholeSeconds(ns uint64) uint64 { return ns / 1e9 }

// cg is a metric of a cgroup's basic figures.
func cg(name, help string, typ runtimeapi.MetricType, v func(*runtime.Stats) uint64) metricDef {
	return metricDef{name: name, help: help, typ: typ, values: func(f *figures, e *emitter) {
		if f.st != nil {
			e.emit(v(f.st))
		}
	}}
}

// dt is a metric of a cgroup's detail figures.
func dt(name, help string, typ runtimeapi.MetricType, v func(*runtime.Detail) uint64) metricDef {
	return metricDef{name: name, help: help, typ: typ, values: func(f *figures, e *emitter) {
		if f.st != nil && f.st.Detail != nil {
			e.emit(v(f.st.Detail))
		}
	}}
}

// quotaOnly is a CFS metric cAdvisor reports only for a cgroup with a
// CPU quota.
func quotaOnly(d metricDef) metricDef {
	values := d.values
	d.values = func(f *figures, e *emitter) {
		if f.st != nil && f.st.Detail != nil && f.st.Detail.CPUQuotaMicros != 0 {
			values(f, e)
		}
	}
	return d
}

// metricDefs lists every metric, in the order they are reported.
func metricDefs() []metricDef {
	defs := []metricDef{
		{name: "container_last_seen", help: "Last time a container was seen by the exporter (unix seconds).", typ: gauge,
			values: func(f *figures, e *emitter) {
				if f.st != nil {
					e.emit(uint64(f.now))
				}
			}},
		{name: "container_start_time_seconds", help: "Start time of the container since unix epoch in seconds.", typ: gauge,
			values: func(f *figures, e *emitter) {
				if f.st != nil && f.start > 0 {
					e.emit(uint64(f.start))
				}
			}},
	}
	defs = append(defs, cpuDefs()...)
	defs = append(defs, memoryDefs()...)
	defs = append(defs, processDefs()...)
	defs = append(defs, pressureDefs()...)
	defs = append(defs, networkDefs()...)
	return append(defs, fsDefs()...)
}

func cpuDefs() []metricDef {
	return []metricDef{
		cg("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds (whole seconds).", counter,
			func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUUsageNanos) }),
		cg("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds (whole seconds).", counter,
			func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUUserNanos) }),
		cg("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds (whole seconds).", counter,
			func(s *runtime.Stats) uint64 { return wholeSeconds(s.CPUSystemNanos) }),
		quotaOnly(dt("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", counter,
			func(d *runtime.Detail) uint64 { return d.CFSPeriods })),
		quotaOnly(dt("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", counter,
			func(d *runtime.Detail) uint64 { return d.CFSThrottledPeriods })),
		quotaOnly(dt("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled (whole seconds).", counter,
			func(d *runtime.Detail) uint64 { return wholeSeconds(d.CFSThrottledNanos) })),
		dt("container_spec_cpu_period", "CPU period of the container (microseconds).", gauge,
			func(d *runtime.Detail) uint64 { return d.CPUPeriodMicros }),
		quotaOnly(dt("container_spec_cpu_quota", "CPU quota of the container (microseconds per period).", gauge,
			func(d *runtime.Detail) uint64 { return d.CPUQuotaMicros })),
		dt("container_spec_cpu_shares", "CPU share of the container.", gauge,
			func(d *runtime.Detail) uint64 { return d.CPUShares }),
	}
}

func memoryDefs() []metricDef {
	return []metricDef{
		cg("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed.", gauge,
			func(s *runtime.Stats) uint64 { return s.MemoryUsageBytes }),
		dt("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes.", gauge,
			func(d *runtime.Detail) uint64 { return d.MemoryMaxUsageBytes }),
		cg("container_memory_working_set_bytes", "Current working set in bytes.", gauge,
			func(s *runtime.Stats) uint64 { return s.MemoryWorkingSet }),
		cg("container_memory_rss", "Size of RSS in bytes.", gauge,
			func(s *runtime.Stats) uint64 { return s.MemoryRSSBytes }),
		cg("container_memory_cache", "Number of bytes of page cache memory.", gauge,
			func(s *runtime.Stats) uint64 { return s.MemoryCacheBytes }),
		dt("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", gauge,
			func(d *runtime.Detail) uint64 { return d.MemoryKernelBytes }),
		dt("container_memory_mapped_file", "Size of memory mapped files in bytes.", gauge,
			func(d *runtime.Detail) uint64 { return d.MemoryMappedFileBytes }),
		dt("container_memory_swap", "Container swap usage in bytes.", gauge,
			func(d *runtime.Detail) uint64 { return d.MemorySwapBytes }),
		cg("container_memory_failcnt", "Number of memory usage hits limits.", counter,
			func(s *runtime.Stats) uint64 { return s.MemoryFailcnt }),
		{name: "container_memory_failures_total", help: "Cumulative count of memory allocation failures.", typ: counter,
			extra: []string{"failure_type", "scope"}, values: func(f *figures, e *emitter) {
				if f.st == nil || f.st.Detail == nil {
					return
				}
				e.emit(f.st.Detail.PageFaults, "pgfault", "container")
				e.emit(f.st.Detail.MajorPageFaults, "pgmajfault", "container")
				e.emit(f.st.MemoryPageFaults, "pgfault", "hierarchy")
				e.emit(f.st.MemoryMajorFaults, "pgmajfault", "hierarchy")
			}},
		hugetlbDef("container_hugetlb_usage_bytes", "Hugepage usage in bytes.", gauge, func(h *runtime.HugetlbUsage) uint64 { return h.UsageBytes }),
		hugetlbDef("container_hugetlb_max_usage_bytes", "Hugepage maximum usage in bytes (0 on cgroup v2, which keeps no peak).", gauge,
			func(h *runtime.HugetlbUsage) uint64 { return h.MaxUsageBytes }),
		dt("container_oom_events_total", "Count of out of memory events observed for the container.", counter,
			func(d *runtime.Detail) uint64 { return d.OOMKills }),
		cg("container_spec_memory_limit_bytes", "Memory limit for the container (0 when unlimited).", gauge,
			func(s *runtime.Stats) uint64 { return s.MemoryLimitBytes }),
		dt("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container: memory plus swap (0 when unlimited).", gauge,
			func(d *runtime.Detail) uint64 { return d.MemorySwapLimitBytes }),
		dt("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container (0 when none).", gauge,
			func(d *runtime.Detail) uint64 { return d.MemoryReservationBytes }),
	}
}

// hugetlbDef is a metric of each huge page size, where the cgroup has the
// hugetlb controller. (cAdvisor's container_hugetlb_failcnt is left out:
// critest fails a runtime that describes a metric it may not report and
// that critest does not list as optional.)
func hugetlbDef(name, help string, typ runtimeapi.MetricType, v func(*runtime.HugetlbUsage) uint64) metricDef {
	return metricDef{name: name, help: help, typ: typ, extra: []string{"size"}, values: func(f *figures, e *emitter) {
		if f.st == nil || f.st.Detail == nil {
			return
		}
		for i := range f.st.Detail.Hugetlb {
			e.emit(v(&f.st.Detail.Hugetlb[i]), f.st.Detail.Hugetlb[i].Size)
		}
	}}
}

func processDefs() []metricDef {
	return []metricDef{
		cg("container_processes", "Number of processes running inside the container.", gauge,
			func(s *runtime.Stats) uint64 { return s.Processes }),
		cg("container_threads", "Number of threads running inside the container.", gauge,
			func(s *runtime.Stats) uint64 { return s.PidsCurrent }),
		dt("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero.", gauge,
			func(d *runtime.Detail) uint64 { return d.ThreadsMax }),
		dt("container_file_descriptors", "Number of open file descriptors for the container.", gauge,
			func(d *runtime.Detail) uint64 { return d.FileDescriptors }),
		dt("container_sockets", "Number of open sockets for the container.", gauge,
			func(d *runtime.Detail) uint64 { return d.Sockets }),
		{name: "container_ulimits_soft", help: "Soft ulimit values for the container root process (max_open_files; unlimited is 2^64-1).", typ: gauge,
			extra: []string{"ulimit"}, values: func(f *figures, e *emitter) {
				if f.st != nil && f.st.Detail != nil && f.st.Detail.HasMaxOpenFiles {
					e.emit(f.st.Detail.MaxOpenFiles, "max_open_files")
				}
			}},
	}
}

// pressureDefs are cAdvisor's PSI counters: "waiting" is the time some
// task waited on a resource (PSI's some line), "stalled" the time all did
// (full), in whole seconds; reported only where the cgroup has PSI.
func pressureDefs() []metricDef {
	var defs []metricDef
	for _, r := range []struct {
		name string
		p    func(*runtime.Stats) *runtime.Pressure
	}{
		{"cpu", func(s *runtime.Stats) *runtime.Pressure { return s.CPUPressure }},
		{"memory", func(s *runtime.Stats) *runtime.Pressure { return s.MemoryPressure }},
		{"io", func(s *runtime.Stats) *runtime.Pressure { return s.IOPressure }},
	} {
		for _, full := range []bool{false, true} {
			which, help := "waiting", "Total time duration tasks in the container have waited due to "+r.name+" congestion (whole seconds)."
			if full {
				which, help = "stalled", "Total time duration no tasks in the container could make progress due to "+r.name+" congestion (whole seconds)."
			}
			defs = append(defs, metricDef{name: "container_pressure_" + r.name + "_" + which + "_seconds_total", help: help, typ: counter,
				values: func(f *figures, e *emitter) {
					if f.st == nil || r.p(f.st) == nil {
						return
					}
					line := r.p(f.st).Some
					if full {
						line = r.p(f.st).Full
					}
					e.emit(wholeSeconds(uint64(line.Total)))
				}})
		}
	}
	return defs
}

func networkDefs() []metricDef {
	def := func(name, help string, v func(ifaceCounters) uint64) metricDef {
		return metricDef{name: name, help: help, typ: counter, extra: []string{"interface"}, values: func(f *figures, e *emitter) {
			for _, c := range f.ifs {
				if c.name != "lo" {
					e.emit(v(c), c.name)
				}
			}
		}}
	}
	return []metricDef{
		def("container_network_receive_bytes_total", "Cumulative count of bytes received.", func(c ifaceCounters) uint64 { return c.rxBytes }),
		def("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted.", func(c ifaceCounters) uint64 { return c.txBytes }),
		def("container_network_receive_packets_total", "Cumulative count of packets received.", func(c ifaceCounters) uint64 { return c.rxPackets }),
		def("container_network_transmit_packets_total", "Cumulative count of packets transmitted.", func(c ifaceCounters) uint64 { return c.txPackets }),
		def("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving.", func(c ifaceCounters) uint64 { return c.rxErrors }),
		def("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting.", func(c ifaceCounters) uint64 { return c.txErrors }),
		def("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving.", func(c ifaceCounters) uint64 { return c.rxDrop }),
		def("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting.", func(c ifaceCounters) uint64 { return c.txDrop }),
	}
}

func fsDefs() []metricDef {
	layer := func(name, help string, v func(*fsFigures) uint64) metricDef {
		return metricDef{name: name, help: help, typ: gauge, extra: []string{"device"}, sampled: true, values: func(f *figures, e *emitter) {
			if f.fs != nil {
				e.emit(v(f.fs), f.fs.mountpoint)
			}
		}}
	}
	io := func(name, help string, v func(*runtime.DeviceIO) uint64) metricDef {
		return metricDef{name: name, help: help, typ: counter, extra: []string{"device"}, values: func(f *figures, e *emitter) {
			if f.st == nil || f.st.Detail == nil {
				return
			}
			for i := range f.st.Detail.IO {
				d := &f.st.Detail.IO[i]
				e.emit(v(d), f.devName(d.Major, d.Minor))
			}
		}}
	}
	return []metricDef{
		layer("container_fs_usage_bytes", "Number of bytes consumed by the container's writable layer.", func(f *fsFigures) uint64 { return f.usedBytes }),
		layer("container_fs_limit_bytes", "Number of bytes the filesystem holding the writable layer can hold.", func(f *fsFigures) uint64 { return f.limitBytes }),
		layer("container_fs_inodes_total", "Number of inodes of the filesystem holding the writable layer.", func(f *fsFigures) uint64 { return f.inodes }),
		layer("container_fs_inodes_free", "Number of available inodes of the filesystem holding the writable layer.", func(f *fsFigures) uint64 { return f.inodesFree }),
		io("container_fs_reads_bytes_total", "Cumulative count of bytes read.", func(d *runtime.DeviceIO) uint64 { return d.ReadBytes }),
		io("container_fs_reads_total", "Cumulative count of reads completed.", func(d *runtime.DeviceIO) uint64 { return d.Reads }),
		io("container_fs_writes_bytes_total", "Cumulative count of bytes written.", func(d *runtime.DeviceIO) uint64 { return d.WriteBytes }),
		io("container_fs_writes_total", "Cumulative count of writes completed.", func(d *runtime.DeviceIO) uint64 { return d.Writes }),
		{name: "container_blkio_device_usage_total", help: "Blkio device bytes usage.", typ: counter,
			extra: []string{"device", "major", "minor", "operation"}, values: func(f *figures, e *emitter) {
				if f.st == nil || f.st.Detail == nil {
					return
				}
				for i := range f.st.Detail.IO {
					d := &f.st.Detail.IO[i]
					name, major, minor := f.devName(d.Major, d.Minor), strconv.Itoa(int(d.Major)), strconv.Itoa(int(d.Minor))
					e.emit(d.ReadBytes, name, major, minor, "Read")
					e.emit(d.WriteBytes, name, major, minor, "Write")
				}
			}},
	}
}
