package main

import (
	"strings"
	"testing"
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
