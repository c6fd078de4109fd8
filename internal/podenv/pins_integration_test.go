//go:build integration && linux

package podenv

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 &&
			(fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestBindPinner pins namespaces for real: of a process (Pin), new ones
// (New, NewNetNS), and checks that a failure at any step leaves no file
// and no mount behind, and that Unpin and RemoveNetNS leave nothing.
func TestBindPinner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	p := bindPinner{}
	netnsDir := filepath.Join(base, "netns")
	t.Cleanup(func() {
		for _, d := range []string{"pin", "new", "bad-pin", "bad-new"} {
			_ = p.Unpin(filepath.Join(base, d))
		}
		_ = p.RemoveNetNS(filepath.Join(netnsDir, "pod"))
		// NewNetNS makes its dir a shared mount of its own.
		for len(mountsUnder(t, netnsDir)) > 0 {
			if err := unix.Unmount(netnsDir, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", netnsDir, err)
				break
			}
		}
		os.RemoveAll(base)
	})
	nothingAt := func(t *testing.T, dir string) {
		t.Helper()
		if m := mountsUnder(t, dir); len(m) > 0 {
			t.Errorf("mounts left under %s: %q", dir, m)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", dir, err)
		}
	}

	t.Run("Pin", func(t *testing.T) {
		dir := filepath.Join(base, "pin")
		paths, err := p.Pin(dir, os.Getpid(), []string{"ipc", "uts"})
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"ipc", "uts"} {
			if !p.Pinned(paths[kind]) {
				t.Errorf("%s: not pinned", paths[kind])
			}
			if got, want := inode(t, paths[kind]), inode(t, "/proc/self/ns/"+kind); got != want {
				t.Errorf("%s pins namespace %d, want the process's %d", paths[kind], got, want)
			}
		}
		if err := p.Unpin(dir); err != nil {
			t.Fatal(err)
		}
		nothingAt(t, dir)
	})

	t.Run("Pin failing after a namespace was pinned", func(t *testing.T) {
		dir := filepath.Join(base, "bad-pin")
		if _, err := p.Pin(dir, os.Getpid(), []string{"ipc", "nosuchkind"}); err == nil {
			t.Fatal("Pin of an unknown kind succeeded")
		}
		nothingAt(t, dir)
	})

	t.Run("New", func(t *testing.T) {
		dir := filepath.Join(base, "new")
		paths, err := p.New(dir, []string{"ipc", "uts"}, "pinned-host")
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"ipc", "uts"} {
			if !p.Pinned(paths[kind]) {
				t.Errorf("%s: not pinned", paths[kind])
			}
			if inode(t, paths[kind]) == inode(t, "/proc/self/ns/"+kind) {
				t.Errorf("%s pins crind's own %s namespace, not a new one", paths[kind], kind)
			}
		}
		if err := p.Unpin(dir); err != nil {
			t.Fatal(err)
		}
		nothingAt(t, dir)
	})

	t.Run("New of a kind that needs a process", func(t *testing.T) {
		dir := filepath.Join(base, "bad-new")
		if _, err := p.New(dir, []string{"ipc", "pid"}, ""); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("New pid: %v, want InvalidArgument", err)
		}
		nothingAt(t, dir)
	})

	t.Run("NewNetNS", func(t *testing.T) {
		path, err := p.NewNetNS(netnsDir, "pod")
		if err != nil {
			t.Fatal(err)
		}
		if !p.Pinned(path) {
			t.Errorf("%s: not pinned", path)
		}
		if _, err := p.NewNetNS(netnsDir, "pod"); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("second NewNetNS: %v, want AlreadyExists", err)
		}
		if !p.Pinned(path) {
			t.Errorf("%s: the failed second NewNetNS unpinned it", path)
		}
		for i := range 2 { // the second finds nothing, which is fine
			if err := p.RemoveNetNS(path); err != nil {
				t.Fatalf("RemoveNetNS #%d: %v", i+1, err)
			}
		}
		nothingAt(t, path)
	})
}
