package podstats

import (
	"context"
	"errors"
	"testing"

	"github.com/crin-dev/crin/internal/store"
)

// A pod's stats carry its containers, whatever their state; its metrics
// only a ready pod's, with its running containers'. The cgroups here are
// gone, as a pod's are between its stop and its removal: no figures, no
// error.
func TestPodStatsAndMetricsPickWhatIsLive(t *testing.T) {
	src := &fakeSource{}
	col := New(Config{Source: src, Images: noLayers{}})
	web := src.addPod("web", "/crin-test-gone/web")
	src.addContainer("web", "app", store.ContainerRunning, "/crin-test-gone/web/app")
	src.addContainer("web", "done", store.ContainerExited, "/crin-test-gone/web/done")
	db := src.addPod("db", "/crin-test-gone/db")
	src.mu.Lock()
	src.pods[1].State = store.SandboxNotReady
	src.mu.Unlock()

	st, err := col.PodSandboxStats(web)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetLinux().GetContainers()); n != 2 || st.GetLinux().GetCpu() != nil {
		t.Errorf("pod stats: %d containers, CPU %v; want both containers and no CPU (cgroup gone)", n, st.GetLinux().GetCpu())
	}
	list, err := col.ListPodSandboxStats([]Pod{web, db})
	if err != nil || len(list) != 2 {
		t.Errorf("ListPodSandboxStats: %d pods, %v; want 2", len(list), err)
	}

	pods, err := col.PodMetrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].PodSandboxId != "web" {
		t.Fatalf("metrics of %v; want the ready pod web only", pods)
	}
	if cm := pods[0].ContainerMetrics; len(cm) != 1 || cm[0].ContainerId != "app" {
		t.Errorf("container metrics %v; want the running container app only", cm)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := col.PodMetrics(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("PodMetrics with a cancelled context: %v, want context.Canceled", err)
	}
}
