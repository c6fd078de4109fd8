package cri

import (
	"context"
	"errors"
	"time"

	"github.com/crin-dev/crin/internal/store"
)

// Retry pacing of failed cleanup steps: the first retry comes after
// cleanupFirstRetry, each later one after twice the wait, up to
// cleanupMaxRetry. A new failure retries everything at once.
const (
	cleanupFirstRetry = time.Second
	cleanupMaxRetry   = 2 * time.Minute
	// cleanupStepTimeout bounds one try of one step.
	cleanupStepTimeout = 30 * time.Second
)

// deferCleanup records a cleanup step that failed with cause, so the
// cleanup loop retries it until it works (also after a restart: the
// record is in the store), and wakes the loop.
func (s *Service) deferCleanup(ctx context.Context, c store.Cleanup, cause error) {
	c.Since, c.LastError = time.Now().UnixNano(), cause.Error()
	if err := s.opts.Store.PutCleanup(&c); err != nil {
		s.log.ErrorContext(ctx, "record failed cleanup step; the start-up sweep will find what it leaves", "kind", c.Kind, "id", c.ID, "error", err)
		return
	}
	s.log.WarnContext(ctx, "cleanup step failed, retrying in the background", "kind", c.Kind, "id", c.ID, "error", cause)
	if s.cleanWake != nil {
		select {
		case s.cleanWake <- struct{}{}:
		default:
		}
	}
}

// deleteFromRuntime deletes id from the runtime of handler; a failure is
// returned and recorded for the cleanup loop.
func (s *Service) deleteFromRuntime(ctx context.Context, handler, id string) error {
	rt, ok := s.opts.Runtimes[handler]
	if !ok {
		return nil
	}
	err := rt.Delete(ctx, id)
	if err != nil {
		s.deferCleanup(ctx, store.Cleanup{Kind: store.CleanupRuntimeContainer, ID: id, Runtime: handler}, err)
	}
	return err
}

// releaseRootfs releases container id's rootfs, and removes the
// checkpoint it was restored from if any; a failure is returned and
// recorded for the cleanup loop.
func (s *Service) releaseRootfs(ctx context.Context, id string) error {
	s.ckpt.RemoveRestoreDir(ctx, id)
	err := s.opts.Images.ReleaseRootfs(ctx, id)
	if err != nil {
		s.deferCleanup(ctx, store.Cleanup{Kind: store.CleanupRootfs, ID: id}, err)
	}
	return err
}

// startCleanups starts the loop that retries recorded cleanup steps,
// owned by the Service (Close stops it).
func (s *Service) startCleanups() {
	s.cleanWake = make(chan struct{}, 1)
	s.goOwned(s.cleanupLoop)
}

func (s *Service) cleanupLoop() {
	wait := cleanupFirstRetry
	for {
		if s.runCleanups(s.ctx) == 0 {
			wait = cleanupFirstRetry
			select {
			case <-s.ctx.Done():
				return
			case <-s.cleanWake:
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.cleanWake:
			wait = cleanupFirstRetry
		case <-t.C:
			wait = min(2*wait, cleanupMaxRetry)
		}
		t.Stop()
	}
}

// runCleanups tries every recorded cleanup step once and returns how many
// are still pending.
func (s *Service) runCleanups(ctx context.Context) int {
	cs, err := s.opts.Store.Cleanups()
	if err != nil {
		s.log.WarnContext(ctx, "read pending cleanups", "error", err)
		return 1
	}
	left := 0
	for _, c := range cs {
		if ctx.Err() != nil {
			return left + 1
		}
		sctx, cancel := context.WithTimeout(ctx, cleanupStepTimeout)
		err := s.runCleanup(sctx, c)
		cancel()
		if err == nil {
			if err := s.opts.Store.DeleteCleanup(c.Key()); err != nil {
				s.log.WarnContext(ctx, "forget done cleanup", "kind", c.Kind, "id", c.ID, "error", err)
			}
			s.log.InfoContext(ctx, "pending cleanup done", "kind", c.Kind, "id", c.ID, "attempts", c.Attempts+1)
			continue
		}
		left++
		c.Attempts++
		c.LastError = err.Error()
		if err := s.opts.Store.PutCleanup(c); err != nil {
			s.log.WarnContext(ctx, "record cleanup attempt", "kind", c.Kind, "id", c.ID, "error", err)
		}
		s.log.DebugContext(ctx, "pending cleanup failed again", "kind", c.Kind, "id", c.ID, "attempts", c.Attempts, "error", err)
	}
	return left
}

var errStillOwned = errors.New("still owned by a live pod or container")

func (s *Service) runCleanup(ctx context.Context, c *store.Cleanup) error {
	switch c.Kind {
	case store.CleanupPodCgroup:
		// A pod being removed stays in the map until its removal is
		// done: its cgroup is not touched before.
		if s.knownID(c.ID) {
			return errStillOwned
		}
		return s.env.RemoveCgroupTree(ctx, c.Path)
	case store.CleanupRuntimeContainer:
		if s.knownID(c.ID) {
			return errStillOwned
		}
		rt, ok := s.opts.Runtimes[c.Runtime]
		if !ok {
			return nil // the handler is gone, and with it what it ran
		}
		return rt.Delete(ctx, c.ID)
	case store.CleanupRootfs:
		if s.knownID(c.ID) {
			return errStillOwned
		}
		return s.opts.Images.ReleaseRootfs(ctx, c.ID)
	case store.CleanupIDMapped:
		if s.knownID(c.ID) {
			return errStillOwned
		}
		return s.env.RetryUserNSDir(ctx, c.Path)
	default:
		s.log.WarnContext(ctx, "unknown pending cleanup dropped", "kind", c.Kind, "id", c.ID)
		return nil
	}
}

// knownID reports whether a pod or container with id is visible.
func (s *Service) knownID(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, sb := s.sandboxes[id]
	_, c := s.containers[id]
	return sb || c
}
