package topdir

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func flags(t *testing.T, dir string) (uint32, error) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
}

func TestMark(t *testing.T) {
	dir := t.TempDir()
	before, err := flags(t, dir)
	if err != nil {
		t.Skipf("%s has no inode flags: %v", dir, err)
	}
	if err := Mark(dir); err != nil {
		t.Fatal(err)
	}
	after, err := flags(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	switch {
	case after&fsTopdirFL == 0 && st.Type == unix.EXT4_SUPER_MAGIC:
		t.Errorf("%s on ext2/3/4: flags %#x after Mark, no FS_TOPDIR_FL", dir, after)
	case after&fsTopdirFL == 0:
		// A filesystem with flags but not this one may drop it
		// silently, which Mark must take quietly too.
		t.Logf("%s (filesystem %#x) kept no FS_TOPDIR_FL", dir, st.Type)
	case after != before|fsTopdirFL:
		t.Errorf("flags %#x after Mark, want %#x (the others kept)", after, before|fsTopdirFL)
	}
	// Twice is the same.
	if err := Mark(dir); err != nil {
		t.Fatal(err)
	}
	if again, _ := flags(t, dir); again != after {
		t.Errorf("flags %#x after a second Mark, want %#x", again, after)
	}
}

func TestMarkNoFlags(t *testing.T) {
	// proc has no inode flags; tmpfs has some, not this one. Nothing to
	// do, and no error.
	for _, d := range []string{"/proc", "/dev/shm"} {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := Mark(d); err != nil {
			t.Errorf("Mark(%s): %v", d, err)
		}
	}
}

func TestMarkErrors(t *testing.T) {
	dir := t.TempDir()
	if err := Mark(filepath.Join(dir, "missing")); err == nil {
		t.Error("Mark of a missing dir: no error")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Mark(file); err == nil {
		t.Error("Mark of a file: no error")
	}
}
