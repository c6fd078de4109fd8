package cri

import (
	"context"
	"testing"
	"time"
)

// TestRunRelease checks a burst of kicks leads to one release after the
// quiet period, and a later burst to another.
func TestRunRelease(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	kick := make(chan struct{}, 1)
	released := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		runRelease(ctx, kick, 20*time.Millisecond, func() { released <- struct{}{} })
		close(done)
	}()
	send := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Fatalf("no release after %s", what)
		}
	}
	for range 5 {
		send()
	}
	wait("the first burst")
	send()
	wait("the second burst")
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("runRelease did not return after its context ended")
	}
	select {
	case <-released:
		t.Fatal("released more often than bursts came")
	default:
	}
}

// TestKickReleaseDisabled checks emitting events without a release loop
// (ReleaseMemoryAfter zero) never blocks.
func TestKickReleaseDisabled(t *testing.T) {
	s := &Service{}
	for range 3 {
		s.kickRelease()
	}
}
