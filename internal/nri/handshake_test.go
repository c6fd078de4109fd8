package nri

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

func TestUnknownEventBitsAccepted(t *testing.T) {
	e := newEnv(t, nil)
	e.start()
	var mask api.EventMask
	mask.Set(api.Event_CREATE_CONTAINER, api.Event_REMOVE_CONTAINER)
	const unknown = 1 << 29 // far past api.Event_LAST
	p := &rawPlugin{events: int32(mask) | unknown}
	dialRaw(t, e.cfg.SocketPath, "10", "future", p)
	info := waitPlugin(t, e.a, "10-future", StateReady)
	if diff := cmp.Diff([]string{"CreateContainer", "RemoveContainer"}, info.Events); diff != "" {
		t.Errorf("subscribed events (-want +got):\n%s", diff)
	}
	e.waitLog("level=WARN", "unknown events", "plugin=10-future", "mask=0x20000000")

	ctx := context.Background()
	pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
	if err := e.a.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, _, err := createIn(ctx, e.a, pod, ctr); err != nil {
		t.Fatal(err)
	}
	if err := e.a.RemoveContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	p.rec.waitSeen(t, "Configure crin", "Synchronized", "CreateContainer ctr1", "RemoveContainer ctr1")
	if got := p.rec.seen(); count(got, "RunPodSandbox pod1") != 0 {
		t.Errorf("unsubscribed RunPodSandbox delivered: %v", got)
	}
}

// TestSyncedCreationNotRepeated: a container (and pod) still being
// created when a plugin synchronized is in its Synchronize; when its
// creation event starts only after the plugin is ready, the plugin does
// not get it again. Its removal ends that.
func TestSyncedCreationNotRepeated(t *testing.T) {
	e := newEnv(t, nil)
	pod, ctr := testPod("pod1"), testCtr("pod1", "ctr1")
	e.eng.pods, e.eng.ctrs = []*api.PodSandbox{pod}, []*api.Container{ctr}
	e.start()
	var mask api.EventMask
	mask.Set(api.Event_RUN_POD_SANDBOX, api.Event_CREATE_CONTAINER, api.Event_REMOVE_CONTAINER)
	p := &rawPlugin{events: int32(mask)}
	dialRaw(t, e.cfg.SocketPath, "10", "late", p)
	waitPlugin(t, e.a, "10-late", StateReady)

	ctx := context.Background()
	if err := e.a.RunPodSandbox(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, _, err := createIn(ctx, e.a, pod, ctr); err != nil {
		t.Fatal(err)
	}
	if err := e.a.RemoveContainer(ctx, pod, ctr); err != nil {
		t.Fatal(err)
	}
	// The same id again (a test shortcut for a new container): it was
	// removed, so its creation is news.
	if _, _, err := createIn(ctx, e.a, pod, ctr); err != nil {
		t.Fatal(err)
	}
	p.rec.waitSeen(t, "Synchronized", "RemoveContainer ctr1", "CreateContainer ctr1")
	got := p.rec.seen()
	if n := count(got, "CreateContainer ctr1"); n != 1 {
		t.Errorf("CreateContainer ctr1 delivered %d times, want once (after its removal): %v", n, got)
	}
	if n := count(got, "RunPodSandbox pod1"); n != 0 {
		t.Errorf("RunPodSandbox of a pod in the Synchronize delivered %d times: %v", n, got)
	}
}
