//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/test/poll"
)

// memoryDir is where cgroup rel's memory controller files are: the
// memory hierarchy of a v1 (or hybrid) host, the one tree of a v2 host.
func memoryDir(rel string) (dir, limitFile string) {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return filepath.Join("/sys/fs/cgroup", cgroup.Dir(rel)), "memory.max"
	}
	return filepath.Join("/sys/fs/cgroup/memory", cgroup.Dir(rel)), "memory.limit_in_bytes"
}

// TestCgroupDriver checks crind's cgroups in the form of the driver it
// picks on this host (cgroupfs on a v1 or hybrid host, systemd where
// systemd is PID 1 on cgroup v2): RuntimeConfig tells kubelet that driver;
// a cgroup parent in the other form, or one climbing out with "..", is
// refused and makes nothing; a kubelet-style parent and crind's own both
// hold the container's cgroup with its limit, which stats read, and
// removing the pod removes the cgroups crind or the runtime made.
func TestCgroupDriver(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	l := cgroup.Layout{Driver: cgroup.Detect(), Parent: d.cgroup}
	rc, err := d.rs.RuntimeConfig(ctxT(t), &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := runtimeapi.CgroupDriver_CGROUPFS
	if l.Driver == cgroup.Systemd {
		want = runtimeapi.CgroupDriver_SYSTEMD
	}
	if got := rc.GetLinux().GetCgroupDriver(); got != want {
		t.Errorf("RuntimeConfig cgroup driver %v, want %v on this host", got, want)
	}

	other := "kubepods-besteffort-podx.slice"
	if l.Driver == cgroup.Systemd {
		other = "/kubepods/besteffort/podx"
	}
	escape := "/../../../../tmp/crinescape" + randHex(3)
	for _, parent := range []string{escape, other, "relative/kubepods"} {
		cfg := podConfig("badparent")
		cfg.Linux.CgroupParent = parent
		_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), "cgroup_parent") || !strings.Contains(err.Error(), parent) {
			t.Errorf("cgroup parent %q: %v, want InvalidArgument naming cgroup_parent and the value", parent, err)
		}
	}
	if made, _ := filepath.Glob("/sys/fs/cgroup/*/tmp/crinescape*"); len(made) > 0 {
		t.Errorf("a refused cgroup parent made cgroups: %v", made)
	}
	if pods, _ := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{}); len(pods.GetItems()) != 0 {
		t.Errorf("refused pods are listed: %v", pods.GetItems())
	}

	ref, _ := busybox(t)
	d.pull(t, ref)
	cases := []struct{ name, parent string }{
		{"kubelet's parent", filepath.Join(d.cgroup, "kubepods", "pod"+randHex(4))},
		{"crind's own parent", ""},
	}
	if l.Driver == cgroup.Systemd {
		// kubelet sends the slice's path; a slice's name is taken too.
		slice := strings.TrimSuffix(d.cgroup, ".slice") + "-pod" + randHex(4) + ".slice"
		cases[0].parent = cgroup.ExpandSlice(slice)
		cases = append(cases, struct{ name, parent string }{"a slice's name", strings.TrimSuffix(d.cgroup, ".slice") + "-pod" + randHex(4) + ".slice"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			podCfg := podConfig("cg")
			podCfg.Linux.CgroupParent = tc.parent
			pod := d.runPod(t, podCfg)
			cfg := containerConfig("limited", ref, "sleep", "1000")
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}
			id := d.runContainer(t, pod, podCfg, cfg)

			parent := l.PodParent(tc.parent, pod)
			dir, limit := memoryDir(cgroup.Container(parent, id))
			if b, err := os.ReadFile(filepath.Join(dir, limit)); err != nil || strings.TrimSpace(string(b)) != "67108864" {
				t.Errorf("container cgroup %s: %s = %q (%v), want 67108864", dir, limit, b, err)
			}
			st, err := d.rs.ContainerStats(ctxT(t), &runtimeapi.ContainerStatsRequest{ContainerId: id})
			if err != nil || st.GetStats().GetMemory().GetWorkingSetBytes().GetValue() == 0 {
				t.Errorf("ContainerStats: %v, %v: want a working set read from %s", st, err, dir)
			}
			if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
				t.Fatal(err)
			}
			gone := []string{dir}
			if tc.parent == "" {
				podDir, _ := memoryDir(parent)
				gone = append(gone, podDir)
			}
			for _, g := range gone {
				poll.Until(t, 30*time.Second, "cgroup "+g+" removed with its pod", func() (bool, string) {
					_, err := os.Stat(g)
					return os.IsNotExist(err), "still there"
				})
			}
			// kubelet removes the pod cgroup it made itself.
			if tc.parent != "" {
				removeKubeletParent(l.PodParent(tc.parent, pod))
			}
		})
	}
}

// removeKubeletParent removes a pod cgroup parent as kubelet does after
// the pod is gone: its slice stopped, or its directories removed.
func removeKubeletParent(parent string) {
	if cgroup.IsSlice(parent) {
		_ = exec.Command("systemctl", "stop", parent).Run()
		return
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", parent))
	for _, dir := range dirs {
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir))
	}
}
