//go:build integration

package integration

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/test/poll"
)

// series is one metric value with its labels by key.
type series struct {
	labels map[string]string
	value  uint64
}

// metricsOf lists the CRI metrics of one container (or, with id the pod's,
// the pod's own), by name, checking every label set against the
// descriptors the way kubelet's collector uses them.
func metricsOf(t *testing.T, d *daemon, id string) map[string][]series {
	t.Helper()
	ctx := ctxT(t)
	descs, err := d.rs.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, ds := range descs.Descriptors {
		keys[ds.Name] = ds.LabelKeys
	}
	r, err := d.rs.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]series{}
	add := func(ms []*runtimeapi.Metric) {
		for _, m := range ms {
			k := keys[m.Name]
			if len(k) != len(m.LabelValues) {
				t.Errorf("metric %s labels %q; descriptor keys %q", m.Name, m.LabelValues, k)
				continue
			}
			s := series{labels: map[string]string{}, value: m.Value.GetValue()}
			for i, key := range k {
				s.labels[key] = m.LabelValues[i]
			}
			out[m.Name] = append(out[m.Name], s)
		}
	}
	for _, pm := range r.PodMetrics {
		if pm.PodSandboxId == id {
			add(pm.Metrics)
		}
		for _, cm := range pm.ContainerMetrics {
			if cm.ContainerId == id {
				add(cm.Metrics)
			}
		}
	}
	return out
}

func (m series) String() string { return fmt.Sprintf("%v=%d", m.labels, m.value) }

// one is the value of a metric with a single series (or the first one
// whose labels include match, key and value pairs), and whether there is
// one.
func one(ms map[string][]series, name string, match ...string) (uint64, bool) {
	for _, s := range ms[name] {
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			ok = ok && s.labels[match[i]] == match[i+1]
		}
		if ok {
			return s.value, true
		}
	}
	return 0, false
}

// unified says whether the host is cgroup v2 only.
func unified() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// containerCgroup is the directory of container id's cgroup under d's
// parent: in v1Controller's hierarchy on v1, the one tree on v2 (the
// cgroupfs driver names it by the id, the systemd driver crin-<id>.scope).
func containerCgroup(t *testing.T, d *daemon, id, v1Controller string) string {
	t.Helper()
	base := filepath.Join("/sys/fs/cgroup", cgroup.Dir(d.cgroup))
	if !unified() {
		base = filepath.Join("/sys/fs/cgroup", v1Controller, cgroup.Dir(d.cgroup))
	}
	var dir string
	_ = filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && (e.Name() == id || e.Name() == "crin-"+id+".scope") {
			dir = p
			return filepath.SkipAll
		}
		return nil
	})
	if dir == "" {
		t.Fatalf("no cgroup of %s under %s", id, base)
	}
	return dir
}

// cgroupUint reads a one-number cgroup file.
func cgroupUint(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// cgroupKV reads a "key value" cgroup file.
func cgroupKV(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			out[k], _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return out
}

// TestMetricsFigures checks the cAdvisor metrics crind serves against what
// the containers were made to do: a busy loop under a 10% CPU quota
// holding a known set of files and a listening socket, a process killed
// for memory, and a file written to disk.
func TestMetricsFigures(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	withStatsPeriod(t, d, "1s")
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("metrics")
	pod := d.runPod(t, podCfg)

	// sh holds 0-2 and 3-9 (10 files); nc holds 0-2 and its listening
	// socket (4): 14 files, 1 socket, 2 processes.
	busyCfg := containerConfig("busy", ref, "sh", "-c",
		"nc -l -p 8080 & exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null 7</dev/null 8</dev/null 9</dev/null; while :; do :; done")
	busyCfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 10000, CpuShares: 512,
		MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 64 << 20}
	busy := d.runContainer(t, pod, podCfg, busyCfg)

	oomCfg := containerConfig("oom", ref, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; echo survived; sleep 600")
	oomCfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 32 << 20, MemorySwapLimitInBytes: 32 << 20}
	oom := d.runContainer(t, pod, podCfg, oomCfg)

	// The writer fills 8 MiB of its writable layer, then writes 8 MiB into
	// a directory of the host's disk (crind's root may be on tmpfs, as in
	// the node lane's VM): direct I/O, charged to the writer's cgroup on
	// v1 too (buffered writeback is not); fsync where O_DIRECT is refused.
	// It writes once the test has made sure the kernel accounts it.
	disk, err := os.MkdirTemp("/var/tmp", "crinmetrics")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(disk) })
	writerCfg := containerConfig("writer", ref, "sh", "-c", "until [ -e /go ]; do sleep 0.1; done; dd if=/dev/zero of=/data bs=1M count=8; "+
		"dd if=/dev/zero of=/disk/data bs=1M count=8 oflag=direct || dd if=/dev/zero of=/disk/data bs=1M count=8 conv=fsync; echo written; sleep 600")
	writerCfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/disk", HostPath: disk}}
	writer := d.runContainer(t, pod, podCfg, writerCfg)

	t.Run("cpu throttling", func(t *testing.T) { checkThrottling(t, d, busy) })
	t.Run("files and processes", func(t *testing.T) { checkFiles(t, d, busy) })
	t.Run("oom", func(t *testing.T) { checkOOM(t, d, podCfg, oomCfg, oom) })
	t.Run("written file", func(t *testing.T) { checkWrites(t, d, podCfg, writer, disk) })
	t.Run("times", func(t *testing.T) { checkTimes(t, d, pod, busy) })
}

