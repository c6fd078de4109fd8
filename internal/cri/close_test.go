package cri

import (
	"testing"

	"go.uber.org/goleak"
)

// TestCloseStopsGoroutines checks that Close stops every goroutine the
// Service started: exit monitors, sandbox watches, the stats sampler and
// the event broker.
func TestCloseStopsGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	h := newHub(t)
	pod := h.runPod(t, "web")
	h.startCtr(t, h.create(t, pod, "app"))
	h.create(t, pod, "idle")
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}
