package cri

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventBuffer is how many events a GetContainerEvents subscriber may fall
// behind before its stream is ended (kubelet then relists and
// resubscribes, which is how its evented PLEG recovers).
const eventBuffer = 1024

// The event types, short for the emit calls at each transition.
const (
	eventCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	eventStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	eventStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	eventDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// event is a lifecycle transition as recorded when it happened; it is
// rendered into a ContainerEventResponse (statuses as they are when it is
// sent) by the stream that sends it, so emitting never takes a record
// lock and may happen with one held.
type event struct {
	typ runtimeapi.ContainerEventType
	id  string   // container id; the pod's id for the pod's own events
	sb  *sandbox // the pod; nil when it was already gone
	at  time.Time
}

// broker fans events out to subscribers in the order they were published.
// It owns no goroutine: each subscriber is drained by its stream's handler.
type broker struct {
	buffer int

	// mu guards subs and closed; a leaf lock (publish never blocks under it).
	mu     sync.Mutex
	subs   map[*subscription]struct{}
	closed bool
}

// subscription is one GetContainerEvents stream.
type subscription struct {
	ch chan event
	// gone is closed when the subscription ends for a reason other than
	// its stream's end; err says why.
	gone chan struct{}
	err  error
}

func newBroker(buffer int) *broker {
	return &broker{buffer: buffer, subs: map[*subscription]struct{}{}}
}

// subscribe adds a subscriber; after close it is errdefs.ErrUnavailable.
func (b *broker) subscribe() (*subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("container events: runtime is shutting down: %w", errdefs.ErrUnavailable)
	}
	sub := &subscription{ch: make(chan event, b.buffer), gone: make(chan struct{})}
	b.subs[sub] = struct{}{}
	return sub, nil
}

func (b *broker) unsubscribe(sub *subscription) {
	b.mu.Lock()
	delete(b.subs, sub)
	b.mu.Unlock()
}

// dropLocked ends sub with err.
func (b *broker) dropLocked(sub *subscription, err error) {
	delete(b.subs, sub)
	sub.err = err
	close(sub.gone)
}

// publish queues ev for every subscriber. One whose buffer is full is
// dropped: it would otherwise miss this event silently.
func (b *broker) publish(ev event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.subs {
		select {
		case sub.ch <- ev:
		default:
			b.dropLocked(sub, fmt.Errorf("container events: subscriber fell %d events behind; relist and subscribe again: %w", b.buffer, errdefs.ErrResourceExhausted))
		}
	}
}

// close ends every subscription; later subscribes fail.
func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for sub := range b.subs {
		b.dropLocked(sub, fmt.Errorf("container events: runtime is shutting down: %w", errdefs.ErrUnavailable))
	}
}

// emitContainer publishes a lifecycle event of a container. It takes only
// Service.mu (to find the pod), so it may be called with c.mu held.
func (s *Service) emitContainer(typ runtimeapi.ContainerEventType, c *container) {
	// ID and SandboxID never change after the record is made.
	id, podID := c.rec.ID, c.rec.SandboxID
	s.mu.RLock()
	sb := s.sandboxes[podID]
	s.mu.RUnlock()
	s.events.publish(event{typ: typ, id: id, sb: sb, at: time.Now()})
	s.kickRelease()
}

// emitSandbox publishes a lifecycle event of a pod: kubelet takes the
// pod's own events as container events whose container id is the pod id.
// It takes no lock but the broker's.
func (s *Service) emitSandbox(typ runtimeapi.ContainerEventType, sb *sandbox) {
	s.events.publish(event{typ: typ, id: sb.rec.ID, sb: sb, at: time.Now()})
	s.kickRelease()
}

// kickRelease tells runRelease that lifecycle work happened. It never
// blocks; with Options.ReleaseMemoryAfter zero the channel is nil and
// nothing is sent.
func (s *Service) kickRelease() {
	select {
	case s.releaseKick <- struct{}{}:
	default:
	}
}

// runRelease calls release once lifecycle events have been quiet for
// quiet after a burst of them: a burst of pod and container work leaves
// the Go heap with free pages the runtime's background scavenger returns
// to the OS only slowly (debug.FreeOSMemory, docs/memory.md). Kubelet's
// relists and stats polls are no events, so a node that only polls is
// released once after its last lifecycle change.
func runRelease(ctx context.Context, kick <-chan struct{}, quiet time.Duration, release func()) {
	t := time.NewTimer(quiet)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			t.Reset(quiet)
		case <-t.C:
			release()
		}
	}
}

// GetContainerEvents streams container and pod lifecycle events (created,
// started, stopped, deleted) in the order they happened, from the moment
// of the call. A subscriber that falls eventBuffer events behind has its
// stream ended with ResourceExhausted (it must relist); Close ends every
// stream with Unavailable.
func (s *Service) GetContainerEvents(r *runtimeapi.GetEventsRequest, srv grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	sub, err := s.events.subscribe()
	if err != nil {
		return err
	}
	defer s.events.unsubscribe(sub)
	ctx := srv.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sub.gone:
			return sub.err
		case ev := <-sub.ch:
			if err := srv.Send(s.renderEvent(ctx, ev)); err != nil {
				return err
			}
		}
	}
}

// renderEvent builds the response for ev: the pod's status and its
// containers' statuses as they are now (kubelet takes them as a hint and
// reads the pod again).
func (s *Service) renderEvent(ctx context.Context, ev event) *runtimeapi.ContainerEventResponse {
	out := &runtimeapi.ContainerEventResponse{
		ContainerId:        ev.id,
		ContainerEventType: ev.typ,
		CreatedAt:          ev.at.UnixNano(),
	}
	if ev.sb == nil {
		return out
	}
	ev.sb.mu.Lock()
	out.PodSandboxStatus = sandboxStatus(ev.sb)
	podID := ev.sb.rec.ID
	ev.sb.mu.Unlock()
	for _, c := range s.podContainers(podID) {
		st, err := s.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.rec.ID})
		if err == nil {
			out.ContainersStatuses = append(out.ContainersStatuses, st.GetStatus())
		}
	}
	return out
}
