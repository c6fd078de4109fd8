package poll

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and
// ends the goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Until on a fatalRecorder in a goroutine of its own and
// returns what Fatalf said ("" when Until returned).
func run(timeout time.Duration, what string, cond func() (bool, string)) string {
	f := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(f, timeout, what, cond)
	}()
	<-done
	return f.msg
}

func TestUntil(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doneAt  int32 // the call that reports done; 0: never
		detail  string
		wantMsg string
	}{
		{name: "at once", doneAt: 1},
		{name: "after a few calls", doneAt: 4},
		{name: "never, with a detail", detail: "state CREATED", wantMsg: "container exited: not within 50ms: state CREATED"},
		{name: "never, without a detail", wantMsg: "container exited: not within 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			msg := run(50*time.Millisecond, "container exited", func() (bool, string) {
				n := calls.Add(1)
				return n == tc.doneAt, tc.detail
			})
			if msg != tc.wantMsg {
				t.Errorf("Fatalf message %q, want %q", msg, tc.wantMsg)
			}
			if tc.doneAt != 0 && calls.Load() != tc.doneAt {
				t.Errorf("cond called %d times, want %d (not again once done)", calls.Load(), tc.doneAt)
			}
			if tc.doneAt == 0 && calls.Load() < 2 {
				t.Errorf("cond called %d times before giving up, want it tried again", calls.Load())
			}
		})
	}
}

func TestWithinChecksOnceMoreAtTheDeadline(t *testing.T) {
	start := time.Now()
	ok, detail := Within(30*time.Millisecond, func() (bool, string) {
		return time.Since(start) >= 30*time.Millisecond, "early"
	})
	if !ok || detail != "early" {
		t.Errorf("Within = %v, %q; want the call at the deadline to count", ok, detail)
	}
}
