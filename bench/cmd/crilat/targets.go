package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The targets of issue 12 ("Done when"), printed next to what was
// measured. crilat reports them; it asserts nothing.
const (
	targetLifecycleRatio = 0.40 // sum of the seven step p50s, crind / containerd
	targetStepSlowerMs   = 2.0  // no step's p50 slower than containerd's by more
	targetFloorRatio     = 1.15 // Create+Start p50 / runc create+start p50
	targetParallelRatio  = 0.45 // parallel start median, crind / containerd
)

// peerName is the target the first one is compared with.
const peerName = "containerd"

func printFloorAndParallel(w io.Writer, rs []*Result, fl *floor) {
	if fl != nil {
		fmt.Fprintf(w, "\n== OCI runtime floor: %s create + start on a busybox bundle, %d rounds: in place (right after a RunPodSandbox on %s, among the round's lifecycles) and back to back (after the round, with runc run)\n",
			fl.runc, fl.n, rs[0].Name)
		if fl.n > 0 {
			tableHead(w, "step (ms)", "p50", "p90", "p99", "mean")
			for _, s := range fl.stats() {
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", s.Step, f2(s.P50), f2(s.P90), f2(s.P99), f2(s.Mean))
			}
		}
		if fl.err != nil {
			fmt.Fprintf(w, "floor stopped: %v\n", fl.err)
		}
	}
	for _, r := range rs {
		if r.Parallel == nil {
			continue
		}
		p := r.Parallel
		rounds := make([]string, len(p.RoundsMs))
		for i, v := range p.RoundsMs {
			rounds[i] = f2(v)
		}
		fmt.Fprintf(w, "\n== %d pods started in parallel on %s: until all run, median %.1f ms (rounds %s ms)\n",
			p.Pods, r.Name, p.MedianMs, strings.Join(rounds, ", "))
		if p.Error != "" {
			fmt.Fprintf(w, "parallel start on %s stopped: %s\n", r.Name, p.Error)
		}
	}
}

// stepP50 is the p50 of step in r, and whether r has it.
func stepP50(r *Result, step string) (float64, bool) {
	for _, s := range r.Steps {
		if s.Step == step {
			return s.P50, true
		}
	}
	return 0, false
}

// stepSamples are the samples of step in r.
func stepSamples(r *Result, step string) []float64 {
	for _, s := range r.Steps {
		if s.Step == step {
			return s.Samples
		}
	}
	return nil
}

