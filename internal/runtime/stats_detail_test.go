package runtime

import (
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// selfFiles opens n files and one socket in this process, so a fixture
// cgroup listing its pid has open files the test knows of.
func selfFiles(t *testing.T, n int) (fds, sockets uint64) {
	t.Helper()
	for range n {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && len(target) > 7 && target[:7] == "socket:" {
			sockets++
		}
	}
	return uint64(len(ents)), sockets
}

// fdsNear says whether got is within a few descriptors of want: the
// runtime opens some of its own (the poller, a directory being read).
func fdsNear(got, want uint64) bool { return got+4 >= want && got <= want+4 }

func TestCgroup1StatsDetail(t *testing.T) {
	root := t.TempDir()
	pid := strconv.Itoa(os.Getpid())
	writeFiles(t, root, map[string]string{
		"cpuacct/pod/c/cpuacct.usage":              "2500000000\n",
		"cpuacct/pod/c/cpuacct.stat":               "user 150\nsystem 70\n",
		"cpu/pod/c/cpu.stat":                       "nr_periods 40\nnr_throttled 30\nthrottled_time 2500000000\n",
		"cpu/pod/c/cpu.cfs_period_us":              "100000\n",
		"cpu/pod/c/cpu.cfs_quota_us":               "20000\n",
		"cpu/pod/c/cpu.shares":                     "1024\n",
		"memory/pod/c/memory.usage_in_bytes":       "10485760\n",
		"memory/pod/c/memory.max_usage_in_bytes":   "33554432\n",
		"memory/pod/c/memory.kmem.usage_in_bytes":  "1048576\n",
		"memory/pod/c/memory.memsw.limit_in_bytes": "67108864\n",
		"memory/pod/c/memory.soft_limit_in_bytes":  "9223372036854771712\n",
		"memory/pod/c/memory.oom_control":          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory/pod/c/memory.failcnt":              "3\n",
		"memory/pod/c/memory.limit_in_bytes":       "33554432\n",
		"pids/pod/c/pids.current":                  "4\n",
		"pids/pod/c/pids.max":                      "max\n",
		"pids/pod/c/cgroup.procs":                  pid + "\n",
		"blkio/pod/c/blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 1048576\n8:0 Sync 0\n8:0 Total 1052672\n" +
			"253:1 Read 0\n253:1 Write 512\nTotal 1053184\n",
		"blkio/pod/c/blkio.throttle.io_serviced_recursive": "8:0 Read 1\n8:0 Write 8\n253:1 Write 1\nTotal 10\n",
		"memory/pod/c/memory.stat": "cache 1\nrss 2\npgfault 70\npgmajfault 4\nmapped_file 9\nswap 1\n" +
			"total_cache 4194304\ntotal_rss 5242880\ntotal_inactive_file 1048576\ntotal_pgfault 77\ntotal_pgmajfault 5\n" +
			"total_mapped_file 2097152\ntotal_swap 8192\n",
	})
	fds, sockets := selfFiles(t, 5)
	got, err := cgroup1Stats(root, "/pod/c", &Detail{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Detail{
		CFSPeriods: 40, CFSThrottledPeriods: 30, CFSThrottledNanos: 2500000000,
		CPUPeriodMicros: 100000, CPUQuotaMicros: 20000, CPUShares: 1024,
		MemoryMaxUsageBytes: 32 << 20, MemoryKernelBytes: 1 << 20, MemoryMappedFileBytes: 2 << 20, MemorySwapBytes: 8192,
		MemorySwapLimitBytes: 64 << 20, PageFaults: 70, MajorPageFaults: 4, OOMKills: 2,
		IO: []DeviceIO{
			{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 1 << 20, Reads: 1, Writes: 8},
			{Major: 253, Minor: 1, WriteBytes: 512, Writes: 1},
		},
		HasMaxOpenFiles: true,
	}
	checkDetail(t, got, want, fds, sockets)
	if got.Processes != 1 || got.MemoryLimitBytes != 32<<20 {
		t.Errorf("processes %d, limit %d; want 1 and 32 MiB", got.Processes, got.MemoryLimitBytes)
	}
}

func TestCgroup2StatsDetail(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cpu.stat": "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 1000000\n" +
			"nr_periods 40\nnr_throttled 30\nthrottled_usec 2500000\n",
		"cpu.max":             "20000 100000\n",
		"cpu.weight":          "39\n",
		"memory.current":      "10485760\n",
		"memory.max":          "67108864\n",
		"memory.peak":         "33554432\n",
		"memory.min":          "16777216\n",
		"memory.swap.current": "8192\n",
		"memory.swap.max":     "0\n",
		"memory.events":       "low 0\nhigh 0\nmax 6\noom 2\noom_kill 1\n",
		"memory.stat": "anon 5242880\nfile 4194304\nkernel 1048576\nkernel_stack 16384\nslab 9\n" +
			"inactive_file 1048576\nfile_mapped 2097152\npgfault 77\npgmajfault 5\n",
		"pids.current":           "3\n",
		"pids.max":               "1024\n",
		"io.stat":                "8:0 rbytes=4096 wbytes=1048576 rios=1 wios=8 dbytes=0 dios=0\n",
		"container/cgroup.procs": strconv.Itoa(os.Getpid()) + "\n", // crun's child cgroup
		"cgroup.procs":           "",
	})
	fds, sockets := selfFiles(t, 5)
	got, err := cgroup2Stats(dir, &Detail{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Detail{
		CFSPeriods: 40, CFSThrottledPeriods: 30, CFSThrottledNanos: 2500000000,
		CPUPeriodMicros: 100000, CPUQuotaMicros: 20000, CPUShares: 998, // weight 39 is what runc makes of 1024 shares; the mapping loses precision
		MemoryMaxUsageBytes: 32 << 20, MemoryKernelBytes: 1 << 20, MemoryMappedFileBytes: 2 << 20, MemorySwapBytes: 8192,
		MemorySwapLimitBytes: 64 << 20, MemoryReservationBytes: 16 << 20, PageFaults: 77, MajorPageFaults: 5, OOMKills: 1,
		ThreadsMax:      1024,
		IO:              []DeviceIO{{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 1 << 20, Reads: 1, Writes: 8}},
		HasMaxOpenFiles: true,
	}
	checkDetail(t, got, want, fds, sockets)
	if got.Processes != 1 {
		t.Errorf("processes %d, want 1 (in the child cgroup)", got.Processes)
	}

	// Without the kernel line (kernels before 5.18) its parts are summed.
	writeFiles(t, dir, map[string]string{"memory.stat": "anon 1\nkernel_stack 16384\nslab 8192\npagetables 4096\nsock 0\n"})
	if got, err = cgroup2Stats(dir, &Detail{}); err != nil {
		t.Fatal(err)
	}
	if got.Detail.MemoryKernelBytes != 16384+8192+4096 {
		t.Errorf("kernel memory from its parts: %d, want %d", got.Detail.MemoryKernelBytes, 16384+8192+4096)
	}
}

func checkDetail(t *testing.T, got *Stats, want *Detail, fds, sockets uint64) {
	t.Helper()
	if got.Detail == nil {
		t.Fatal("no Detail")
	}
	d := got.Detail
	if !fdsNear(d.FileDescriptors, fds) || d.Sockets < sockets || d.MaxOpenFiles == 0 {
		t.Errorf("open files %d (want about %d), sockets %d (want at least %d), max open files %d",
			d.FileDescriptors, fds, d.Sockets, sockets, d.MaxOpenFiles)
	}
	ignore := cmpopts.IgnoreFields(Detail{}, "FileDescriptors", "Sockets", "MaxOpenFiles")
	if diff := cmp.Diff(want, d, ignore, cmpopts.IgnoreUnexported(Detail{})); diff != "" {
		t.Errorf("Detail (-want +got):\n%s", diff)
	}
}

func TestReadMaxOpenFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          uint64
		ok            bool
	}{
		{"limited", "Limit  Soft Limit  Hard Limit  Units\nMax open files  1024  4096  files\n", 1024, true},
		{"unlimited", "Max open files  unlimited  unlimited  files\n", 1<<64 - 1, true},
		{"absent", "Max processes  10  10  processes\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dir + "/" + tc.name
			writeFiles(t, dir, map[string]string{tc.name: tc.content})
			got, ok := readMaxOpenFiles(p)
			if got != tc.want || ok != tc.ok {
				t.Errorf("readMaxOpenFiles = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestReadHugetlb(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"v1/hugetlb.2MB.usage_in_bytes": "4194304\n", "v1/hugetlb.2MB.max_usage_in_bytes": "6291456\n", "v1/hugetlb.2MB.failcnt": "2\n",
		"v1/hugetlb.1GB.usage_in_bytes": "0\n", "v1/hugetlb.1GB.max_usage_in_bytes": "0\n", "v1/hugetlb.1GB.failcnt": "0\n",
		"v2/hugetlb.2MB.current": "4194304\n", "v2/hugetlb.2MB.events": "max 3\n",
		"v2/hugetlb.1GB.current": "0\n", "v2/hugetlb.1GB.events": "max 0\n",
	})
	sizes := []string{"2MB", "1GB"}
	for _, tc := range []struct {
		name string
		got  []HugetlbUsage
		want []HugetlbUsage
	}{
		{"v1", readHugetlb(dir+"/v1", sizes, hugetlbV1Files), []HugetlbUsage{{Size: "2MB", UsageBytes: 4 << 20, MaxUsageBytes: 6 << 20}, {Size: "1GB"}}},
		{"v2", readHugetlb(dir+"/v2", sizes, hugetlbV2Files), []HugetlbUsage{{Size: "2MB", UsageBytes: 4 << 20}, {Size: "1GB"}}},
		{"no controller", readHugetlb(dir+"/none", sizes, hugetlbV2Files), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("readHugetlb (-want +got):\n%s", diff)
			}
		})
	}
	for kb, want := range map[uint64]string{64: "64KB", 2048: "2MB", 1048576: "1GB", 16777216: "16GB"} {
		if got := hugePageSizeName(kb); got != want {
			t.Errorf("hugePageSizeName(%d) = %q, want %q", kb, got, want)
		}
	}
}
