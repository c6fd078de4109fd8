// Package cleanup keeps the journal of cleanup steps that failed and
// retries them until they work (docs/recovery.md, "Retried in the
// background"): a runtime delete or a rootfs release of a rollback, a pod
// cgroup removal, the removal of id-mapped mounts. Each failed step is
// recorded in the store (store.Cleanup), so a restarted crind goes on with
// it, and a Journal's Run loop retries the recorded steps: at once when a
// new failure is recorded, then after a wait that doubles up to a limit.
//
// The hub (internal/cri) hands failures over (Defer, or the DeleteFromRuntime
// and ReleaseRootfs helpers that defer what fails) and runs the loop on a
// goroutine it owns; what the journal needs of it, whether a pod or a
// container still owns an id, comes as Config.Known.
package cleanup

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/store"
)

// Retry pacing of failed cleanup steps: the first retry comes after
// firstRetry, each later one after twice the wait, up to maxRetry. A new
// failure retries everything at once.
const (
	firstRetry = time.Second
	maxRetry   = 2 * time.Minute
	// stepTimeout bounds one try of one step.
	stepTimeout = 30 * time.Second
)

// Env removes what a pod's host environment leaves (podenv.Env).
type Env interface {
	// RemoveCgroupTree removes a pod cgroup tree, given by its path
	// relative to the hierarchies.
	RemoveCgroupTree(ctx context.Context, rel string) error
	// RetryUserNSDir removes the id-mapped mounts under dir.
	RetryUserNSDir(ctx context.Context, dir string) error
}

// RootfsReleaser releases a container's rootfs (image.Service).
type RootfsReleaser interface {
	ReleaseRootfs(ctx context.Context, containerID string) error
}

// Config wires a Journal.
type Config struct {
	// Store holds the journal (its cleanups bucket).
	Store *store.Store
	// Runtimes are the runtimes by handler, for runtime deletes.
	Runtimes map[string]runtime.Runtime
	// Images releases container rootfs.
	Images RootfsReleaser
	// Env removes pod cgroups and id-mapped mounts.
	Env Env
	// Known reports whether a live pod or container owns id: its steps
	// wait until it does not.
	Known func(id string) bool
	// Logger logs failures and retries; nil means slog.Default().
	Logger *slog.Logger
}

// Journal records failed cleanup steps and retries them (Run).
type Journal struct {
	c   Config
	log *slog.Logger
	// wake wakes Run when a failure is recorded.
	wake chan struct{}
}

// New returns a Journal; nothing runs until Run.
func New(c Config) *Journal {
	l := c.Logger
	if l == nil {
		l = slog.Default()
	}
	return &Journal{c: c, log: l, wake: make(chan struct{}, 1)}
}

// Defer records a cleanup step that failed with cause, so that Run
// retries it until it works (also after a restart: the record is in the
// store), and wakes Run. A step that cannot be recorded is logged: the
// start-up sweep finds what it leaves.
func (j *Journal) Defer(ctx context.Context, c store.Cleanup, cause error) {
	c.Since, c.LastError = time.Now().UnixNano(), cause.Error()
	if err := j.c.Store.PutCleanup(&c); err != nil {
		j.log.ErrorContext(ctx, "record failed cleanup step; the start-up sweep will find what it leaves", "kind", c.Kind, "id", c.ID, "error", err)
		return
	}
	j.log.WarnContext(ctx, "cleanup step failed, retrying in the background", "kind", c.Kind, "id", c.ID, "error", cause)
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// DeleteFromRuntime deletes id from the runtime of handler (nothing for
// an unknown handler); a failure is returned and deferred.
func (j *Journal) DeleteFromRuntime(ctx context.Context, handler, id string) error {
	rt, ok := j.c.Runtimes[handler]
	if !ok {
		return nil
	}
	err := rt.Delete(ctx, id)
	if err != nil {
		j.Defer(ctx, store.Cleanup{Kind: store.CleanupRuntimeContainer, ID: id, Runtime: handler}, err)
	}
	return err
}

// ReleaseRootfs releases container id's rootfs; a failure is returned and
// deferred.
func (j *Journal) ReleaseRootfs(ctx context.Context, id string) error {
	err := j.c.Images.ReleaseRootfs(ctx, id)
	if err != nil {
		j.Defer(ctx, store.Cleanup{Kind: store.CleanupRootfs, ID: id}, err)
	}
	return err
}

// Run retries the recorded steps until ctx is done: all of them at once,
// then those that failed again after a wait doubling from a second up to
// two minutes; a new failure (Defer) retries all at once.
func (j *Journal) Run(ctx context.Context) {
	wait := firstRetry
	for {
		if j.runAll(ctx) == 0 {
			wait = firstRetry
			select {
			case <-ctx.Done():
				return
			case <-j.wake:
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-j.wake:
			wait = firstRetry
		case <-t.C:
			wait = min(2*wait, maxRetry)
		}
		t.Stop()
	}
}

// runAll tries every recorded cleanup step once and returns how many are
// still pending.
func (j *Journal) runAll(ctx context.Context) int {
	cs, err := j.c.Store.Cleanups()
	if err != nil {
		j.log.WarnContext(ctx, "read pending cleanups", "error", err)
		return 1
	}
	left := 0
	for _, c := range cs {
		if ctx.Err() != nil {
			return left + 1
		}
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := j.run(sctx, c)
		cancel()
		if err == nil {
			if err := j.c.Store.DeleteCleanup(c.Key()); err != nil {
				j.log.WarnContext(ctx, "forget done cleanup", "kind", c.Kind, "id", c.ID, "error", err)
			}
			j.log.InfoContext(ctx, "pending cleanup done", "kind", c.Kind, "id", c.ID, "attempts", c.Attempts+1)
			continue
		}
		left++
		c.Attempts++
		c.LastError = err.Error()
		if err := j.c.Store.PutCleanup(c); err != nil {
			j.log.WarnContext(ctx, "record cleanup attempt", "kind", c.Kind, "id", c.ID, "error", err)
		}
		j.log.DebugContext(ctx, "pending cleanup failed again", "kind", c.Kind, "id", c.ID, "attempts", c.Attempts, "error", err)
	}
	return left
}

var errStillOwned = errors.New("still owned by a live pod or container")

// run tries step c once.
func (j *Journal) run(ctx context.Context, c *store.Cleanup) error {
	switch c.Kind {
	case store.CleanupPodCgroup, store.CleanupRuntimeContainer, store.CleanupRootfs, store.CleanupIDMapped:
	default:
		j.log.WarnContext(ctx, "unknown pending cleanup dropped", "kind", c.Kind, "id", c.ID)
		return nil
	}
	// A pod being removed stays known until its removal is done: what
	// it owns is not touched before.
	if j.c.Known(c.ID) {
		return errStillOwned
	}
	switch c.Kind {
	case store.CleanupPodCgroup:
		return j.c.Env.RemoveCgroupTree(ctx, c.Path)
	case store.CleanupRuntimeContainer:
		rt, ok := j.c.Runtimes[c.Runtime]
		if !ok {
			return nil // the handler is gone, and with it what it ran
		}
		return rt.Delete(ctx, c.ID)
	case store.CleanupRootfs:
		return j.c.Images.ReleaseRootfs(ctx, c.ID)
	default: // store.CleanupIDMapped
		return j.c.Env.RetryUserNSDir(ctx, c.Path)
	}
}
