package cri

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// makeCgroup creates a real, empty cgroup at path (root only) so that the
// benchmark reads real cgroup files; it returns its remover.
func makeCgroup(b *testing.B, path string) func() {
	b.Helper()
	if cgroups.Mode() == cgroups.Unified {
		m, err := cgroup2.NewManager("/sys/fs/cgroup", path, &cgroup2.Resources{})
		if err != nil {
			b.Fatal(err)
		}
		return func() { _ = m.Delete() }
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(path), &specs.LinuxResources{})
	if err != nil {
		b.Fatal(err)
	}
	return func() { _ = cg.Delete() }
}

// removeCgroupParent removes the (empty) cgroup parent from every
// hierarchy; one another benchmark still uses stays.
func removeCgroupParent(parent string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", parent))
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

// BenchmarkListContainerStats100 is ListContainerStats on a node with 100
// running containers in 10 pods: writable layers from the sampler's cache
// (measured once), CPU and memory read from real cgroups when run as root
// (fake cgroup paths, which read as gone, otherwise).
func BenchmarkListContainerStats100(b *testing.B) {
	h := hundredContainers(b)
	b.ResetTimer()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := h.ListContainerStats(b.Context(), &runtimeapi.ListContainerStatsRequest{})
		if err != nil || len(resp.Stats) != 100 {
			b.Fatalf("ListContainerStats: %d stats, %v", len(resp.GetStats()), err)
		}
		lat = append(lat, time.Since(start))
	}
	reportP99(b, lat)
}

// hundredContainers is a hub with 100 running containers in 10 pods, in
// real (empty) cgroups when run as root.
func hundredContainers(b *testing.B) benchHub {
	b.Helper()
	h := newBenchHub(b)
	real := os.Geteuid() == 0
	var ids []string
	for p := range 10 {
		pod := h.runPodB(b, fmt.Sprintf("p%d", p))
		for c := range 10 {
			ids = append(ids, h.createB(b, pod, fmt.Sprintf("c%d", c)))
		}
	}
	for _, id := range ids {
		if _, err := h.StartContainer(b.Context(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
			b.Fatal(err)
		}
		if real {
			c, _ := h.getContainer(id)
			b.Cleanup(makeCgroup(b, c.rec.CgroupsPath))
		}
	}
	if real {
		for _, sb := range h.allSandboxes() {
			// The pod cgroups are parents of the containers': removed
			// after them (cleanups run last-in first-out).
			b.Cleanup(makeCgroup(b, sb.rec.CgroupParent))
		}
	}
	return h
}

// BenchmarkListPodSandboxMetrics100 is ListPodSandboxMetrics on the same
// node: every cgroup read in full (CgroupStatsDetail), no processes to
// scan (the cgroups are empty).
func BenchmarkListPodSandboxMetrics100(b *testing.B) {
	h := hundredContainers(b)
	b.ResetTimer()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := h.ListPodSandboxMetrics(b.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil || len(resp.PodMetrics) != 10 {
			b.Fatalf("ListPodSandboxMetrics: %d pods, %v", len(resp.GetPodMetrics()), err)
		}
		lat = append(lat, time.Since(start))
	}
	reportP99(b, lat)
}

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sorted := append([]time.Duration(nil), lat...)
	for i := 1; i < len(sorted); i++ { // small n: insertion sort
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	b.ReportMetric(float64(sorted[len(sorted)*99/100].Microseconds())/1000, "p99-ms")
}

// benchHub is a hub for benchmarks: fakes, a writable layer measurer.
type benchHub struct{ *hub }

func newBenchHub(b *testing.B) benchHub {
	b.Helper()
	dir := b.TempDir()
	h := &hub{rt: newFakeRuntime(), images: &fakeImages{dir: filepath.Join(dir, "rootfs"), rootfs: map[string]bool{}}}
	st := openBenchStore(b, dir)
	h.opts = benchOptions(b, h, st, dir)
	// Registered first, run last: the pods' and containers' cgroups are
	// gone by then and the parent the cgroup libraries made is empty.
	b.Cleanup(func() { removeCgroupParent(h.opts.CgroupParent) })
	h.opts.Images = &layerImages{fakeImages: h.images, measures: map[string]int{}}
	svc, err := New(b.Context(), h.opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Close() })
	h.Service = svc
	return benchHub{h}
}

func (h benchHub) runPodB(b *testing.B, name string) string {
	b.Helper()
	cfg := podConfig(name)
	cfg.Metadata.Uid = name + "-" + fmt.Sprint(time.Now().UnixNano())
	resp, err := h.RunPodSandbox(b.Context(), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	return resp.PodSandboxId
}

func (h benchHub) createB(b *testing.B, pod, name string) string {
	b.Helper()
	resp, err := h.CreateContainer(b.Context(), &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, Config: ctrConfig(name), SandboxConfig: podConfig("p"),
	})
	if err != nil {
		b.Fatal(err)
	}
	return resp.ContainerId
}

func openBenchStore(b *testing.B, dir string) *store.Store {
	b.Helper()
	st, err := store.Open(filepath.Join(dir, "crin.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// benchOptions are newHub's options; the cgroup parent is unique so that
// real cgroups made for a run never meet another's.
func benchOptions(b *testing.B, h *hub, st *store.Store, dir string) Options {
	return Options{
		Store:          st,
		Images:         h.images,
		Network:        fakeNetwork{},
		Runtimes:       map[string]runtime.Runtime{"runc": h.rt},
		DefaultRuntime: "runc",
		RootDir:        filepath.Join(dir, "root"),
		NetNSDir:       filepath.Join(dir, "netns"),
		PauseRoot:      filepath.Join(dir, "pause"),
		PauseBinary:    "/pause",
		CgroupParent:   fmt.Sprintf("/crinbench-%d", os.Getpid()),
		Pinner:         fakePinner{},
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}
