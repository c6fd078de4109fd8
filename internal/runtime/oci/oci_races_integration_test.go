//go:build integration

package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/test/poll"
)

// killLeftShims kills, when the test ends, the shims and the runtime
// state a failed run of a race test leaves, so that one failure does
// not leak into the next test.
func killLeftShims(t *testing.T, o *Runtime, id string) {
	t.Cleanup(func() {
		for _, pid := range shimsOf(id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = exec.Command(o.cfg.Binary, "--root", o.cfg.Root, "delete", "--force", id).Run()
	})
}

// TestSignalDuringPendingStart kills a container while its start waits
// for the pod's shim (the interleaving is injected): under load, a CRI
// StopContainer or StopPodSandbox meets a StartContainer there. The
// kill used to be recorded as that of a container that never started,
// the start then ran it anyway, and it ran on under a shim that counted
// it, so the shim outlived its pod. Whichever wins now, the container
// ends and its shim exits with its deletion.
func TestSignalDuringPendingStart(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	killLeftShims(t, o, id)
	ctx := ctxT(t, 3*time.Minute)
	if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "sleep", "1000")}); err != nil {
		t.Fatal(err)
	}
	signalled := make(chan error, 1)
	o.beforeShimStart = func(string) {
		go func() { signalled <- o.Signal(ctx, id, syscall.SIGKILL, runtime.SignalOptions{All: true}) }()
		poll.Until(t, time.Minute, "the kill done, or waiting for the start", func() (bool, string) {
			return len(signalled) > 0 || o.starts.users(id) > 1, "neither"
		})
	}
	pid, startErr := o.Start(ctx, id)
	if err := <-signalled; err != nil {
		t.Fatalf("Signal: %v", err)
	}
	if startErr != nil && !errdefs.IsFailedPrecondition(startErr) {
		t.Fatalf("Start: %v", startErr)
	}
	t.Logf("start: pid %d, error %v", pid, startErr)
	poll.Until(t, time.Minute, "the killed container stopped", func() (bool, string) {
		st, err := o.Status(ctx, id)
		return err == nil && st.State == runtime.StateStopped, string(st.State)
	})
	shimPid := readPid(filepath.Join(o.cfg.StateDir, shimDirPrefix+id, shim.ShimPidFile))
	if err := o.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the shim gone with its last container", func() (bool, string) {
		return len(shimsOf(id)) == 0, "still running"
	})
	assertGone(t, o, id, shimPid, pid)
}

// TestDeleteOfContainerItsShimRuns deletes a container whose exit is on
// record while its shim still runs it (what the race above left): the
// delete kills it through the shim, so the shim drops it and exits,
// instead of keeping it counted for good.
func TestDeleteOfContainerItsShimRuns(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	id := testID(t)
	killLeftShims(t, o, id)
	ctx := ctxT(t, 3*time.Minute)
	if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "sleep", "1000")}); err != nil {
		t.Fatal(err)
	}
	pid, err := o.Start(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := exitrec.Write(o.dir(id), exitrec.Exit{ExitCode: 137, Signal: 9, FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	shimPid := readPid(filepath.Join(o.cfg.StateDir, shimDirPrefix+id, shim.ShimPidFile))
	if err := o.Delete(context.WithoutCancel(ctx), id); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the shim gone with its last container", func() (bool, string) {
		return len(shimsOf(id)) == 0, "still running"
	})
	assertGone(t, o, id, shimPid, pid)
}

// TestDeleteOfLastContainerWaitsForShim deletes a pod shim's last
// container: when Delete returns, the shim is gone and so is its dir
// (RemovePodSandbox returned while the shim was still exiting, and a
// loaded machine showed it as a shim that outlived its pod).
func TestDeleteOfLastContainerWaitsForShim(t *testing.T) {
	o, _ := newEnv(t, "/usr/sbin/runc")
	for i := range 5 {
		id := fmt.Sprintf("%s-%d", testID(t), i)
		killLeftShims(t, o, id)
		ctx := ctxT(t, 3*time.Minute)
		if err := o.Create(ctx, runtime.CreateRequest{ID: id, Spec: testSpec(rootfs(t), id, "sleep", "1000")}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		shimDir := filepath.Join(o.cfg.StateDir, shimDirPrefix+id)
		shimPid := readPid(filepath.Join(shimDir, shim.ShimPidFile))
		if err := o.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if alive(shimPid) {
			t.Errorf("%s: shim %d still running when Delete of its last container returned", id, shimPid)
		}
		if _, err := os.Stat(shimDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: shim dir still there when Delete of its last container returned: %v", id, err)
		}
	}
}
