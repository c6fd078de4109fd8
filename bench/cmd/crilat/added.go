package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// added prints, as a Markdown table, the latency each result adds to the
// one named base, per step and for the whole lifecycle:
//
//   - Δp50 and Δp90, the differences of the percentiles;
//   - paired Δ, the median over lifecycles of (this - base) for lifecycle i
//     of both. crilat runs lifecycle i of every target in the same round,
//     one right after the other, so the pair saw about the same load from
//     the rest of the machine; their difference is steadier than the
//     difference of two percentiles on a shared machine. It needs the
//     samples of both, with the same N (else "-").
//
// It fails with errdefs.ErrNotFound if no result is named base.
func added(w io.Writer, rs []*Result, base string) error {
	i := slices.IndexFunc(rs, func(r *Result) bool { return r.Name == base })
	if i < 0 {
		var names []string
		for _, r := range rs {
			names = append(names, r.Name)
		}
		return fmt.Errorf("baseline %q is none of the results %q: %w", base, names, errdefs.ErrNotFound)
	}
	b := rs[i]
	var others []*Result
	for _, r := range rs {
		if r != b {
			others = append(others, r)
		}
	}
	if len(others) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nAdded latency against %s (ms; paired Δ = median over lifecycles of this minus %s in the same round):\n\n", b.Name, b.Name)
	cols := []string{"step (ms)"}
	for _, r := range others {
		cols = append(cols, r.Name+" Δp50", r.Name+" Δp90", r.Name+" paired Δ")
	}
	tableHead(w, cols...)
	for _, bs := range b.Steps {
		row := []string{bs.Step}
		for _, r := range others {
			j := slices.IndexFunc(r.Steps, func(s StepStats) bool { return s.Step == bs.Step })
			if j < 0 {
				row = append(row, "-", "-", "-")
				continue
			}
			s := r.Steps[j]
			row = append(row, signed(s.P50-bs.P50), signed(s.P90-bs.P90), pairedDelta(bs.Samples, s.Samples))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	return nil
}

// pairedDelta is the median of s[i] - base[i], or "-" without matching
// samples.
func pairedDelta(base, s []float64) string {
	if len(base) == 0 || len(base) != len(s) {
		return "-"
	}
	d := make([]float64, len(s))
	for i := range s {
		d[i] = s[i] - base[i]
	}
	slices.Sort(d)
	rank := max(int(math.Ceil(0.5*float64(len(d)))), 1)
	return signed(d[rank-1])
}

func signed(v float64) string { return fmt.Sprintf("%+.1f", v) }
