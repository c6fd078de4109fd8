package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// fullWalk is what FsInfo reported before it cached: every inode under
// root once.
func fullWalk(t *testing.T, root string) usage {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		t.Fatal(err)
	}
	u, err := du(root, st.Dev, false)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func writeFile(t *testing.T, p string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFsInfoMatchesAFullWalk(t *testing.T) {
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	s := newService(t, Config{Root: filepath.Join(t.TempDir(), "root")})
	if _, err := s.Pull(ctxT(t), host+"/library/busybox", nil); err != nil {
		t.Fatal(err)
	}
	// The figure FsInfo would measure now (FsInfo's reuse of a figure is
	// TestFsInfoReuse's).
	check := func(step string) {
		t.Helper()
		got, err := s.measureFs()
		if err != nil {
			t.Fatal(err)
		}
		want := fullWalk(t, s.root)
		if got.UsedBytes != want.bytes || got.InodesUsed != want.inodes || got.Mountpoint == "" {
			t.Errorf("%s: FsInfo %+v; a full walk says %d bytes, %d inodes", step, got, want.bytes, want.inodes)
		}
	}
	check("after pull")
	check("cached")

	// A container's writable layer (no overlay needed: FsInfo only reads
	// the upper dir) grows; FsInfo shows it once it was measured again.
	id := "c1"
	writeFile(t, filepath.Join(s.containerDir(id), "upper", "a"), 4096)
	for _, d := range []string{"work", "rootfs", "empty"} {
		if err := os.MkdirAll(filepath.Join(s.containerDir(id), d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	check("new container")
	writeFile(t, filepath.Join(s.containerDir(id), "upper", "big", "b"), 5<<20)
	lu, err := s.WritableLayerUsage(id)
	if err != nil {
		t.Fatal(err)
	}
	if lu.UsedBytes < 5<<20 || lu.InodesUsed != 3 || lu.Time.IsZero() {
		t.Errorf("WritableLayerUsage %+v; want >= 5 MiB, 3 inodes (a, big, big/b)", lu)
	}
	check("container wrote 5 MiB")

	// A download in flight and a layer being unpacked are counted as they
	// are now, every time.
	writeFile(t, filepath.Join(s.root, "blobs", "tmp", "blob-1"), 8192)
	writeFile(t, filepath.Join(s.root, "l", ".tmp-1", "bin", "x"), 8192)
	check("in flight")
	writeFile(t, filepath.Join(s.root, "l", ".tmp-1", "bin", "y"), 8192)
	check("in flight grew")

	if err := os.RemoveAll(s.containerDir(id)); err != nil {
		t.Fatal(err)
	}
	check("container gone")
	if _, err := s.WritableLayerUsage(id); err == nil {
		t.Error("WritableLayerUsage of a removed container: no error")
	}
}

// TestFsInfoReuse checks when FsInfo reuses its last figure: while
// nothing changed the store, and not across a pull, a removal, a rootfs
// prepared or released, or a writable layer measured again.
func TestFsInfoReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("preparing a rootfs mounts an overlay: root only")
	}
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	s := newService(t, Config{Root: filepath.Join(t.TempDir(), "root")})
	img, err := s.Pull(ctxT(t), host+"/library/busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.FsInfo()
	if err != nil {
		t.Fatal(err)
	}
	// Written behind the store's back: not seen while the figure is
	// reused.
	writeFile(t, filepath.Join(s.root, "blobs", "tmp", "blob-1"), 1<<20)
	if again, _ := s.FsInfo(); again != first {
		t.Errorf("FsInfo measured again with no change: %+v, then %+v", first, again)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"rootfs prepared", func() error { _, err := s.PrepareRootfs(ctxT(t), "c1", img.ID); return err }},
		{"writable layer measured", func() error {
			writeFile(t, filepath.Join(s.containerDir("c1"), "upper", "x"), 1<<20)
			_, err := s.WritableLayerUsage("c1")
			return err
		}},
		{"rootfs released", func() error { return s.ReleaseRootfs(ctxT(t), "c1") }},
		{"image removed", func() error { return s.Remove(ctxT(t), img.ID) }},
	}
	last := first
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := s.FsInfo()
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.measureFs()
		if err != nil {
			t.Fatal(err)
		}
		if got != want || got == last {
			t.Errorf("after %s: FsInfo %+v, measured %+v, before %+v", st.name, got, want, last)
		}
		last = got
	}
}

// fsInfoNode is an image store with busybox and 100 containers whose
// writable layers hold 50 files each.
func fsInfoNode(b *testing.B) *Service {
	b.Helper()
	host := imagetest.StartRegistry(b)
	imagetest.Push(b, host, "library/busybox:latest", imagetest.Busybox(b))
	s, err := New(b.Context(), Config{Root: filepath.Join(b.TempDir(), "root")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Pull(b.Context(), host+"/library/busybox", nil); err != nil {
		b.Fatal(err)
	}
	for c := range 100 {
		dir := s.containerDir(fmt.Sprintf("c%03d", c))
		for _, d := range []string{"work", "rootfs", "empty"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		for f := range 50 {
			p := filepath.Join(dir, "upper", fmt.Sprint(f%5), fmt.Sprint(f))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s
}

func p99(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkFsInfo100Containers is ImageFsInfo's cost: cached figures,
// writable layers as the sampler last measured them.
func BenchmarkFsInfo100Containers(b *testing.B) {
	s := fsInfoNode(b)
	if _, err := s.FsInfo(); err != nil { // first call measures everything
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := s.FsInfo(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	p99(b, lat)
}

// BenchmarkFsInfoFullWalk100Containers is what every call cost before the
// cache: a walk of the whole store.
func BenchmarkFsInfoFullWalk100Containers(b *testing.B) {
	s := fsInfoNode(b)
	var st unix.Stat_t
	if err := unix.Lstat(s.root, &st); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := du(s.root, st.Dev, false); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	p99(b, lat)
}

// BenchmarkSampleWritableLayers100 is one sampler sweep's layer walks:
// what a 10 s tick costs in the background.
func BenchmarkSampleWritableLayers100(b *testing.B) {
	s := fsInfoNode(b)
	for b.Loop() {
		for c := range 100 {
			if _, err := s.WritableLayerUsage(fmt.Sprintf("c%03d", c)); err != nil {
				b.Fatal(err)
			}
		}
	}
}