func checkThrottling(t *testing.T, d *daemon, id string) {
	var ms map[string][]series
	poll.Until(t, 2*time.Minute, "a busy loop under a 10% quota throttled for a second", func() (bool, string) {
		ms = metricsOf(t, d, id)
		s, _ := one(ms, "container_cpu_cfs_throttled_seconds_total")
		p, _ := one(ms, "container_cpu_cfs_throttled_periods_total")
		return s >= 1 && p >= 5, fmt.Sprintf("throttled %d s in %d periods", s, p)
	})
	dir := containerCgroup(t, d, id, "cpu")
	shares, swapLimit := uint64(512), uint64(64<<20)
	if unified() {
		// The runtime turns the CRI's memory+swap limit into memory.max
		// and memory.swap.max its own way (runc: 64 MiB and 0; crun 1.21:
		// 64 MiB and 64 MiB): the metric is their sum.
		swapLimit = cgroupUint(t, filepath.Join(dir, "memory.max")) + cgroupUint(t, filepath.Join(dir, "memory.swap.max"))
		// v2 has cpu.weight, which the runtime derived from the shares:
		// the shares are what that weight maps back to.
		shares = 2 + (cgroupUint(t, filepath.Join(dir, "cpu.weight"))-1)*262142/9999
	}
	for name, want := range map[string]uint64{"container_spec_cpu_quota": 10000, "container_spec_cpu_period": 100000,
		"container_spec_cpu_shares": shares, "container_spec_memory_limit_bytes": 64 << 20, "container_spec_memory_swap_limit_bytes": swapLimit} {
		if got, ok := one(ms, name); got != want {
			t.Errorf("%s = %d (reported %v), want %d as the container's resources say", name, got, ok, want)
		}
	}
	periods, _ := one(ms, "container_cpu_cfs_periods_total")
	throttled, _ := one(ms, "container_cpu_cfs_throttled_periods_total")
	if periods < throttled {
		t.Errorf("%d periods, %d of them throttled", periods, throttled)
	}
	// The counters only grow: the files read afterwards hold at least as much.
	stat := cgroupKV(t, filepath.Join(dir, "cpu.stat"))
	if stat["nr_throttled"] < throttled || stat["nr_periods"] < periods {
		t.Errorf("cpu.stat %v after metrics of %d periods, %d throttled", stat, periods, throttled)
	}
}

func checkFiles(t *testing.T, d *daemon, id string) {
	poll.Until(t, time.Minute, "14 open files, 1 socket, 2 processes", func() (bool, string) {
		ms := metricsOf(t, d, id)
		fds, _ := one(ms, "container_file_descriptors")
		socks, _ := one(ms, "container_sockets")
		procs, _ := one(ms, "container_processes")
		threads, _ := one(ms, "container_threads")
		return fds == 14 && socks == 1 && procs == 2 && threads == 2,
			fmt.Sprintf("fds %d, sockets %d, processes %d, threads %d", fds, socks, procs, threads)
	})
	ms := metricsOf(t, d, id)
	if v, ok := one(ms, "container_ulimits_soft", "ulimit", "max_open_files"); !ok || v == 0 {
		t.Errorf("container_ulimits_soft{ulimit=max_open_files} = %d (reported %v)", v, ok)
	}
	if _, ok := one(ms, "container_threads_max"); !ok {
		t.Error("no container_threads_max")
	}
}

func checkOOM(t *testing.T, d *daemon, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig, id string) {
	waitLog(t, logPath(podCfg, cfg), "survived")
	ms := metricsOf(t, d, id)
	if v, _ := one(ms, "container_oom_events_total"); v != 1 {
		t.Errorf("container_oom_events_total = %d after dd was killed once; metrics %v", v, ms["container_oom_events_total"])
	}
	if v, _ := one(ms, "container_memory_max_usage_bytes"); v < 16<<20 || v > 32<<20 {
		t.Errorf("container_memory_max_usage_bytes = %d; dd filled the 32 MiB limit", v)
	}
	// Page faults only grow: memory.stat read afterwards has at least as
	// many (v1 names the hierarchy's total_pgfault).
	faults, ok := one(ms, "container_memory_failures_total", "failure_type", "pgfault", "scope", "hierarchy")
	stat := cgroupKV(t, filepath.Join(containerCgroup(t, d, id, "memory"), "memory.stat"))
	inFile := stat["pgfault"]
	if !unified() {
		inFile = stat["total_pgfault"]
	}
	if !ok || faults == 0 || faults > inFile {
		t.Errorf("container_memory_failures_total{pgfault,hierarchy} = %d (reported %v); memory.stat has %d since", faults, ok, inFile)
	}
}

