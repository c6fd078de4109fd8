package idmap

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sleeper is a helper program that runs until killed.
func sleeper(t *testing.T) []string {
	t.Helper()
	p, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	return []string{p, "infinity"}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func TestProbe(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := Probe(sleeper(t), dir); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("probe left %d entries", len(ents))
	}
}

func TestNewUserNSAndClone(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 65536}}
	user, net := filepath.Join(dir, "user"), filepath.Join(dir, "net")
	if err := NewUserNS(sleeper(t), Pins{User: user, Net: net}, m, m); err != nil {
		t.Fatalf("NewUserNS: %v", err)
	}
	t.Cleanup(func() {
		if err := UnmountUnder(dir); err != nil {
			t.Error(err)
		}
	})
	uf, err := os.Open(user)
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	// The network namespace is owned by the pinned user namespace.
	nf, err := os.Open(net)
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	owner, err := unix.IoctlRetInt(int(nf.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS: %v", err)
	}
	defer unix.Close(owner)
	var a, b unix.Stat_t
	_ = unix.Fstat(owner, &a)
	_ = unix.Fstat(int(uf.Fd()), &b)
	if a.Ino != b.Ino {
		t.Errorf("netns owner inode %d, pinned userns %d", a.Ino, b.Ino)
	}

	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ src, dst string }{{src, filepath.Join(dir, "m", "dir")}, {file, filepath.Join(dir, "m", "file")}} {
		if err := Clone(int(uf.Fd()), tc.src, tc.dst, CloneOptions{Recursive: true}); err != nil {
			t.Fatalf("Clone %s: %v", tc.src, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(tc.dst, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 200000 || st.Gid != 200000 {
			t.Errorf("%s: owner %d:%d through the id-mapped mount, want 200000:200000", tc.dst, st.Uid, st.Gid)
		}
	}
	if err := UnmountUnder(filepath.Join(dir, "m")); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "m", "dir"), &st); err != nil || st.Uid != 0 {
		t.Errorf("after UnmountUnder: uid %d, err %v; want the bare mount point owned by 0", st.Uid, err)
	}
}

func TestRemoveAllNeverReachesThroughAMount(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pod")
	if err := Clone(-1, vol, filepath.Join(dir, "m", "0"), CloneOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	// Stacked twice on the same mount point.
	if err := unix.Mount(vol, filepath.Join(dir, "m", "0"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "keep")); err != nil {
		t.Errorf("the volume lost its file: %v", err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Errorf("RemoveAll of a missing dir: %v", err)
	}
}
