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

// TestKubeletEventedPLEG runs kubelet with the EventedPLEG feature gate:
// kubelet subscribes to crind's GetContainerEvents, and a container's exit
// must reach it as an event (counted in kubelet's
// evented_pleg_connection_latency_seconds), not only by relisting. Then
// it runs every scenario of TestKubelet on that node.
func TestKubeletEventedPLEG(t *testing.T) {
	n := startNodeWith(t, nodeOptions{featureGates: map[string]bool{"EventedPLEG": true}})
	const (
		gaveUp = "Evented PLEG: disabling"
		events = "kubelet_evented_pleg_connection_latency_seconds_count"
	)
	n.addPod(t, "once", map[string]any{
		"restartPolicy": "Never",
		"containers":    []any{n.ctr("main", "until [ -e /tmp/exit ]; do sleep 0.1; done; exit 0")},
	})
	n.waitRunning(t, "once")
	// Starting the pod made events; kubelet counted them, or gave up on
	// the stream.
	poll.Until(t, time.Minute, "kubelet receives crind's events, or gives up", func() (bool, string) {
		if strings.Contains(n.kubeletLog(1<<20), gaveUp) {
			return true, ""
		}
		return n.metric(t, events) > 0, "no event counted"
	})
	if log := n.kubeletLog(1 << 20); strings.Contains(log, gaveUp) {
		line := log[strings.Index(log, gaveUp):]
		line, _, _ = strings.Cut(line, "\n")
		t.Fatalf("kubelet gave up on crind's GetContainerEvents and relies on relisting: %s", line)
	}
	before := n.metric(t, events)
	if _, err := n.runIn(n.podName("once"), "main", "touch /tmp/exit"); err != nil {
		t.Fatal(err)
	}
	n.waitPod(t, "once", time.Minute, "Succeeded", func(p *pod) bool { return p.Status.Phase == "Succeeded" })
	poll.Until(t, 30*time.Second, "container events counted by kubelet", func() (bool, string) {
		got := n.metric(t, events)
		return got > before, fmt.Sprintf("events %v, %v before the exit", got, before)
	})
	// Everything else works the same with events on.
	n.removePod("once")
	kubeletScenarios(t, n)
}

// metric reads one unlabelled sample from kubelet's /metrics; 0 if absent.
func (n *node) metric(t *testing.T, name string) float64 {
	t.Helper()
	b, err := n.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	return 0
}
