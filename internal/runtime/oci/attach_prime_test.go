package oci

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

func TestCgroupProcsIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"cpu,cpuacct/kubepods", "pids/crind", "memory/crind"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unified := t.TempDir()
	if err := os.MkdirAll(filepath.Join(unified, "system.slice", "crind.service"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unified, "cgroup.controllers"), []byte("cpu memory pids"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, file, want string
	}{
		{"v1, the first controller mounted", root, "12:name=systemd:/x\n5:blkio:/crind\n4:pids:/crind\n3:memory:/crind\n", filepath.Join(root, "pids/crind/cgroup.procs")},
		{"v1, a mount named for a controller list", root, "2:cpu,cpuacct:/kubepods\n", filepath.Join(root, "cpu,cpuacct/kubepods/cgroup.procs")},
		{"hybrid: a v1 controller before the unified line", root, "0::/\n4:pids:/crind\n", filepath.Join(root, "pids/crind/cgroup.procs")},
		{"v2 only", unified, "0::/system.slice/crind.service\n", filepath.Join(unified, "system.slice/crind.service/cgroup.procs")},
		{"nothing mounted", root, "0::/\n7:freezer:/crind\n", ""},
		{"garbage", root, "not a cgroup line\n::\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupProcsIn(tc.root, []byte(tc.file))
			if tc.want == "" {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("got %q, %v; want fs.ErrNotExist", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestAttachPrimer: a prime writes the pid to the cgroup.procs file found
// for it, a second prime while one is in flight does nothing, a node
// without writable cgroup files turns priming off, and close waits.
func TestAttachPrimer(t *testing.T) {
	procs := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := newAttachPrimer(slog.New(slog.DiscardHandler))
	p.procs = func(int) (string, error) { return procs, nil }

	release := make(chan struct{})
	var calls atomic.Int32
	pid := os.Getpid()
	p.prime(func() int {
		calls.Add(1)
		<-release
		return pid
	})
	p.prime(func() int { calls.Add(1); return pid }) // in flight: dropped
	close(release)
	p.close()
	if n := calls.Load(); n != 1 {
		t.Errorf("pid looked up %d times, want 1 (the second prime came while the first was in flight)", n)
	}
	if b, _ := os.ReadFile(procs); string(b) != strconv.Itoa(pid) {
		t.Errorf("cgroup.procs got %q, want %d", b, pid)
	}

	// No cgroup file for a live process: off for good.
	q := newAttachPrimer(slog.New(slog.DiscardHandler))
	q.procs = func(int) (string, error) { return "", fs.ErrNotExist }
	q.prime(func() int { return pid })
	q.wg.Wait()
	ran := false
	q.prime(func() int { ran = true; return pid })
	q.close()
	if ran || !q.off {
		t.Errorf("priming still on (off %v, ran %v) after a node without cgroup files", q.off, ran)
	}

	// After close, nothing runs; a nil primer does nothing.
	p.prime(func() int { t.Error("prime ran after close"); return 0 })
	var nilPrimer *attachPrimer
	nilPrimer.prime(func() int { t.Error("nil primer ran"); return 0 })
	nilPrimer.close()
}
