package cri

import (
	"context"
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The stats RPCs pick what their filters name and hand internal/podstats
// the hub's view of it: ids, metadata, labels and each pod's containers.
func TestStatsThroughHub(t *testing.T) {
	h := newHub(t)
	web, db := h.runPod(t, "web"), h.runPod(t, "db")
	app := h.create(t, web, "app")
	h.startCtr(t, app)
	side := h.create(t, web, "side")
	store := h.create(t, db, "store")
	ctx := t.Context()

	ids := func(st []*runtimeapi.ContainerStats) []string {
		var out []string
		for _, s := range st {
			out = append(out, s.GetAttributes().GetId())
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"all", nil, sorted(app, side, store)},
		{"pod", &runtimeapi.ContainerStatsFilter{PodSandboxId: web}, sorted(app, side)},
		{"id prefix", &runtimeapi.ContainerStatsFilter{Id: store[:8]}, []string{store}},
		{"labels", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"ctr": "side"}}, []string{side}},
		{"no match", &runtimeapi.ContainerStatsFilter{PodSandboxId: db, LabelSelector: map[string]string{"ctr": "app"}}, nil},
	} {
		resp, err := h.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: tc.filter})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ids(resp.Stats); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ListContainerStats %q, want %q", tc.name, got, tc.want)
		}
	}

	ps, err := h.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: web[:8]})
	if err != nil {
		t.Fatal(err)
	}
	attr := ps.Stats.GetAttributes()
	if attr.GetId() != web || attr.GetMetadata().GetName() != "web" || attr.GetLabels()["app"] != "web" {
		t.Errorf("PodSandboxStats attributes %v; want pod web's", attr)
	}
	if got := ids(ps.Stats.GetLinux().GetContainers()); !slices.Equal(got, sorted(app, side)) {
		t.Errorf("PodSandboxStats containers %q, want %q", got, sorted(app, side))
	}
	lp, err := h.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "db"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(lp.Stats) != 1 || lp.Stats[0].GetAttributes().GetId() != db {
		t.Errorf("ListPodSandboxStats app=db: %v, want pod db only", lp.Stats)
	}
}

// ListPodSandboxMetrics reports every ready pod and, of its containers,
// the running ones; a cancelled call fails with its context's error.
func TestPodSandboxMetricsThroughHub(t *testing.T) {
	h := newHub(t)
	web, db := h.runPod(t, "web"), h.runPod(t, "db")
	app := h.create(t, web, "app")
	h.startCtr(t, app)
	h.create(t, web, "idle")
	if _, err := h.StopPodSandbox(t.Context(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: db}); err != nil {
		t.Fatal(err)
	}
	resp, err := h.ListPodSandboxMetrics(t.Context(), &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.PodMetrics) != 1 || resp.PodMetrics[0].PodSandboxId != web {
		t.Fatalf("metrics of %d pods (%v); want the ready pod web only", len(resp.PodMetrics), resp.PodMetrics)
	}
	cm := resp.PodMetrics[0].ContainerMetrics
	if len(cm) != 1 || cm[0].ContainerId != app {
		t.Errorf("container metrics %v; want the running container only", cm)
	}
	d, err := h.ListMetricDescriptors(t.Context(), &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil || len(d.Descriptors) == 0 {
		t.Errorf("ListMetricDescriptors: %d descriptors, %v", len(d.GetDescriptors()), err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ListPodSandboxMetrics: %v, want context.Canceled", err)
	}
}

func sorted(ids ...string) []string {
	slices.Sort(ids)
	return ids
}
