package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// crind's Prometheus metrics the phase trace is read from (internal/cri
// trace.go): per RPC, its latency histogram; per RPC and phase, the time
// spent in each phase of it.
const (
	rpcLatency = "crin_cri_request_duration_seconds"
	phaseTime  = "crin_cri_phase_seconds"
)

// tracedRPCs are the RPCs whose phases are reported, in lifecycle order.
var tracedRPCs = []string{
	"RunPodSandbox", "CreateContainer", "StartContainer",
	"StopContainer", "RemoveContainer", "StopPodSandbox", "RemovePodSandbox",
}

// promSample is one line of the Prometheus text exposition format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseProm reads the samples of a text exposition (version 0.0.4):
// comments and blank lines are skipped, a trailing timestamp ignored.
func parseProm(r io.Reader) ([]promSample, error) {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parsePromLine(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", n, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

func parsePromLine(line string) (promSample, error) {
	s := promSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, fmt.Errorf("%q: no value", line)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest, err := parsePromLabels(line[1:], s.labels)
		if err != nil {
			return s, fmt.Errorf("%s: %w", s.name, err)
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("%s: want a value and at most a timestamp, got %q", s.name, line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("%s: value: %w", s.name, err)
	}
	s.value = v
	return s, nil
}

// parsePromLabels reads `k="v",...}` into into and returns what follows
// the closing brace. Values may escape \\, \" and \n.
func parsePromLabels(in string, into map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.Index(in, "=\"")
		if eq <= 0 {
			return "", fmt.Errorf("labels: bad label at %q", in)
		}
		key := strings.TrimSpace(in[:eq])
		in = in[eq+2:]
		var b strings.Builder
		closed := false
		for j := 0; j < len(in); j++ {
			c := in[j]
			if c == '\\' && j+1 < len(in) {
				j++
				switch in[j] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(in[j])
				}
				continue
			}
			if c == '"' {
				in, closed = in[j+1:], true
				break
			}
			b.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("labels: unterminated value of %s", key)
		}
		into[key] = b.String()
	}
}

// scrape reads url's samples.
func scrape(ctx context.Context, url string) ([]promSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseProm(resp.Body)
}

// Phase is the mean time per call of one phase of an RPC.
type Phase struct {
	Phase  string  `json:"phase"`
	MeanMs float64 `json:"mean_ms"`
}

// RPCPhases is where the time of one RPC went between two scrapes.
type RPCPhases struct {
	RPC    string  `json:"rpc"`
	Calls  int     `json:"calls"`
	MeanMs float64 `json:"mean_ms"` // from the RPC's latency histogram
	Phases []Phase `json:"phases"`  // largest first
	// RestMs is MeanMs minus the phases: the interceptor and what follows
	// the last phase.
	RestMs float64 `json:"rest_ms"`
}

// phaseDiff computes, per traced RPC called between before and after, the
// mean time per call of each phase (the phase's added time over the RPC's
// added calls, so that the phases add up to the RPC's mean).
func phaseDiff(before, after []promSample) []RPCPhases {
	delta := map[string]float64{}
	key := func(s promSample) string { return s.name + "|" + s.labels["rpc"] + "|" + s.labels["phase"] }
	for _, s := range after {
		delta[key(s)] += s.value
	}
	for _, s := range before {
		delta[key(s)] -= s.value
	}
	var out []RPCPhases
	for _, rpc := range tracedRPCs {
		calls := delta[rpcLatency+"_count|"+rpc+"|"]
		if calls < 1 {
			continue
		}
		r := RPCPhases{RPC: rpc, Calls: int(calls), MeanMs: delta[rpcLatency+"_sum|"+rpc+"|"] * 1000 / calls}
		r.RestMs = r.MeanMs
		for _, s := range after {
			if s.name != phaseTime+"_sum" || s.labels["rpc"] != rpc {
				continue
			}
			p := Phase{Phase: s.labels["phase"], MeanMs: delta[key(s)] * 1000 / calls}
			r.Phases = append(r.Phases, p)
			r.RestMs -= p.MeanMs
		}
		slices.SortStableFunc(r.Phases, func(a, b Phase) int {
			switch {
			case a.MeanMs > b.MeanMs:
				return -1
			case a.MeanMs < b.MeanMs:
				return 1
			}
			return strings.Compare(a.Phase, b.Phase)
		})
		out = append(out, r)
	}
	return out
}

func printPhases(w io.Writer, name string, rs []RPCPhases) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== where %s's time goes (crin_cri_phase_seconds, mean ms per call over the timed lifecycles)\n", name)
	for _, r := range rs {
		parts := make([]string, 0, len(r.Phases)+1)
		for _, p := range r.Phases {
			parts = append(parts, fmt.Sprintf("%s %.2f", p.Phase, p.MeanMs))
		}
		parts = append(parts, fmt.Sprintf("unaccounted %.2f", r.RestMs))
		fmt.Fprintf(w, "%-16s %6.2f ms (%d calls): %s\n", r.RPC, r.MeanMs, r.Calls, strings.Join(parts, ", "))
	}
}
