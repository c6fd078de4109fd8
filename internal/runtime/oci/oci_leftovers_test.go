package oci

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// TestRemoveRuntimeLeftovers leaves what a runc killed mid-command leaves
// in its root (its state dir with the read-only bind of its own binary,
// runc.XXXXXX, still mounted) and checks that both go.
func TestRemoveRuntimeLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts: root only")
	}
	root := t.TempDir()
	o := &Runtime{cfg: Config{Root: root}, log: slog.New(slog.DiscardHandler)}
	dir := filepath.Join(root, "c1")
	target := filepath.Join(dir, "runc.AbC123")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(self, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })

	o.removeRuntimeLeftovers(context.Background(), "c1")
	if m, err := mountinfo.Mounted(target); err == nil && m {
		t.Errorf("%s is still mounted", target)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("runtime state dir: %v, want it removed", err)
	}
	// Nothing there (the runtime removed it): nothing to do.
	o.removeRuntimeLeftovers(context.Background(), "c2")
}