// p50 is the nearest-rank median of v (NaN when empty).
func p50(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	rank := max(int(math.Ceil(0.5*float64(len(s)))), 1)
	return s[rank-1]
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// printTargets prints issue 12's targets for the first result, against the
// peer's and the floor's figures where they were measured.
func printTargets(w io.Writer, rs []*Result, fl *floor) {
	me := rs[0]
	var peer *Result
	for _, r := range rs[1:] {
		if r.Name == peerName {
			peer = r
		}
	}
	if peer == nil && fl == nil {
		return // crind configurations among themselves (bench/nri.sh)
	}
	fmt.Fprintf(w, "\n== issue 12 targets, %s (reported, not asserted)\n", me.Name)
	if peer != nil {
		lifecycleTargets(w, me, peer)
	} else {
		fmt.Fprintf(w, "lifecycle and step targets: no %s result\n", peerName)
	}
	if fl != nil && fl.n > 0 {
		var both []float64
		c, s := stepSamples(me, "CreateContainer"), stepSamples(me, "StartContainer")
		for i := range min(len(c), len(s)) {
			both = append(both, c[i]+s[i])
		}
		mine := p50(both)
		for _, f := range []struct {
			key, what string
			target    bool
		}{
			{floorPlacedBoth, "floor create+start in place (after a RunPodSandbox, in the rotation)", true},
			{floorBoth, "floor create+start back to back (after the round, runc after runc)", true},
			// Not the runtime's own create+start: runc given the head
			// start crind gives its own (internal/runtime/oci/attach_prime.go).
			{floorPrimedBoth, "floor create+start in place, cgroup attach primed as crind does", false},
		} {
			if len(fl.samples[f.key]) == 0 {
				continue
			}
			floorMs := ms(percentile(sortedCopy(fl.samples[f.key]), 50))
			r := mine / floorMs
			if !f.target {
				fmt.Fprintf(w, "Create+Start p50 %.1f ms / %s p50 %.1f ms = %.2fx (not a target: what crind adds to a primed runc)\n",
					mine, f.what, floorMs, r)
				continue
			}
			fmt.Fprintf(w, "Create+Start p50 %.1f ms / %s p50 %.1f ms = %.2fx (target <= %.2fx): %s\n",
				mine, f.what, floorMs, r, targetFloorRatio, verdict(r <= targetFloorRatio))
		}
	} else {
		fmt.Fprintln(w, "Create+Start against the floor: floor not measured")
	}
	inSituFloor(w, me)
	shimRunCost(w, me, fl)
	if peer != nil && me.Parallel != nil && peer.Parallel != nil && me.Parallel.MedianMs > 0 && peer.Parallel.MedianMs > 0 {
		r := me.Parallel.MedianMs / peer.Parallel.MedianMs
		fmt.Fprintf(w, "%d pods in parallel, median %.1f ms / %s %.1f ms = %.2fx (target <= %.2fx): %s\n",
			me.Parallel.Pods, me.Parallel.MedianMs, peer.Name, peer.Parallel.MedianMs, r, targetParallelRatio, verdict(r <= targetParallelRatio))
	} else {
		fmt.Fprintln(w, "parallel start against the peer: not measured on both")
	}
}

func lifecycleTargets(w io.Writer, me, peer *Result) {
	var mine, theirs, worst float64
	worstStep := ""
	diffs := make([]string, 0, len(steps))
	for _, s := range steps {
		a, ok1 := stepP50(me, s)
		b, ok2 := stepP50(peer, s)
		if !ok1 || !ok2 {
			continue
		}
		mine += a
		theirs += b
		d := a - b
		diffs = append(diffs, fmt.Sprintf("%s %+.1f", s, d))
		if worstStep == "" || d > worst {
			worst, worstStep = d, s
		}
	}
	r := mine / theirs
	fmt.Fprintf(w, "lifecycle, sum of the 7 step p50s: %.1f ms / %s %.1f ms = %.2fx (target <= %.2fx): %s\n",
		mine, peer.Name, theirs, r, targetLifecycleRatio, verdict(r <= targetLifecycleRatio))
	fmt.Fprintf(w, "step p50, %s - %s (ms): %s\n", me.Name, peer.Name, strings.Join(diffs, ", "))
	fmt.Fprintf(w, "slowest step against %s: %s %+.1f ms (target <= +%.0f ms): %s\n",
		peer.Name, worstStep, worst, targetStepSlowerMs, verdict(worst <= targetStepSlowerMs))
}

// inSituFloor reports Create+Start against the runtime's own command on
// crind's own bundle: the runtime_run phase of StartContainer (the
// `runc run --detach` crin-shim runs, timed by the shim), as means.
func inSituFloor(w io.Writer, me *Result) {
	var create, start, run float64
	for _, r := range me.Phases {
		switch r.RPC {
		case "CreateContainer":
			create = r.MeanMs
		case "StartContainer":
			start = r.MeanMs
			for _, p := range r.Phases {
				if p.Phase == "runtime_run" {
					run = p.MeanMs
				}
			}
		}
	}
	if run <= 0 {
		return
	}
	fmt.Fprintf(w, "Create+Start mean %.1f ms / the runtime's own run on crind's bundle (StartContainer's runtime_run) mean %.1f ms = %.2fx (for the floor target, same bundle)\n",
		create+start, run, (create+start)/run)
}

// shimRunCost compares `runc run --detach` as crin-shim runs it (the
// runtime_run phase, crind's bundle) with the same command exec'd by
// crilat on the floor's bundle, as means: what running it under the shim
// costs.
func shimRunCost(w io.Writer, me *Result, fl *floor) {
	if fl == nil || len(fl.samples[floorRun]) == 0 {
		return
	}
	var run float64
	for _, r := range me.Phases {
		if r.RPC != "StartContainer" {
			continue
		}
		for _, p := range r.Phases {
			if p.Phase == "runtime_run" {
				run = p.MeanMs
			}
		}
	}
	if run <= 0 {
		return
	}
	for _, f := range []struct{ key, what string }{
		{floorPlacedRun, "runc run exec'd in place (after a RunPodSandbox, in the rotation)"},
		{floorRun, "runc run exec'd back to back (runc after runc, which makes it faster)"},
	} {
		if len(fl.samples[f.key]) == 0 {
			continue
		}
		alone := summarize(f.key, fl.samples[f.key]).Mean
		fmt.Fprintf(w, "runc run under crin-shim (runtime_run) mean %.1f ms / %s mean %.1f ms = %.2fx (not a target: what running it under the shim costs)\n",
			run, f.what, alone, run/alone)
	}
}
