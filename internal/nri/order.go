package nri

import (
	"context"
	"slices"
	"sync"
)

// podOrder runs the events of one pod one after another, in arrival order,
// while events of different pods run in parallel. It is a queue of turns,
// not a lock held across plugin calls: nothing another pod's event could
// need is held while an event waits or runs. An event that finds its pod
// idle takes its turn without allocating.
type podOrder struct {
	// mu guards pods.
	mu sync.Mutex
	// pods holds the pods with an event in progress; the value, nil when
	// nobody waits, queues the events waiting for their turn.
	pods map[string]*podQueue
}

type podQueue struct {
	waiting []chan struct{} // closed to hand the turn over, oldest first
}

// acquire waits until every earlier event of pod is done. Unless it
// returns an error (ctx ended first), release(pod) must be called when the
// event is done. An empty pod id is not ordered.
func (o *podOrder) acquire(ctx context.Context, pod string) error {
	if pod == "" {
		return nil
	}
	o.mu.Lock()
	q, busy := o.pods[pod]
	if !busy {
		if o.pods == nil {
			o.pods = make(map[string]*podQueue)
		}
		o.pods[pod] = nil
		o.mu.Unlock()
		return nil
	}
	if q == nil {
		q = &podQueue{}
		o.pods[pod] = q
	}
	turn := make(chan struct{})
	q.waiting = append(q.waiting, turn)
	o.mu.Unlock()

	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	o.mu.Lock()
	if i := slices.Index(q.waiting, turn); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
		o.mu.Unlock()
		return ctx.Err()
	}
	o.mu.Unlock()
	// The turn came together with the end of ctx: pass it on.
	o.release(pod)
	return ctx.Err()
}

// release ends the running event of pod and hands the turn to the oldest
// waiting one.
func (o *podOrder) release(pod string) {
	if pod == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.pods[pod]
	if q == nil || len(q.waiting) == 0 {
		delete(o.pods, pod)
		return
	}
	next := q.waiting[0]
	q.waiting[0] = nil
	q.waiting = q.waiting[1:]
	close(next)
}

// flight is an event in progress for one container, so that unsolicited
// updates for that container can be folded into it instead of racing it.
type flight struct {
	// mu guards m and sealed.
	mu sync.Mutex
	// creating is set for CreateContainer: the container does not exist
	// for the runtime yet, updates to it are refused.
	creating bool
	// stopping is set for StopContainer: the container is stopped, updates
	// to it are refused.
	stopping bool
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

// start records f as the event in progress for container id; land(id, f)
// must follow when it is over.
func (ft *flightTable) start(id string, f *flight) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.m == nil {
		ft.m = make(map[string]*flight)
	}
	ft.m[id] = f
}

// land forgets f, unless a newer event of id replaced it.
func (ft *flightTable) land(id string, f *flight) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if ft.m[id] == f {
		delete(ft.m, id)
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
