package main

import (
	"strings"
	"testing"
	"time"
)

func TestInSituFloor(t *testing.T) {
	var b strings.Builder
	inSituFloor(&b, &Result{})
	if b.Len() != 0 {
		t.Errorf("printed %q without a runtime_run phase", b.String())
	}
	me := &Result{Phases: []RPCPhases{
		{RPC: "CreateContainer", MeanMs: 2},
		{RPC: "StartContainer", MeanMs: 28, Phases: []Phase{{Phase: "shim", MeanMs: 4}, {Phase: "runtime_run", MeanMs: 24}}},
	}}
	inSituFloor(&b, me)
	if !strings.Contains(b.String(), "mean 30.0 ms") || !strings.Contains(b.String(), "mean 24.0 ms = 1.25x") {
		t.Errorf("in-situ floor line %q, want 30.0 / 24.0 = 1.25x", b.String())
	}
}

func TestShimRunCost(t *testing.T) {
	me := &Result{Phases: []RPCPhases{
		{RPC: "StartContainer", MeanMs: 28, Phases: []Phase{{Phase: "shim_call", MeanMs: 1}, {Phase: "runtime_run", MeanMs: 27}}},
	}}
	var b strings.Builder
	shimRunCost(&b, me, nil)
	shimRunCost(&b, me, &floor{samples: map[string][]time.Duration{}})
	if b.Len() != 0 {
		t.Errorf("printed %q without a runc run floor", b.String())
	}
	fl := &floor{samples: map[string][]time.Duration{
		floorRun:       {18 * time.Millisecond, 18 * time.Millisecond},
		floorPlacedRun: {20 * time.Millisecond, 25 * time.Millisecond},
	}}
	shimRunCost(&b, me, fl)
	for _, want := range []string{
		"mean 27.0 ms / runc run exec'd in place (after a RunPodSandbox, in the rotation) mean 22.5 ms = 1.20x",
		"mean 27.0 ms / runc run exec'd back to back (runc after runc, which makes it faster) mean 18.0 ms = 1.50x",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("shim run cost lines %q, want %q", b.String(), want)
		}
	}
}
