package image

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/poll"
)

func TestFlightGroupRunsOnce(t *testing.T) {
	var g flightGroup[int]
	var wg sync.WaitGroup
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context) (int, error) {
		calls.Add(1)
		<-release
		return 42, nil
	}
	const n = 8
	results := make(chan int, n)
	var callers sync.WaitGroup
	for range n {
		callers.Add(1)
		go func() {
			defer callers.Done()
			v, err := g.do(context.Background(), context.Background(), &wg, "k", fn)
			if err != nil {
				t.Error(err)
			}
			results <- v
		}()
	}
	// Let every caller join before the call ends.
	poll.Until(t, 30*time.Second, "every caller joined one flight", func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		f := g.m["k"]
		if f == nil {
			return false, "no flight"
		}
		return f.waiters == n, fmt.Sprintf("%d of %d joined", f.waiters, n)
	})
	close(release)
	callers.Wait()
	wg.Wait()
	close(results)
	for v := range results {
		if v != 42 {
			t.Errorf("result %d, want 42", v)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("fn ran %d times, want 1", c)
	}
}

func TestFlightGroupCancelsWhenAllLeave(t *testing.T) {
	var g flightGroup[int]
	var wg sync.WaitGroup
	stopped := make(chan error, 1)
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := g.do(ctx, context.Background(), &wg, "k", func(fctx context.Context) (int, error) {
		close(started)
		<-fctx.Done()
		stopped <- fctx.Err()
		return 0, fctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("do: %v, want context.Canceled", err)
	}
	wg.Wait()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Errorf("fn saw %v, want its context cancelled", err)
	}
	// A new call for the key starts afresh.
	v, err := g.do(context.Background(), context.Background(), &wg, "k", func(context.Context) (int, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Errorf("second call: %d, %v; want 7", v, err)
	}
	wg.Wait()
}
