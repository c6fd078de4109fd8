// Package poll is how crin's tests wait: for a file to appear, a state to
// be recorded, a process to go. STYLE.md asks tests to wait on the event,
// never for a fixed time, and this is the one loop they all use. It is
// imported by test code only.
package poll

import (
	"testing"
	"time"
)

// The interval between two calls of a condition grows from first to most:
// a quick event is seen at once, a slow one costs little CPU on a loaded
// machine.
const (
	first = 5 * time.Millisecond
	most  = 200 * time.Millisecond
)

// Until calls cond until it reports done, and fails the test with
// t.Fatalf when timeout passes first, naming what it waited for and the
// last detail cond gave (say what was seen instead; "" when there is
// nothing to add). cond is called at once, then at intervals growing from
// 5 ms to 200 ms, and once more at the deadline. Like t.Fatalf, Until must
// be called from the goroutine running the test. Timeouts are ceilings,
// not expectations: give the slowest machine plenty.
func Until(t testing.TB, timeout time.Duration, what string, cond func() (done bool, detail string)) {
	t.Helper()
	if ok, detail := Within(timeout, cond); !ok {
		if detail != "" {
			t.Fatalf("%s: not within %v: %s", what, timeout, detail)
		}
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

// Within calls cond as Until does and reports whether it was done before
// timeout passed, with the last detail cond gave. It is for callers that
// must not stop the test: a helper goroutine, or a test that goes on to
// say what it found instead.
func Within(timeout time.Duration, cond func() (done bool, detail string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	interval := first
	for {
		done, detail := cond()
		if done {
			return true, detail
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, detail
		}
		time.Sleep(min(interval, left))
		interval = min(2*interval, most)
	}
}