func checkWrites(t *testing.T, d *daemon, podCfg *runtimeapi.PodSandboxConfig, id, disk string) {
	dev := enableBlkioAccounting(t, d, id, disk)
	d.execOut(t, id, "touch", "/go")
	waitLog(t, logPath(podCfg, &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "writer"}, LogPath: "writer.log"}), "written")
	poll.Until(t, time.Minute, "8 MiB written through the block layer, and the writable layer measured", func() (bool, string) {
		ms := metricsOf(t, d, id)
		var fsWrites, blkio uint64
		var devs []string
		for _, s := range ms["container_fs_writes_bytes_total"] {
			fsWrites += s.value
			devs = append(devs, s.labels["device"])
		}
		for _, s := range ms["container_blkio_device_usage_total"] {
			if s.labels["operation"] == "Write" {
				blkio += s.value
			}
		}
		used, _ := one(ms, "container_fs_usage_bytes")
		return fsWrites >= 8<<20 && blkio == fsWrites && used >= 8<<20 && slices.Contains(devs, dev),
			fmt.Sprintf("fs writes %d bytes on %q, blkio writes %d, writable layer %d", fsWrites, devs, blkio, used)
	})
	ms := metricsOf(t, d, id)
	if n, _ := one(ms, "container_fs_writes_total", "device", dev); n == 0 {
		t.Errorf("container_fs_writes_total{device=%q} = 0 for a device written to", dev)
	}
	if v, _ := one(ms, "container_blkio_device_usage_total", "device", dev, "operation", "Write"); v < 8<<20 {
		t.Errorf("container_blkio_device_usage_total{device=%q,operation=Write} = %d, want the 8 MiB written", dev, v)
	}
}

// enableBlkioAccounting returns the /dev name of the disk holding dir, the
// one the writer writes to directly. cgroup v2 accounts every cgroup's
// I/O (io.stat); cgroup v1's blkio.throttle counters count only on a
// device that has a throttling rule on recent kernels (the throttle is set
// up lazily), so on v1 the test gives the writer's cgroup a rule that
// never throttles (1 TiB/s).
func enableBlkioAccounting(t *testing.T, d *daemon, id, dir string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	devNum := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys, err := filepath.EvalSymlinks("/sys/dev/block/" + devNum)
	if err != nil {
		t.Skipf("%s is on %s, not a block device: no block I/O to check", dir, devNum)
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		sys = filepath.Dir(sys) // a rule is set on the whole disk
		b, err := os.ReadFile(filepath.Join(sys, "dev"))
		if err != nil {
			t.Fatal(err)
		}
		devNum = strings.TrimSpace(string(b))
	}
	cg := containerCgroup(t, d, id, "blkio")
	if unified() {
		if _, err := os.Stat(filepath.Join(cg, "io.stat")); err != nil {
			t.Skipf("the io controller is not enabled for the container's cgroup %s: no block I/O figures to check", cg)
		}
		return "/dev/" + filepath.Base(sys)
	}
	if err := os.WriteFile(filepath.Join(cg, "blkio.throttle.write_bps_device"), []byte(devNum+" 1099511627776"), 0o644); err != nil {
		t.Fatal(err)
	}
	return "/dev/" + filepath.Base(sys)
}

func checkTimes(t *testing.T, d *daemon, pod, id string) {
	before := time.Now().Unix()
	ms := metricsOf(t, d, id)
	after := time.Now().Unix()
	started := d.status(t, id).StartedAt / 1e9
	if v, _ := one(ms, "container_start_time_seconds"); int64(v) != started {
		t.Errorf("container_start_time_seconds = %d, ContainerStatus started_at %d s", v, started)
	}
	if v, _ := one(ms, "container_last_seen"); int64(v) < before || int64(v) > after {
		t.Errorf("container_last_seen = %d, want the time of the request (%d..%d)", v, before, after)
	}
	// The pod's own cgroup and network, as cAdvisor labels them.
	pm := metricsOf(t, d, pod)
	for _, want := range []struct{ name, container string }{
		{"container_memory_usage_bytes", ""}, {"container_start_time_seconds", ""}, {"container_spec_cpu_shares", ""},
		{"container_network_receive_bytes_total", "POD"},
	} {
		if !slices.ContainsFunc(pm[want.name], func(s series) bool { return s.labels["container"] == want.container }) {
			t.Errorf("pod metric %s{container=%q} missing; pod has %v", want.name, want.container, pm[want.name])
		}
	}
}
