//go:build soak

package soak

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// faultSpan is the time a fault may excuse errors in: from its start to
// a grace period after its end (end is zero while it lasts).
type faultSpan struct {
	kind       string
	start, end time.Time
}

// faultGrace is how long after a fault an error is still put down to it:
// a call that started during a fault may answer a little later.
const faultGrace = 3 * time.Second

func (s *soak) beginFault(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faultSpan{kind: kind, start: time.Now()})
	s.counts[kind]++
	return len(s.faults) - 1
}

func (s *soak) endFault(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[i].end = time.Now()
}

// faultOverlaps reports whether a fault that excuses errors overlapped
// [t0, t1].
func (s *soak) faultOverlaps(t0, t1 time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.kind == "registry" || f.kind == "nri-check" {
			continue // no lifecycle call touches the registry
		}
		end := f.end.Add(faultGrace)
		if f.end.IsZero() {
			end = time.Now().Add(time.Hour)
		}
		if f.start.Before(t1) && end.After(t0) {
			return true
		}
	}
	return false
}

func (s *soak) faultSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.counts {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// injectFaults injects one of kinds at a time, at exponentially
// distributed intervals, until ctx ends.
func (s *soak) injectFaults(ctx context.Context, kinds map[string]bool) {
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	if len(ks) == 0 {
		return
	}
	for {
		wait := time.Duration(-math.Log(1-float64(s.randN(1000))/1000) * float64(*faultEvery))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		k := ks[s.randN(len(ks))]
		fmt.Printf("soak: %s fault %s (after %.1fs)\n", time.Now().UTC().Format("15:04:05"), k, wait.Seconds())
		var err error
		switch k {
		case "crind":
			err = s.faultCrind()
		case "shim":
			err = s.faultShim()
		case "runc":
			err = s.faultRunc(ctx)
		case "nri":
			err = s.faultNRI()
		case "registry":
			err = s.faultRegistry()
		case "disk":
			err = s.faultDisk()
		}
		if err != nil {
			s.problem("fault %s: %v", k, err)
		}
	}
}

// faultCrind SIGKILLs crind, starts it again after up to 2 s, and checks
// that it serves and tells the truth about the long-running pods.
func (s *soak) faultCrind() error {
	i := s.beginFault("crind")
	defer s.endFault(i)
	s.e.kill()
	time.Sleep(time.Duration(s.randN(2000)) * time.Millisecond)
	t0 := time.Now()
	if err := s.e.start(); err != nil {
		return err
	}
	if err := s.e.waitServing(2 * time.Minute); err != nil {
		return err
	}
	fmt.Printf("soak: fault crind: killed, serving again %.2fs after its start\n", time.Since(t0).Seconds())
	s.checkTruth("after crind restart")
	return nil
}

var shimDir = regexp.MustCompile(`\.pod-([0-9a-f]{64})`)

// faultShim SIGKILLs a random pod's crin-shim; its containers must be
// recorded exit 255 ShimDied (docs/recovery.md).
func (s *soak) faultShim() error {
	pids := procsComm("crin-shim", s.e.state)
	if len(pids) == 0 {
		return nil
	}
	pid := pids[s.randN(len(pids))]
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	m := shimDir.FindSubmatch(cmdline)
	if m == nil {
		return fmt.Errorf("shim %d: no pod id in its command line %q", pid, cmdline)
	}
	s.mu.Lock()
	s.shimKills[string(m[1])] = true
	s.counts["shim"]++
	s.mu.Unlock()
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return nil
}

// faultRunc waits for a runc command of this crind's and SIGKILLs it in
// the middle of whatever it does.
func (s *soak) faultRunc(ctx context.Context) error {
	i := s.beginFault("runc")
	defer s.endFault(i)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, pid := range procsComm("runc", s.e.base) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
			// Leave alone runc's own children (runc init) and state queries:
			// the kill is meant for a create, start, exec, kill or delete.
			if slices.Contains(args, "init") || slices.Contains(args, "state") {
				continue
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			fmt.Printf("soak: fault runc: killed %q\n", strings.Join(args[min(len(args), 1):], " "))
			return nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// faultNRI SIGKILLs the pre-installed NRI plugin and checks crind
// launches it again.
func (s *soak) faultNRI() error {
	pids := procsComm("10-soak", s.e.base)
	if len(pids) == 0 {
		return errors.New("no NRI plugin process (comm 10-soak) found")
	}
	i := s.beginFault("nri")
	defer s.endFault(i)
	_ = syscall.Kill(pids[0], syscall.SIGKILL)
	t0 := time.Now()
	for time.Since(t0) < 5*time.Minute {
		for _, p := range procsComm("10-soak", s.e.base) {
			if p != pids[0] {
				fmt.Printf("soak: fault nri: plugin killed, relaunched after %.1fs\n", time.Since(t0).Seconds())
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("the killed NRI plugin was not relaunched within 5m")
}

// faultRegistry stalls the registry for 10 s: a pull meanwhile must fail
// (Unavailable, after image.pull_progress_timeout) while crind goes on
// serving, and the next pull must work.
func (s *soak) faultRegistry() error {
	i := s.beginFault("registry")
	defer s.endFault(i)
	is := s.e.is
	spec := &runtimeapi.ImageSpec{Image: s.e.spare}
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	if _, err := is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("RemoveImage before the stall: %w", err)
	}
	s.e.faults.Set(imagetest.StallBlobs)
	t0 := time.Now()
	_, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
	took := time.Since(t0)
	time.Sleep(max(0, 10*time.Second-took))
	s.e.faults.Set(imagetest.Healthy)
	if err == nil {
		return errors.New("a pull from the stalled registry succeeded")
	}
	fmt.Printf("soak: fault registry: pull from the stalled registry failed after %.1fs: %v\n", took.Seconds(), err)
	if _, err := is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("pull after the stall: %w", err)
	}
	if _, err := is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("RemoveImage after the stall: %w", err)
	}
	return nil
}

// faultDisk fills the tmpfs holding crind's root for 10 s, then frees it.
func (s *soak) faultDisk() error {
	if s.e.disk == "" {
		return nil
	}
	i := s.beginFault("disk")
	defer s.endFault(i)
	path := filepath.Join(s.e.disk, "fill")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	// The space comes back only once the file is closed and removed.
	free := func() error {
		f.Close()
		return os.Remove(path)
	}
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return fmt.Errorf("fill the disk: %w", err)
		}
	}
	fmt.Printf("soak: fault disk: root's filesystem full (%d MiB written), for 10s\n", n>>20)
	t0 := time.Now()
	// A pull must store blobs and unpack: it fails, ResourceExhausted
	// (docs/recovery.md, "Registry faults"), and leaves nothing behind.
	spec := &runtimeapi.ImageSpec{Image: s.e.spare}
	ctx, cancel := ctxFor(2 * time.Minute)
	defer cancel()
	if _, err := s.e.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("RemoveImage on a full disk: %w", err)
	}
	_, perr := s.e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
	switch {
	case perr == nil:
		// A blob store with room left elsewhere would allow it: say so.
		fmt.Println("soak: fault disk: a pull on the full disk succeeded")
	case status.Code(perr) != codes.ResourceExhausted:
		s.problem("fault disk: pull on a full disk: %v, want ResourceExhausted", perr)
	}
	time.Sleep(max(0, 10*time.Second-time.Since(t0)))
	if err := free(); err != nil {
		return err
	}
	if _, err := s.e.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("pull once the disk has room again: %w", err)
	}
	if _, err := s.e.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec}); err != nil {
		return fmt.Errorf("RemoveImage once the disk has room again: %w", err)
	}
	return nil
}
