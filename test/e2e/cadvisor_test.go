//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/poll"
)

// cadvisorSample is the value of the first /metrics/cadvisor sample of
// name whose labels include every label="value" of want; ok is false when
// there is none.
func cadvisorSample(body []byte, name string, want ...string) (v float64, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), name+"{")
		if !found {
			continue
		}
		labels, value, found := strings.Cut(rest, "} ")
		if !found {
			continue
		}
		match := true
		for _, w := range want {
			match = match && strings.Contains(","+labels+",", ","+w+",")
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		return f, err == nil
	}
	return 0, false
}

// testCadvisorMetrics checks kubelet's /metrics/cadvisor, which the CRI
// stats gate fills from crind's ListPodSandboxMetrics, against what a
// pod's containers did: a busy loop under a 100m CPU limit holding ten
// files after writing 4 MiB into its root filesystem, and a process killed
// for memory in another container.
func testCadvisorMetrics(t *testing.T, n *node) {
	busy := n.ctr("main", "head -c 4194304 /dev/zero > /fill; "+
		"exec 3</dev/null 4</dev/null 5</dev/null 6</dev/null 7</dev/null 8</dev/null 9</dev/null; while :; do :; done")
	busy["resources"] = map[string]any{"limits": map[string]any{"cpu": "100m", "memory": "64Mi"}}
	oom := n.ctr("oom", "dd if=/dev/zero of=/dev/null bs=64M count=1; exec sleep 3600")
	oom["resources"] = map[string]any{"limits": map[string]any{"cpu": "100m", "memory": "32Mi"}}
	n.addPod(t, "cadvisor", map[string]any{"containers": []any{busy, oom}})
	p := n.waitRunning(t, "cadvisor")
	podLabel := `pod="` + n.podName("cadvisor") + `"`
	main, oomer := []string{`container="main"`, podLabel}, []string{`container="oom"`, podLabel}

	type check struct {
		name   string
		labels []string
		ok     func(float64) bool
		want   string
	}
	checks := []check{
		{"container_cpu_cfs_throttled_periods_total", main, func(v float64) bool { return v >= 5 }, ">= 5"},
		{"container_spec_cpu_quota", main, func(v float64) bool { return v == 10000 }, "10000 (100m of a 100ms period)"},
		{"container_spec_memory_limit_bytes", main, func(v float64) bool { return v == 64<<20 }, "64 MiB"},
		{"container_file_descriptors", main, func(v float64) bool { return v == 10 }, "10 (0-9)"},
		{"container_threads", main, func(v float64) bool { return v == 1 }, "1"},
		{"container_fs_usage_bytes", main, func(v float64) bool { return v >= 4<<20 }, ">= 4 MiB"},
		{"container_oom_events_total", oomer, func(v float64) bool { return v == 1 }, "1"},
		{"container_memory_usage_bytes", []string{`container=""`, podLabel}, func(v float64) bool { return v > 0 }, "> 0 (the pod's cgroup)"},
	}
	var body []byte
	var bad []string
	poll.Until(t, 2*time.Minute, "/metrics/cadvisor shows what the pod did", func() (bool, string) {
		var err error
		if body, err = n.get("/metrics/cadvisor"); err != nil {
			t.Fatal(err)
		}
		bad = bad[:0]
		for _, c := range checks {
			if v, ok := cadvisorSample(body, c.name, c.labels...); !ok || !c.ok(v) {
				bad = append(bad, fmt.Sprintf("%s{%s} = %v (reported %v), want %s", c.name, strings.Join(c.labels, ","), v, ok, c.want))
			}
		}
		return len(bad) == 0, strings.Join(bad, "; ")
	})

	started, err := time.Parse(time.RFC3339, p.container("main").State.Running.StartedAt)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := cadvisorSample(body, "container_start_time_seconds", main...); int64(v) != started.Unix() {
		t.Errorf("container_start_time_seconds = %v, pod status startedAt %s", v, started)
	}
}
