package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroup1Stats(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"cpuacct/pod/c/cpuacct.usage":        "2500000000\n",
		"cpuacct/pod/c/cpuacct.stat":         "user 150\nsystem 70\n",
		"memory/pod/c/memory.usage_in_bytes": "10485760\n",
		"memory/pod/c/memory.failcnt":        "3\n",
		"memory/pod/c/memory.limit_in_bytes": "9223372036854771712\n",
		"memory/pod/c/memory.stat": "cache 1\nrss 2\ntotal_cache 4194304\ntotal_rss 5242880\n" +
			"total_inactive_file 1048576\ntotal_pgfault 77\ntotal_pgmajfault 5\n",
		"pids/pod/c/pids.current": "4\n",
		"pids/pod/c/cgroup.procs": "10\n11\n",
	})
	got, err := cgroup1Stats(root, "/pod/c", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Stats{
		CPUUsageNanos: 2500000000, CPUUserNanos: 1500000000, CPUSystemNanos: 700000000,
		MemoryUsageBytes: 10 << 20, MemoryWorkingSet: 9 << 20, MemoryRSSBytes: 5 << 20, MemoryCacheBytes: 4 << 20,
		MemoryPageFaults: 77, MemoryMajorFaults: 5, MemoryFailcnt: 3, MemoryLimitBytes: 0,
		PidsCurrent: 4, Processes: 2,
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Stats{}, "Timestamp")); diff != "" {
		t.Errorf("cgroup1Stats (-want +got):\n%s", diff)
	}
	if _, err := cgroup1Stats(root, "/pod/gone", nil); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a missing cgroup: %v, want ENOENT (CgroupStats makes it NotFound)", err)
	}
}

func TestCgroup2Stats(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cpu.stat":       "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 1000000\nnr_periods 0\n",
		"memory.current": "10485760\n",
		"memory.max":     "20971520\n",
		"memory.events":  "low 0\nhigh 0\nmax 6\noom 1\noom_kill 1\n",
		"memory.stat":    "anon 5242880\nfile 4194304\ninactive_file 1048576\npgfault 77\npgmajfault 5\n",
		"pids.current":   "3\n",
		"cgroup.procs":   "10\n",
	})
	got, err := cgroup2Stats(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Stats{
		CPUUsageNanos: 2500000000, CPUUserNanos: 1500000000, CPUSystemNanos: 1000000000,
		MemoryUsageBytes: 10 << 20, MemoryWorkingSet: 9 << 20, MemoryRSSBytes: 5 << 20, MemoryCacheBytes: 4 << 20,
		MemoryPageFaults: 77, MemoryMajorFaults: 5, MemoryFailcnt: 6, MemoryLimitBytes: 20 << 20,
		PidsCurrent: 3, Processes: 1,
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Stats{}, "Timestamp")); diff != "" {
		t.Errorf("cgroup2Stats (-want +got):\n%s", diff)
	}
}

// The figures of the test's own cgroup read without error on this host.
func TestCgroupStatsOfSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		// v1 "N:cpu,cpuacct:/path" or v2 "0::/path"
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && (f[1] == "" || strings.Contains(f[1], "cpuacct")) {
			path = f[2]
		}
	}
	if path == "" {
		t.Skip("own cgroup not found")
	}
	st, err := CgroupStats(path)
	if err != nil {
		t.Skipf("own cgroup %s: %v (not every controller is mounted here)", path, err)
	}
	if st.CPUUsageNanos == 0 {
		t.Errorf("own cgroup %s: no CPU usage: %+v", path, st)
	}
}

func TestParsePressure(t *testing.T) {
	p := parsePressure([]byte("some avg10=1.50 avg60=0.25 avg300=0.00 total=1234\nfull avg10=0.10 avg60=0.00 avg300=0.00 total=7\n"))
	if p == nil {
		t.Fatal("no pressure parsed")
	}
	want := Pressure{
		Some: PressureLine{Avg10: 1.5, Avg60: 0.25, Total: 1234 * time.Microsecond},
		Full: PressureLine{Avg10: 0.1, Total: 7 * time.Microsecond},
	}
	if *p != want {
		t.Errorf("parsed %+v, want %+v", *p, want)
	}
	if parsePressure([]byte("")) != nil || parsePressure([]byte("garbage\n")) != nil {
		t.Error("an empty or foreign file parsed as pressure")
	}
}
