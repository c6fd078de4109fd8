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
	if _, _, err := e.a.CreateContainer(ctx, pod, ctr); err != nil {
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
