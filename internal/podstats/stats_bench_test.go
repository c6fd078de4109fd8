package podstats

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

// BenchmarkListContainerStats100 is ListContainerStats' work on a node
// with 100 running containers in 10 pods: writable layers from the
// sampler's cache (measured once), CPU and memory read from real cgroups
// when run as root (paths that read as gone otherwise).
func BenchmarkListContainerStats100(b *testing.B) {
	col, src := hundredContainers(b)
	cs := src.Containers()
	b.ResetTimer()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		st, err := col.ListContainerStats(cs)
		if err != nil || len(st) != 100 {
			b.Fatalf("ListContainerStats: %d stats, %v", len(st), err)
		}
		lat = append(lat, time.Since(start))
	}
	reportP99(b, lat)
}

// hundredContainers is a Collector over 100 running containers in 10
// pods, in real (empty) cgroups under /crinbench-<pid> when run as root.
func hundredContainers(b *testing.B) (*Collector, *fakeSource) {
	b.Helper()
	real := os.Geteuid() == 0
	parent := fmt.Sprintf("/crinbench-%d", os.Getpid())
	// Registered first, run last: the pods' and containers' cgroups are
	// gone by then and the parent the cgroup libraries made is empty.
	b.Cleanup(func() { removeCgroupParent(parent) })
	src := &fakeSource{}
	for p := range 10 {
		podCg := fmt.Sprintf("%s/p%d", parent, p)
		pod := src.addPod(fmt.Sprintf("p%d", p), podCg)
		if real {
			// The pod cgroups are parents of the containers': removed
			// after them (cleanups run last-in first-out).
			b.Cleanup(makeCgroup(b, podCg))
		}
		for c := range 10 {
			ctr := src.addContainer(pod.ID, fmt.Sprintf("p%dc%d", p, c), store.ContainerRunning, fmt.Sprintf("%s/c%d", podCg, c))
			if real {
				b.Cleanup(makeCgroup(b, ctr.CgroupsPath))
			}
		}
	}
	col := New(Config{Source: src, Images: newLayerImages(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	col.SampleOnce(b.Context())
	return col, src
}

// BenchmarkListPodSandboxMetrics100 is ListPodSandboxMetrics' work on the
// same node: every cgroup read in full (CgroupStatsDetail), no processes to
// scan (the cgroups are empty).
func BenchmarkListPodSandboxMetrics100(b *testing.B) {
	col, _ := hundredContainers(b)
	b.ResetTimer()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		pods, err := col.PodMetrics(b.Context())
		if err != nil || len(pods) != 10 {
			b.Fatalf("ListPodSandboxMetrics: %d pods, %v", len(pods), err)
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
