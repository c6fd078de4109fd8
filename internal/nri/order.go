package nri

import (
	"context"
	"slices"
	"sync"
)

// podOrder runs the events of one pod one after another, in arrival order,
// while events of different pods run in parallel. It is a chain of tickets,
// not a lock: nothing is held across a plugin call that another pod's event
// could need.
type podOrder struct {
	// mu guards tails.
	mu    sync.Mutex
	tails map[string]*podTail
}

type podTail struct {
	last chan struct{} // closed when the newest event of the pod is done
	refs int
}

// acquire waits until every earlier event of pod is done. The returned
// release must be called exactly once, also when acquire fails because ctx
// ended; the ticket then passes on as soon as the earlier events are done.
func (o *podOrder) acquire(ctx context.Context, pod string) (release func(), err error) {
	if pod == "" {
		return func() {}, nil
	}
	mine := make(chan struct{})
	o.mu.Lock()
	if o.tails == nil {
		o.tails = make(map[string]*podTail)
	}
	t := o.tails[pod]
	if t == nil {
		t = &podTail{}
		o.tails[pod] = t
	}
	prev := t.last
	t.last = mine
	t.refs++
	o.mu.Unlock()

	var once sync.Once
	done := func() {
		once.Do(func() {
			close(mine)
			o.mu.Lock()
			t.refs--
			if t.refs == 0 {
				delete(o.tails, pod)
			}
			o.mu.Unlock()
		})
	}
	if prev == nil {
		return done, nil
	}
	select {
	case <-prev:
		return done, nil
	case <-ctx.Done():
		// Keep the chain intact: pass the ticket on once prev is done.
		// Earlier events are bounded by plugin timeouts, so this ends.
		go func() {
			<-prev
			done()
		}()
		return func() {}, ctx.Err()
	}
}

// flight is an event in progress for one container, so that unsolicited
// updates for that container can be folded into it instead of racing it.
type flight struct {
	// mu guards m and sealed.
	mu sync.Mutex
	// creating is set for CreateContainer: the container does not exist
	// for the runtime yet, updates to it are refused.
	creating bool
	// m collects the updates of an UpdateContainer or StopContainer event.
	m      *merger
	sealed bool
}

// flightTable maps container ids to their event in progress.
type flightTable struct {
	// mu guards m.
	mu sync.Mutex
	m  map[string]*flight
}

func (ft *flightTable) start(id string, f *flight) (land func()) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.m == nil {
		ft.m = make(map[string]*flight)
	}
	ft.m[id] = f
	return func() {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		if ft.m[id] == f {
			delete(ft.m, id)
		}
	}
}

func (ft *flightTable) get(id string) *flight {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.m[id]
}

// gateTable serializes the application of unsolicited updates per
// container. A gate is only held around an Engine call, never across a
// plugin call.
type gateTable struct {
	// mu guards m.
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	mu   sync.Mutex
	refs int
}

// lock takes the gates of ids in sorted order (no lock-order cycles).
func (gt *gateTable) lock(ids []string) (unlock func()) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	gs := make([]*gate, len(ids))
	gt.mu.Lock()
	if gt.m == nil {
		gt.m = make(map[string]*gate)
	}
	for i, id := range ids {
		g := gt.m[id]
		if g == nil {
			g = &gate{}
			gt.m[id] = g
		}
		g.refs++
		gs[i] = g
	}
	gt.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
	}
	return func() {
		for _, g := range gs {
			g.mu.Unlock()
		}
		gt.mu.Lock()
		for i, id := range ids {
			gs[i].refs--
			if gs[i].refs == 0 {
				delete(gt.m, id)
			}
		}
		gt.mu.Unlock()
	}
}
