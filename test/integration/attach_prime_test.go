//go:build integration

package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestAttachPriming: the oci backend primes the cgroup attach lock by
// moving the pod's crin-shim into the cgroup it is in (at CreateContainer,
// at a start, at an exec; internal/runtime/oci/attach_prime.go). On this node
// it must find the shim's cgroup files (it says "priming off" when it
// cannot), and the move must change nothing: after containers were
// created, started and exec'd in, the shim is in the cgroups it started
// in, and the containers run in theirs.
func TestAttachPriming(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("prime-" + randHex(2))
	pod := d.runPod(t, podCfg)
	first := d.runContainer(t, pod, podCfg, containerConfig("first", ref, "sleep", "3600"))
	shim := d.shimPid(t, first)
	before := procCgroups(t, shim)
	firstCgroups := procCgroups(t, d.containerPid(t, first))

	second := d.runContainer(t, pod, podCfg, containerConfig("second", ref, "sleep", "3600"))
	if got := d.execOut(t, second, "echo", "primed"); got != "primed" {
		t.Errorf("exec = %q", got)
	}
	if got := d.execOut(t, first, "echo", "primed"); got != "primed" {
		t.Errorf("exec = %q", got)
	}

	if after := procCgroups(t, shim); after != before {
		t.Errorf("the pod's shim moved between cgroups:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if after := procCgroups(t, d.containerPid(t, first)); after != firstCgroups {
		t.Errorf("a container's process moved between cgroups:\nbefore:\n%s\nafter:\n%s", firstCgroups, after)
	}
	if firstCgroups == before {
		t.Errorf("the container's process is in the shim's cgroups:\n%s", firstCgroups)
	}
	if log := d.logBuf.String(); strings.Contains(log, "cgroup attach priming off") {
		t.Errorf("crind turned the priming off on this node:\n%s", tail(log, 4000))
	}
}

// procCgroups is /proc/<pid>/cgroup.
func procCgroups(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("cgroups of pid %d: %v", pid, err)
	}
	return string(b)
}
