package nri

// Keeping pre-installed plugins running: launch, handshake, watch, and
// launch again after a failure with an exponential backoff, so a plugin
// that cannot start or synchronize costs a few attempts an hour rather
// than a relaunch loop.

import (
	"fmt"
	"sync"
	"time"
)

// stableAfter is how long a plugin must stay ready for its next failure to
// count as the first one again (backoff back to its minimum).
const stableAfter = time.Minute

// supervisor is the restart record of one pre-installed plugin. It is made
// by Start and lives until the adaptation stops.
type supervisor struct {
	pi preinstalled
	// first is closed when the first attempt is over: the plugin is ready
	// or failed. Start waits for it, at most StartupWait.
	first chan struct{}

	// mu guards the fields below; it is taken after plugin.mu, never
	// before.
	mu sync.Mutex
	// failures counts failures since the plugin was last stable.
	failures int
	// restarts counts launches after a failure.
	restarts uint64
	lastErr  string
	// waiting is set during a backoff; next is when it ends.
	waiting bool
	backoff time.Duration
	next    time.Time
}

func newSupervisor(pi preinstalled) *supervisor {
	return &supervisor{pi: pi, first: make(chan struct{})}
}

// fill adds the restart record to a plugin's info.
func (s *supervisor) fill(info *PluginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info.Restarts, info.LastError = s.restarts, s.lastErr
	if s.waiting {
		info.State, info.Backoff, info.NextAttempt = StateBackoff, s.backoff, s.next
	}
}

// info describes the plugin while no plugin object exists for it (between
// attempts).
func (s *supervisor) info(a *Adaptation) PluginInfo {
	pc, _ := a.cfg.override(s.pi.idx, s.pi.name)
	info := PluginInfo{
		Index: s.pi.idx, Name: s.pi.name, Kind: KindPreinstalled, State: StateConnecting,
		Required: pc.Required, RequestTimeout: a.cfg.RequestTimeout,
	}
	if pc.RequestTimeout > 0 {
		info.RequestTimeout = pc.RequestTimeout
	}
	s.fill(&info)
	return info
}

// failed records a failure and returns the delay before the next attempt:
// backoffMin doubled for every failure since the plugin was last stable,
// at most backoffMax.
func (s *supervisor) failed(a *Adaptation, err error) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	d := a.backoffMin
	for i := 1; i < s.failures && d < a.backoffMax; i++ {
		d *= 2
	}
	d = min(d, a.backoffMax)
	s.lastErr = err.Error()
	s.waiting, s.backoff, s.next = true, d, time.Now().Add(d)
	return d
}

// relaunch ends a backoff.
func (s *supervisor) relaunch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarts++
	s.waiting = false
}

// stable forgets earlier failures: the plugin stayed ready long enough.
func (s *supervisor) stable() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = 0
}

// supervise keeps one pre-installed plugin running: it launches it, waits
// for it to go away and launches it again after a backoff, until the
// adaptation stops. Every failure counts: to launch, to register, to
// synchronize, or of a ready plugin; only a plugin that stayed ready for
// stableAfter starts again from the shortest backoff.
func (a *Adaptation) supervise(s *supervisor) {
	firstDone := false
	endFirst := func() {
		if !firstDone {
			firstDone = true
			close(s.first)
		}
	}
	defer endFirst()
	lm, _ := a.metrics.(LifecycleMetrics)
	id := s.pi.id()
	for {
		p, pr, err := a.launch(s)
		if err == nil {
			err = a.connect(p, s.pi.config)
		}
		endFirst()
		if err == nil {
			if lm != nil {
				lm.ObservePluginBackoff(id, 0)
			}
			readyAt := time.Now()
			select {
			case <-p.closed:
				err = p.closeErr
				if err == nil {
					err = ErrPluginGone
				}
			case <-pr.exited:
				err = fmt.Errorf("nri plugin process exited: %w", ErrPluginGone)
				p.close(err)
			case <-a.ctx.Done():
				<-p.closed // Stop shuts it down first
			}
			if time.Since(readyAt) >= stableAfter {
				s.stable()
			}
		} else {
			a.log.Warn("nri plugin failed to start", "plugin", id, "error", err)
		}
		if pr != nil {
			a.terminate(pr)
		}
		if a.isStopping() {
			return
		}
		backoff := s.failed(a, err)
		if lm != nil {
			lm.ObservePluginBackoff(id, backoff)
		}
		a.log.Info("nri plugin restarting after backoff", "plugin", id, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-a.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.relaunch()
		if lm != nil {
			lm.ObservePluginRestart(id)
		}
	}
}
