package nri

import (
	"context"
	"errors"
	"testing"
	"time"
)

// acquireAsync runs acquire on its own goroutine; the channel gets its
// result.
func acquireAsync(ctx context.Context, o *podOrder, pod string) <-chan error {
	got := make(chan error, 1)
	go func() { got <- o.acquire(ctx, pod) }()
	return got
}

func expectTurn(t *testing.T, name string, got <-chan error) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: acquire: %v", name, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no turn", name)
	}
}

func expectWaiting(t *testing.T, name string, got <-chan error) {
	t.Helper()
	select {
	case err := <-got:
		t.Fatalf("%s: got its turn (%v) while an earlier event of its pod runs", name, err)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestPodOrder(t *testing.T) {
	ctx := context.Background()
	var o podOrder
	if err := o.acquire(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	// Another pod is not held up.
	expectTurn(t, "other pod", acquireAsync(ctx, &o, "p2"))
	o.release("p2")

	second := acquireAsync(ctx, &o, "p1")
	expectWaiting(t, "second", second)
	cctx, cancel := context.WithCancel(ctx)
	third := acquireAsync(cctx, &o, "p1")
	expectWaiting(t, "third", third)
	fourth := acquireAsync(ctx, &o, "p1")
	expectWaiting(t, "fourth", fourth)

	// A waiter that gives up leaves the queue without holding it up.
	cancel()
	select {
	case err := <-third:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled waiter still waits")
	}

	o.release("p1")
	expectTurn(t, "second", second)
	expectWaiting(t, "fourth", fourth)
	o.release("p1")
	expectTurn(t, "fourth", fourth)
	o.release("p1")

	o.mu.Lock()
	left := len(o.pods)
	o.mu.Unlock()
	if left != 0 {
		t.Errorf("%d pods still tracked after every event ended", left)
	}
	// No ordering without a pod id.
	expectTurn(t, "no pod", acquireAsync(ctx, &o, ""))
	expectTurn(t, "no pod again", acquireAsync(ctx, &o, ""))
}
