//go:build soak

package soak

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crin-dev/crin/test/harness"
	"github.com/crin-dev/crin/test/testnet"
)

// calls are the CRI calls whose latency each window reports, in order.
var calls = []string{"RunPodSandbox", "CreateContainer", "StartContainer", "ExecSync", "StopContainer",
	"RemoveContainer", "StopPodSandbox", "RemovePodSandbox", "Probe"}

// latencies collects successful calls' durations for the current window.
type latencies struct {
	mu  sync.Mutex // guards win
	win map[string][]time.Duration
}

func (l *latencies) add(call string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.win == nil {
		l.win = map[string][]time.Duration{}
	}
	l.win[call] = append(l.win[call], d)
}

// take returns the window's durations and starts a new window.
func (l *latencies) take() map[string][]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.win
	l.win = nil
	return w
}

// quantile is the q-quantile (nearest rank) of ds, which it sorts.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	i = max(0, min(i, len(ds)-1))
	return ds[i]
}

// sample is one row of figures: crind's own and what lies around it.
type sample struct {
	lifecycles int
	elapsed    time.Duration
	load       string

	// From crind's metrics endpoint.
	rssMiB, goroutines, threads, fds float64

	// On the host, for the run's dirs, cgroup and bridge.
	pods, ctrs     int // as crind lists them
	shims, procs   int // crin-shim processes; processes in the cgroup parent
	mounts, netns  int
	cgroups, veths int
	ipam, layers   int
	files          int // regular files and symlinks under root and state

	faults string // fault counts so far
	errs   string // excused errors so far
	lat    map[string][2]time.Duration
	counts map[string]int // calls in the window
}

// scrape reads crind's Prometheus text for the figures sample wants.
func scrape(port int) (map[string]float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	want := map[string]bool{"go_goroutines": true, "go_threads": true,
		"process_resident_memory_bytes": true, "process_open_fds": true}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && want[f[0]] {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				out[f[0]] = v
			}
		}
	}
	return out, sc.Err()
}

// hostCounts fills the host side of s.
func (e *env) hostCounts(s *sample) {
	s.shims = len(procsComm("crin-shim", e.state))
	s.mounts = len(harness.MountsUnder(e.root, e.state))
	if ents, err := os.ReadDir(filepath.Join(e.state, "netns")); err == nil {
		s.netns = len(ents)
	}
	if ents, err := os.ReadDir(filepath.Join("/sys/class/net", e.net.Bridge, "brif")); err == nil {
		s.veths = len(ents)
	}
	if ents, err := os.ReadDir(filepath.Join(e.net.IPAMDir, testnet.Name)); err == nil {
		for _, x := range ents {
			if net.ParseIP(x.Name()) != nil {
				s.ipam++
			}
		}
	}
	if bases := e.cgroupBases(); len(bases) > 0 {
		// One hierarchy is enough for counts: the pids one, or the first.
		b := bases[0]
		for _, x := range bases {
			if strings.Contains(x, "/pids/") {
				b = x
			}
		}
		_ = filepath.WalkDir(b, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && p != b {
				s.cgroups++
			}
			if d.Name() == "cgroup.procs" {
				if raw, err := os.ReadFile(p); err == nil {
					s.procs += len(strings.Fields(string(raw)))
				}
			}
			return nil
		})
	}
	s.layers = len(e.layerDirs())
	for _, d := range []string{e.root, e.state} {
		_ = filepath.WalkDir(d, func(p string, x fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			// Container rootfs mounts would count the image's files once
			// per container: only what crind itself wrote counts.
			if x.IsDir() && p != d && isMountPoint(p) {
				return filepath.SkipDir
			}
			if !x.IsDir() {
				s.files++
			}
			return nil
		})
	}
}

