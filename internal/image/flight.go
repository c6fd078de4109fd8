package image

import (
	"context"
	"sync"
)

// flightGroup runs one call per key at a time and hands its result to every
// caller that asked for that key meanwhile. The call runs in its own
// goroutine, on a context derived from the service's (not a caller's), so
// that one caller giving up does not fail the others; it is cancelled when
// every caller has given up, and the last one waits for it to stop.
type flightGroup[T any] struct {
	// mu guards m.
	mu sync.Mutex
	m  map[string]*flight[T]
}

type flight[T any] struct {
	done    chan struct{}
	val     T
	err     error
	waiters int // guarded by flightGroup.mu
	cancel  context.CancelFunc
}

// do returns the result of fn for key, running it unless a call for key is
// already in flight. base is the context fn runs under; wg tracks the
// goroutine so its owner can wait for it.
func (g *flightGroup[T]) do(ctx, base context.Context, wg *sync.WaitGroup, key string, fn func(context.Context) (T, error)) (T, error) {
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*flight[T]{}
	}
	f, ok := g.m[key]
	if !ok {
		fctx, cancel := context.WithCancel(base)
		f = &flight[T]{done: make(chan struct{}), cancel: cancel}
		g.m[key] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			f.val, f.err = fn(fctx)
			g.mu.Lock()
			if g.m[key] == f {
				delete(g.m, key)
			}
			g.mu.Unlock()
			close(f.done)
		}()
	}
	f.waiters++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.waiters--
		last := f.waiters == 0
		if last {
			// Nobody wants it any more: stop it, and let a later caller
			// start afresh rather than join a cancelled call.
			f.cancel()
			if g.m[key] == f {
				delete(g.m, key)
			}
		}
		g.mu.Unlock()
		if last {
			// The last caller returns once the call has stopped, so that
			// what the call cleans up on its way out is gone by then.
			<-f.done
		}
		var zero T
		return zero, ctx.Err()
	}
}
