package crilog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
)

// TestLogNoSymlinks checks that a CRI log with a root is never written
// through a symbolic link, at open or at reopen, and that the refusal is
// FailedPrecondition naming the path.
func TestLogNoSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("host file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(root, "link.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, filepath.Join(root, "hard.log")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"linkdir/target", "linkdir/new.log", "link.log", "hard.log", "fifo.log", "gone/0.log", "c/../../x.log"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(root, name)
			if strings.Contains(name, "..") {
				path = root + "/" + name
			}
			w, err := Open(path, Options{Root: root})
			if err == nil {
				w.Close()
				t.Fatalf("Open(%s) worked", name)
			}
			if !errors.Is(err, ErrLogPath) || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), root) {
				t.Errorf("Open(%s): %v, want FailedPrecondition naming the path", name, err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "new.log")); err == nil {
		t.Errorf("a log was created through the linked directory")
	}

	// A log swapped for a link before a reopen: the reopen fails, the
	// old file keeps the output, the link's target is untouched.
	path := filepath.Join(root, "c", "0.log")
	w, err := Open(path, Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), path) {
		t.Errorf("Reopen onto a link: %v, want FailedPrecondition naming %s", err, path)
	}
	if err := w.Copy(StreamStdout, strings.NewReader("after\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "host file\n" {
		t.Errorf("link target now holds %q", got)
	}
	if got, _ := os.ReadFile(path + ".1"); !strings.Contains(string(got), "after") {
		t.Errorf("old log holds %q, want the output written after the failed reopen", got)
	}
	// Once the link is gone, a reopen works again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Errorf("Reopen after the link was removed: %v", err)
	}
}

func TestPrepareLogPath(t *testing.T) {
	root := t.TempDir()
	if err := PrepareLogPath(root, filepath.Join(root, "a", "b", "0.log")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "a", "b")); err != nil || !st.IsDir() {
		t.Errorf("directories not made: %v", err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "a", "f.log")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"l/x/0.log", "a/f.log"} {
		if err := PrepareLogPath(root, filepath.Join(root, name)); !errors.Is(err, ErrLogPath) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("PrepareLogPath(%s): %v, want ErrLogPath", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Errorf("a directory was made through the link")
	}
	if err := CheckLogPath(root, filepath.Join(root, "none", "0.log")); !errors.Is(err, ErrLogPath) {
		t.Errorf("CheckLogPath with a missing directory: %v, want ErrLogPath", err)
	}
	if _, err := os.Stat(filepath.Join(root, "none")); err == nil {
		t.Errorf("CheckLogPath made a directory")
	}
}