func isMountPoint(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(p, &st) != nil || syscall.Stat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// layerDirs are the unpacked layers in crind's root (internal/image:
// <root>/image/l/<dir>).
func (e *env) layerDirs() []string {
	m, _ := filepath.Glob(filepath.Join(e.root, "image", "l", "*"))
	return m
}

// imageLeftovers are what the image store keeps besides layers: blobs,
// partial downloads, container rootfs dirs.
func (e *env) imageLeftovers() []string {
	var out []string
	for _, pat := range []string{"blobs/sha256/*", "blobs/tmp/*", "containers/*", "l/.tmp-*"} {
		m, _ := filepath.Glob(filepath.Join(e.root, "image", pat))
		out = append(out, m...)
	}
	return out
}

func (e *env) crindCounts(s *sample) {
	m, err := scrape(e.port)
	if err != nil {
		// Down (a fault restarting it): /proc still tells RSS and threads.
		return
	}
	s.rssMiB = m["process_resident_memory_bytes"] / (1 << 20)
	s.goroutines = m["go_goroutines"]
	s.threads = m["go_threads"]
	s.fds = m["process_open_fds"]
	if pid := e.pid(); pid != 0 {
		// go_threads counts Go's Ms; the kernel's count is the truth.
		if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				if v, ok := strings.CutPrefix(line, "Threads:"); ok {
					if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
						s.threads = float64(n)
					}
				}
			}
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return "?"
	}
	return f[0]
}

// table prints samples as the soak's figures; header when first.
func (s sample) row(first bool) string {
	var b strings.Builder
	if first {
		fmt.Fprintf(&b, "%6s %6s %5s %7s %5s %4s %4s | %4s %5s %5s %5s %4s %4s %4s %4s %6s | %s\n",
			"lc", "secs", "load", "rss_MiB", "gorou", "thr", "fds",
			"pods", "ctrs", "shims", "procs", "mnts", "netns", "cgrp", "veth", "files",
			"p50/p99 ms: "+strings.Join(calls, " "))
	}
	fmt.Fprintf(&b, "%6d %6.0f %5s %7.1f %5.0f %4.0f %4.0f | %4d %5d %5d %5d %4d %4d %4d %4d %6d |",
		s.lifecycles, s.elapsed.Seconds(), s.load, s.rssMiB, s.goroutines, s.threads, s.fds,
		s.pods, s.ctrs, s.shims, s.procs, s.mounts, s.netns, s.cgroups, s.veths, s.files)
	for _, c := range calls {
		q := s.lat[c]
		fmt.Fprintf(&b, " %.0f/%.0f", ms(q[0]), ms(q[1]))
	}
	fmt.Fprintf(&b, "\n%6s faults: %s; excused errors: %s; ipam %d, layers %d", "", s.faults, s.errs, s.ipam, s.layers)
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func csvHeader() string {
	h := []string{"lifecycles", "elapsed_s", "load1", "rss_mib", "goroutines", "threads", "fds",
		"pods", "containers", "shims", "cgroup_procs", "mounts", "netns", "cgroups", "veths", "ipam", "layers", "files"}
	for _, c := range calls {
		h = append(h, c+"_p50_ms", c+"_p99_ms", c+"_n")
	}
	return strings.Join(append(h, "faults", "excused_errors"), ",")
}

func (s sample) csv(n map[string]int) string {
	f := []string{strconv.Itoa(s.lifecycles), fmt.Sprintf("%.1f", s.elapsed.Seconds()), s.load,
		fmt.Sprintf("%.1f", s.rssMiB), fmt.Sprint(s.goroutines), fmt.Sprint(s.threads), fmt.Sprint(s.fds),
		strconv.Itoa(s.pods), strconv.Itoa(s.ctrs), strconv.Itoa(s.shims), strconv.Itoa(s.procs),
		strconv.Itoa(s.mounts), strconv.Itoa(s.netns), strconv.Itoa(s.cgroups), strconv.Itoa(s.veths),
		strconv.Itoa(s.ipam), strconv.Itoa(s.layers), strconv.Itoa(s.files)}
	for _, c := range calls {
		q := s.lat[c]
		f = append(f, fmt.Sprintf("%.2f", ms(q[0])), fmt.Sprintf("%.2f", ms(q[1])), strconv.Itoa(n[c]))
	}
	return strings.Join(append(f, `"`+s.faults+`"`, `"`+s.errs+`"`), ",")
}
