package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what "crilat run" measured on one runtime.
type Result struct {
	Name    string      `json:"name"`
	Runtime string      `json:"runtime"` // from the CRI Version call
	Date    string      `json:"date"`
	N       int         `json:"n"`
	K       int         `json:"k"`
	Warmup  int         `json:"warmup"`
	PullMs  float64     `json:"pull_ms"`
	Steps   []StepStats `json:"steps"`
	Memory  Memory      `json:"memory"`
	// Phases is crind's phase trace over the timed lifecycles.
	Phases   []RPCPhases    `json:"phases,omitempty"`
	Parallel *ParallelStats `json:"parallel,omitempty"`
}

// StepStats summarizes the samples of one step, in milliseconds.
type StepStats struct {
	Step string  `json:"step"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	Max  float64 `json:"max_ms"`
	// Samples are the durations in the order the lifecycles ran, so that
	// runtimes measured in the same rounds can be compared lifecycle by
	// lifecycle (see added).
	Samples []float64 `json:"samples_ms,omitempty"`
}

func summarize(step string, d []time.Duration) StepStats {
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	st := StepStats{Step: step}
	if len(s) == 0 {
		return st
	}
	for _, v := range d {
		st.Samples = append(st.Samples, ms(v))
	}
	st.P50 = ms(percentile(s, 50))
	st.P90 = ms(percentile(s, 90))
	st.P99 = ms(percentile(s, 99))
	st.Mean = ms(sum / time.Duration(len(s)))
	st.Max = ms(s[len(s)-1])
	return st
}

// percentile is the nearest-rank percentile of sorted, which is not empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}

func printResult(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\n== %s (%s): %d lifecycles after %d warm-up, image pull %.1f ms\n", r.Name, r.Runtime, r.N, r.Warmup, r.PullMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tp50 ms\tp90 ms\tp99 ms\tmean ms\tmax ms\t")
	for _, s := range r.Steps {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", s.Step, s.P50, s.P90, s.P99, s.Mean, s.Max)
	}
	_ = tw.Flush()
	if r.K == 0 {
		return
	}
	m := r.Memory
	fmt.Fprintf(w, "memory (KiB): daemon idle RSS %d PSS %d; with %d pods RSS %d PSS %d\n",
		m.DaemonIdle.RSS, m.DaemonIdle.PSS, r.K, m.DaemonLoaded.RSS, m.DaemonLoaded.PSS)
	fmt.Fprintf(w, "              %d shims, each RSS %d PSS %d; shims per pod RSS %d PSS %d; runtime cost per pod RSS %d PSS %d\n",
		m.Shims, m.ShimAvg.RSS, m.ShimAvg.PSS, m.ShimPerPod.RSS, m.ShimPerPod.PSS, m.PerPod.RSS, m.PerPod.PSS)
	fmt.Fprintf(w, "              %d infra processes; infra per pod RSS %d PSS %d\n", m.Infra, m.InfraPerPod.RSS, m.InfraPerPod.PSS)
}

// compareCmd prints the results in the files given, side by side, as a
// Markdown table (readable in a terminal, pasteable into bench/README.md),
// and with -baseline the latency each adds to the baseline's.
func compareCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	baseline := fs.String("baseline", "", "name of the result the others' added latency is computed against")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("name at least one result file")
	}
	var rs []*Result
	for _, p := range fs.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read result: %w", err)
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("decode %s: %w", p, err)
		}
		rs = append(rs, &r)
	}
	compare(os.Stdout, rs)
	if *baseline != "" {
		return added(os.Stdout, rs, *baseline)
	}
	return nil
}

// tableHead prints the header of a Markdown table, numbers right-aligned.
func tableHead(w io.Writer, cols ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cols, " | "))
	sep := make([]string, len(cols))
	for i := range sep {
		sep[i] = "---"
		if i > 0 {
			sep[i] += ":"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
}

func compare(w io.Writer, rs []*Result) {
	head := func(cols ...string) { tableHead(w, cols...) }
	fmt.Fprintln(w)
	for _, r := range rs {
		fmt.Fprintf(w, "- %s: %s, N=%d lifecycles (after %d warm-up), K=%d pods, %s\n", r.Name, r.Runtime, r.N, r.Warmup, r.K, r.Date)
	}
	fmt.Fprintln(w)
	cols := []string{"step (ms)"}
	for _, r := range rs {
		cols = append(cols, r.Name+" p50", r.Name+" p90", r.Name+" p99")
	}
	head(cols...)
	for i, s := range rs[0].Steps {
		row := []string{s.Step}
		for _, r := range rs {
			if i < len(r.Steps) && r.Steps[i].Step == s.Step {
				st := r.Steps[i]
				row = append(row, f2(st.P50), f2(st.P90), f2(st.P99))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	if !slices.ContainsFunc(rs, func(r *Result) bool { return r.K > 0 }) {
		return
	}
	fmt.Fprintln(w)
	cols = []string{"memory (KiB)"}
	for _, r := range rs {
		cols = append(cols, r.Name+" RSS", r.Name+" PSS")
	}
	head(cols...)
	memRow := func(label string, get func(Memory) Mem) {
		row := []string{label}
		for _, r := range rs {
			m := get(r.Memory)
			row = append(row, fmt.Sprint(m.RSS), fmt.Sprint(m.PSS))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	memRow("daemon, idle", func(m Memory) Mem { return m.DaemonIdle })
	memRow(fmt.Sprintf("daemon, %d pods running", rs[0].K), func(m Memory) Mem { return m.DaemonLoaded })
	memRow("one shim (average)", func(m Memory) Mem { return m.ShimAvg })
	memRow("shims per pod", func(m Memory) Mem { return m.ShimPerPod })
	memRow("runtime per pod (daemon growth + shims) / K", func(m Memory) Mem { return m.PerPod })
	memRow("infra processes per pod", func(m Memory) Mem { return m.InfraPerPod })
	for _, c := range []struct {
		label string
		n     func(Memory) int
	}{{"shim processes for K pods", func(m Memory) int { return m.Shims }}, {"infra processes for K pods", func(m Memory) int { return m.Infra }}} {
		row := []string{c.label}
		for _, r := range rs {
			row = append(row, fmt.Sprint(c.n(r.Memory)), "")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

func f2(v float64) string { return fmt.Sprintf("%.1f", v) }
