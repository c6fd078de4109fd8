package cleanup

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// fakeRuntime is a runtime whose Delete fails a given number of times.
// Only Delete is implemented.
type fakeRuntime struct {
	runtime.Runtime

	mu sync.Mutex
	// fails makes that many Deletes fail (as when runc is killed).
	fails int
	// deleted counts the Deletes that worked.
	deleted map[string]int
}

func (f *fakeRuntime) Delete(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return errors.New("runc killed")
	}
	f.deleted[id]++
	return nil
}

func (f *fakeRuntime) state() (fails int, deleted map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := make(map[string]int, len(f.deleted))
	for k, v := range f.deleted {
		d[k] = v
	}
	return f.fails, d
}

// fakeImages releases rootfs, failing a given number of times.
type fakeImages struct {
	mu       sync.Mutex
	fails    int
	released []string
}

func (f *fakeImages) ReleaseRootfs(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails > 0 {
		f.fails--
		return errors.New("busy")
	}
	f.released = append(f.released, id)
	return nil
}

// journalFor is a Journal on st with rt as runtime "runc"; known says
// which ids are still owned.
func journalFor(st *store.Store, rt *fakeRuntime, im *fakeImages, known func(string) bool) *Journal {
	if known == nil {
		known = func(string) bool { return false }
	}
	return New(Config{Store: st, Runtimes: map[string]runtime.Runtime{"runc": rt}, Images: im, Known: known})
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "crin.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// run runs j until the test ends.
func run(t *testing.T, j *Journal) context.CancelFunc {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); j.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pending(t *testing.T, st *store.Store) int {
	cs, err := st.Cleanups()
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

// TestFailedDeleteIsRetried: a runtime delete that fails during a
// rollback is recorded and retried in the background until it works,
// also by a Journal on the same store after a restart.
func TestFailedDeleteIsRetried(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "running"
		if restart {
			name = "after restart"
		}
		t.Run(name, func(t *testing.T) {
			st := openStore(t)
			rt := &fakeRuntime{fails: 1, deleted: map[string]int{}}
			if restart {
				rt.fails = 2 // the background retry fails too
			}
			j := journalFor(st, rt, &fakeImages{}, nil)
			stop := run(t, j)
			if err := j.DeleteFromRuntime(t.Context(), "runc", "c1"); err == nil {
				t.Fatal("the first delete did not fail")
			}
			if restart {
				waitFor(t, "a failed retry", func() bool { f, _ := rt.state(); return f == 0 })
				stop()
				run(t, journalFor(st, rt, &fakeImages{}, nil))
			}
			waitFor(t, "the container to be deleted", func() bool {
				_, d := rt.state()
				return d["c1"] == 1 && pending(t, st) == 0
			})
		})
	}
}

// TestOwnedStepWaits: a step for an id a live pod or container owns is
// not run until the id is gone; a step of an unknown handler is dropped.
func TestOwnedStepWaits(t *testing.T) {
	st := openStore(t)
	rt := &fakeRuntime{deleted: map[string]int{}}
	im := &fakeImages{fails: 1}
	var mu sync.Mutex
	owned := true
	j := journalFor(st, rt, im, func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return owned && id == "c1"
	})
	run(t, j)
	if err := j.ReleaseRootfs(t.Context(), "c1"); err == nil {
		t.Fatal("the first release did not fail")
	}
	j.Defer(t.Context(), store.Cleanup{Kind: store.CleanupRuntimeContainer, ID: "c2", Runtime: "gone"}, errors.New("x"))
	waitFor(t, "the unknown handler's step to be dropped", func() bool { return pending(t, st) == 1 })
	im.mu.Lock()
	n := len(im.released)
	im.mu.Unlock()
	if n != 0 {
		t.Fatal("the rootfs of an owned id was released")
	}
	mu.Lock()
	owned = false
	mu.Unlock()
	j.Defer(t.Context(), store.Cleanup{Kind: "nonsense", ID: "c3"}, errors.New("x")) // wakes the loop
	waitFor(t, "the rootfs to be released", func() bool {
		im.mu.Lock()
		defer im.mu.Unlock()
		return len(im.released) == 1 && pending(t, st) == 0
	})
}
