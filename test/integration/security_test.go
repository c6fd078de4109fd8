//go:build integration

package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statusField reads a field of /proc/self/status inside the container.
func (d *daemon) statusField(t *testing.T, id, field string) string {
	t.Helper()
	out := d.execOut(t, id, "grep", "^"+field+":", "/proc/self/status")
	return strings.TrimSpace(strings.TrimPrefix(out, field+":"))
}

// TestSecurityContext checks that the security context a user asks for is
// what the container's processes get.
func TestSecurityContext(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("secure")
	podCfg.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "80", "kernel.shmmni": "1000"}
	pod := d.runPod(t, podCfg)

	t.Run("restricted", func(t *testing.T) {
		cfg := containerConfig("restricted", ref, "sleep", "1000")
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
			RunAsGroup:         &runtimeapi.Int64Value{Value: 3000},
			SupplementalGroups: []int64{4000},
			ReadonlyRootfs:     true,
			NoNewPrivs:         true,
			Capabilities:       &runtimeapi.Capability{DropCapabilities: []string{"ALL"}, AddCapabilities: []string{"NET_BIND_SERVICE"}},
			Seccomp:            &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		}
		cfg.Linux.Resources.OomScoreAdj = -900
		id := d.runContainer(t, pod, podCfg, cfg)
		if got := d.execOut(t, id, "id", "-u"); got != "1000" {
			t.Errorf("uid %s, want 1000", got)
		}
		if got := d.execOut(t, id, "id", "-g"); got != "3000" {
			t.Errorf("gid %s, want 3000", got)
		}
		if got := d.execOut(t, id, "id", "-G"); !strings.Contains(got, "4000") {
			t.Errorf("groups %q lack 4000", got)
		}
		if r := d.exec(t, id, "touch", "/should-fail"); r.ExitCode == 0 {
			t.Errorf("read-only rootfs is writable")
		}
		if got := d.statusField(t, id, "NoNewPrivs"); got != "1" {
			t.Errorf("NoNewPrivs %s", got)
		}
		if got := d.statusField(t, id, "Seccomp"); got != "2" {
			t.Errorf("Seccomp mode %s, want 2 (filter)", got)
		}
		// Only CAP_NET_BIND_SERVICE (bit 10) is bounded.
		if got := d.statusField(t, id, "CapBnd"); got != "0000000000000400" {
			t.Errorf("CapBnd %s, want 0000000000000400", got)
		}
		own, _ := os.ReadFile("/proc/self/oom_score_adj")
		want, _ := strconv.Atoi(strings.TrimSpace(string(own)))
		if want < -900 {
			want = -900
		}
		if got := d.execOut(t, id, "cat", "/proc/self/oom_score_adj"); got != strconv.Itoa(want) {
			t.Errorf("oom_score_adj %s, want %d (clamped to crind's own)", got, want)
		}
		if got := d.execOut(t, id, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); got != "80" {
			t.Errorf("pod sysctl net.ipv4.ip_unprivileged_port_start = %s", got)
		}
		if got := d.execOut(t, id, "cat", "/proc/sys/kernel/shmmni"); got != "1000" {
			t.Errorf("pod sysctl kernel.shmmni = %s", got)
		}
		if got := d.execOut(t, id, "sh", "-c", "wc -c < /proc/timer_list"); got != "0" {
			t.Errorf("/proc/timer_list not masked: %s bytes", got)
		}
	})

	t.Run("username from image", func(t *testing.T) {
		cfg := containerConfig("named", ref, "sleep", "1000")
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "app"}
		id := d.runContainer(t, pod, podCfg, cfg)
		if got := d.execOut(t, id, "id", "-u"); got != "1000" {
			t.Errorf("run_as_username app: uid %s, want 1000", got)
		}
	})

	t.Run("privileged", func(t *testing.T) {
		cfg := containerConfig("priv", ref, "sleep", "1000")
		cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{Privileged: true}
		podPriv := podConfig("privpod")
		podPriv.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{Privileged: true}
		ppod := d.runPod(t, podPriv)
		id := d.runContainer(t, ppod, podPriv, cfg)
		// Privileged gets every capability crind itself holds.
		if got, want := d.statusField(t, id, "CapEff"), hostCapBnd(t); got != want {
			t.Errorf("privileged CapEff %s, want the host's bounding set %s", got, want)
		}
		if got := d.statusField(t, id, "Seccomp"); got != "0" {
			t.Errorf("privileged Seccomp mode %s, want 0", got)
		}
		if r := d.exec(t, id, "ls", "/dev/kmsg"); r.ExitCode != 0 {
			t.Errorf("privileged container lacks host devices: %s", r.Stderr)
		}
	})
}

func hostCapBnd(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return ""
}
