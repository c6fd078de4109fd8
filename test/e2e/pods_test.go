//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"testing"

	"github.com/crin-dev/crin/test/poll"
)

// The parts of a v1.Pod (as kubelet's /pods and /runningpods serve it) the
// tests read.
type podList struct {
	Items []pod `json:"items"`
}

type pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name  string `json:"name"`
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
	Status podStatus `json:"status"`
}

type podStatus struct {
	Phase      string `json:"phase"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	PodIP      string `json:"podIP"`
	HostIP     string `json:"hostIP"`
	Conditions []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"conditions"`
	ContainerStatuses     []containerStatus `json:"containerStatuses"`
	InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
}

type containerStatus struct {
	Name         string `json:"name"`
	Ready        bool   `json:"ready"`
	Started      *bool  `json:"started"`
	RestartCount int    `json:"restartCount"`
	ContainerID  string `json:"containerID"`
	User         *struct {
		Linux *struct {
			UID                int64   `json:"uid"`
			GID                int64   `json:"gid"`
			SupplementalGroups []int64 `json:"supplementalGroups"`
		} `json:"linux"`
	} `json:"user"`
	ImageID   string         `json:"imageID"`
	State     containerState `json:"state"`
	LastState containerState `json:"lastState"`
}

type containerState struct {
	Waiting *struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"waiting"`
	Running *struct {
		StartedAt string `json:"startedAt"`
	} `json:"running"`
	Terminated *struct {
		ExitCode int    `json:"exitCode"`
		Reason   string `json:"reason"`
		Message  string `json:"message"`
	} `json:"terminated"`
}

func (s containerState) String() string {
	switch {
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ": " + s.Waiting.Message + ")"
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s, %d)", s.Terminated.Reason, s.Terminated.ExitCode)
	}
	return "none"
}

func (p *pod) container(name string) *containerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func (p *pod) condition(typ string) string {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// summary is a one-line account of a pod's state for failure messages.
func (p *pod) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s", p.Status.Phase)
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, " reason=%s (%s)", p.Status.Reason, p.Status.Message)
	}
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " %s[%s ready=%v restarts=%d]", c.Name, c.State, c.Ready, c.RestartCount)
	}
	return b.String()
}

// podName is the name kubelet gives the static pod of manifest name.
func (n *node) podName(name string) string { return name + "-" + n.name }

// pods reads kubelet's /pods: every pod it was given, static pods with
// their status.
func (n *node) pods() ([]pod, error) {
	b, err := n.get("/pods")
	if err != nil {
		return nil, err
	}
	var l podList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decode /pods: %w", err)
	}
	return l.Items, nil
}

// runningPods reads kubelet's /runningpods: the pods it sees in the runtime.
func (n *node) runningPods() ([]pod, error) {
	b, err := n.get("/runningpods/")
	if err != nil {
		return nil, err
	}
	var l podList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decode /runningpods: %w", err)
	}
	return l.Items, nil
}

// pod returns the static pod of manifest name from /pods, nil when kubelet
// does not have it.
func (n *node) pod(name string) (*pod, error) {
	ps, err := n.pods()
	if err != nil {
		return nil, err
	}
	for i := range ps {
		if ps[i].Metadata.Name == n.podName(name) {
			return &ps[i], nil
		}
	}
	return nil, nil
}

// waitPod polls /pods until cond holds for the pod of manifest name and
// returns it.
func (n *node) waitPod(t *testing.T, name string, d time.Duration, what string, cond func(*pod) bool) *pod {
	t.Helper()
	var got *pod
	poll.Until(t, d, name+": "+what, func() (bool, string) {
		p, err := n.pod(name)
		if err != nil {
			return false, err.Error()
		}
		if p == nil {
			return false, "not in /pods"
		}
		got = p
		return cond(p), p.summary()
	})
	return got
}

// waitRunning waits for every container of the pod to run and be ready.
func (n *node) waitRunning(t *testing.T, name string) *pod {
	t.Helper()
	return n.waitPod(t, name, 2*time.Minute, "Running and Ready", func(p *pod) bool {
		return p.Status.Phase == "Running" && p.condition("Ready") == "True"
	})
}

// manifest is a pod manifest with one busybox container per entry of
// containers, each a map that may override anything.
func (n *node) manifest(name string, spec map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}
}

// ctr is a busybox container running sh -c script.
func (n *node) ctr(name, script string) map[string]any {
	return map[string]any{
		"name":            name,
		"image":           n.image,
		"imagePullPolicy": "IfNotPresent",
		"command":         []string{"sh", "-c", script},
	}
}

// addPod writes the manifest into the static pod dir (atomically: kubelet
// never reads half a file) and removes it when the test ends.
func (n *node) addPod(t *testing.T, name string, spec map[string]any) {
	t.Helper()
	if _, ok := spec["terminationGracePeriodSeconds"]; !ok {
		spec["terminationGracePeriodSeconds"] = 2
	}
	b, err := json.MarshalIndent(n.manifest(name, spec), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(n.base, name+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, n.manifestPath(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.removePod(name) })
}

func (n *node) manifestPath(name string) string {
	return filepath.Join(n.manifests, name+".json")
}

// removePod removes the manifest; kubelet then stops the pod.
func (n *node) removePod(name string) {
	_ = os.Remove(n.manifestPath(name))
}
