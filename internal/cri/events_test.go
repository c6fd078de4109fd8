package cri

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventStream is a GetContainerEvents stream that records what is sent.
type eventStream struct {
	grpc.ServerStream
	ctx context.Context
	// block, when set, holds every Send until it is closed: a subscriber
	// that does not keep up.
	block chan struct{}

	mu   sync.Mutex
	sent []*runtimeapi.ContainerEventResponse
}

func (e *eventStream) Context() context.Context { return e.ctx }

func (e *eventStream) Send(r *runtimeapi.ContainerEventResponse) error {
	if e.block != nil {
		<-e.block
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sent = append(e.sent, r)
	return nil
}

// seen lists the events so far as "TYPE id-prefix".
func (e *eventStream) seen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, r := range e.sent {
		out = append(out, fmt.Sprintf("%s %s", r.ContainerEventType, short(r.ContainerId)))
	}
	return out
}

// subscribe runs GetContainerEvents on its own goroutine and waits until
// it is subscribed; the returned channel yields its result.
func subscribe(t *testing.T, h *hub, es *eventStream) <-chan error {
	t.Helper()
	h.events.mu.Lock()
	before := len(h.events.subs)
	h.events.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- h.GetContainerEvents(&runtimeapi.GetEventsRequest{}, es) }()
	waitFor(t, "subscription", func() bool {
		h.events.mu.Lock()
		defer h.events.mu.Unlock()
		return len(h.events.subs) > before
	})
	return done
}

func TestContainerEventsInOrder(t *testing.T) {
	h := newHub(t)
	ctx, cancel := context.WithCancel(t.Context())
	es := &eventStream{ctx: ctx}
	done := subscribe(t, h, es)

	pod := h.runPod(t, "p")
	id := h.create(t, pod, "c")
	h.startCtr(t, id)
	h.rt.exit(id, 0)
	waitFor(t, "exit recorded", func() bool {
		st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	if _, err := h.RemoveContainer(t.Context(), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.RemovePodSandbox(t.Context(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CONTAINER_CREATED_EVENT " + short(pod),
		"CONTAINER_STARTED_EVENT " + short(pod),
		"CONTAINER_CREATED_EVENT " + short(id),
		"CONTAINER_STARTED_EVENT " + short(id),
		"CONTAINER_STOPPED_EVENT " + short(id),
		"CONTAINER_DELETED_EVENT " + short(id),
		"CONTAINER_STOPPED_EVENT " + short(pod),
		"CONTAINER_DELETED_EVENT " + short(pod),
	}
	waitFor(t, "all events", func() bool { return len(es.seen()) >= len(want) })
	if diff := cmp.Diff(want, es.seen()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	es.mu.Lock()
	for _, r := range es.sent {
		if r.PodSandboxStatus.GetMetadata().GetUid() != "p-uid" || r.CreatedAt == 0 {
			t.Errorf("event %s %s: pod status %v, created at %d; kubelet needs the pod's metadata and the time", r.ContainerEventType, short(r.ContainerId), r.PodSandboxStatus, r.CreatedAt)
		}
	}
	if cs := es.sent[3].ContainersStatuses; len(cs) != 1 || cs[0].Id != id {
		t.Errorf("STARTED event container statuses %v, want the container", cs)
	}
	es.mu.Unlock()

	cancel()
	if err := <-done; err != nil {
		t.Errorf("GetContainerEvents after the client left: %v", err)
	}
	h.events.mu.Lock()
	n := len(h.events.subs)
	h.events.mu.Unlock()
	if n != 0 {
		t.Errorf("%d subscriptions left after the stream ended", n)
	}
}

func TestContainerEventsSlowSubscriberDropped(t *testing.T) {
	b := newBroker(4)
	slow, err := b.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	fast, err := b.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 10 {
		b.publish(event{typ: eventCreated, id: fmt.Sprint(i)})
		// fast keeps up
		select {
		case ev := <-fast.ch:
			got = append(got, ev.id)
		case <-fast.gone:
			t.Fatalf("a subscriber that keeps up was dropped: %v", fast.err)
		}
	}
	if diff := cmp.Diff([]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}, got); diff != "" {
		t.Errorf("fast subscriber (-want +got):\n%s", diff)
	}
	select {
	case <-slow.gone:
		if !errors.Is(slow.err, errdefs.ErrResourceExhausted) {
			t.Errorf("slow subscriber dropped with %v, want ResourceExhausted", slow.err)
		}
	default:
		t.Error("a subscriber 10 events behind with a buffer of 4 was not dropped")
	}
	// The first events it did get are still in order.
	for i := range 4 {
		if ev := <-slow.ch; ev.id != fmt.Sprint(i) {
			t.Errorf("slow subscriber event %d is %s", i, ev.id)
		}
	}
	b.close()
	<-fast.gone
	if !errors.Is(fast.err, errdefs.ErrUnavailable) {
		t.Errorf("after close: %v, want Unavailable", fast.err)
	}
	if _, err := b.subscribe(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("subscribe after close: %v, want Unavailable", err)
	}
}

// A stream that never reads must not stall the lifecycle, and its handler
// must end on Close (no goroutine left behind).
func TestContainerEventsStalledStreamEndsOnClose(t *testing.T) {
	h := newHub(t)
	es := &eventStream{ctx: t.Context(), block: make(chan struct{})}
	done := subscribe(t, h, es)
	for i := range eventBuffer + 8 {
		h.events.publish(event{typ: eventCreated, id: fmt.Sprint(i)})
	}
	// The handler is stuck in Send of the first event; the rest overflowed.
	h.Close()
	close(es.block)
	select {
	case err := <-done:
		if err == nil {
			t.Error("GetContainerEvents of a dropped subscriber returned nil, want an error so kubelet relists")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("GetContainerEvents did not return after Close")
	}
}
