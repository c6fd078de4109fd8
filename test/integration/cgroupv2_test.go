//go:build integration

package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/test/poll"
)

// TestCgroupV2Files checks the cgroup v2 files of a container as kubelet
// and an NRI plugin size it on a v2 node, read inside the container (its
// own cgroup namespace; after the update, on the host): cpu.max, cpu.weight from kubelet's CPU shares,
// cpuset.cpus and .mems, memory.max, memory.high from the unified map
// (kubelet's MemoryQoS), memory.swap.max from the swap limit (NodeSwap),
// hugetlb.2MB.max from a hugepage limit, pids.max and, from a block I/O
// class a plugin assigns, io.weight (io.bfq.weight where BFQ drives the
// disk) and io.max. Then UpdateContainerResources changes them on the
// running container (the hugepage limit too, which runc's update does not
// take and crind writes itself), and UpdatePodSandboxResources changes the limits of
// the pod's infra container.
func TestCgroupV2Files(t *testing.T) {
	runsOn(t, oci, shimv2)
	if !cgroupV2() {
		t.Skip("cgroup v2 only: this host is cgroup v1 or hybrid, where io.weight, io.max, memory.high, memory.swap.max and hugetlb.<size>.max do not exist")
	}
	disk, devnum := wholeDisk()
	hugetlb := hugetlb2MB()
	n := newNRISetup(t)
	res := &api.LinuxResources{Pids: &api.LinuxPids{Limit: 123}}
	extra := ""
	if disk != "" {
		res.BlockioClass = api.String("gold")
		extra = fmt.Sprintf("\n[cri.blockio_classes.gold]\nweight = 500\nthrottle_read_bps = [\"%[1]s:1048576\"]\nthrottle_write_iops = [\"%[1]s:200\"]\n", disk)
	} else {
		t.Log("no whole disk in /sys/block: io.weight and io.max are not checked")
	}
	n.install(t, "10", "classes", pluginConfig{Rules: []pluginRule{{
		Event: "CreateContainer", Container: "v2",
		Adjust: protoJSON(t, &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: res}}),
	}}})
	// The plugin's adjustment is what is checked, not its speed: in the
	// node lane's emulated guest on a loaded host its RunPodSandbox took
	// over the harness's 2 s, and crind rightly disconnected it, so the
	// pids and block I/O limits it sets never came (a CI rehearsal,
	// 2026-11-28).
	extra += "\n" + contractSlowPlugin("10-classes")
	d := nriDaemon(t, n, extra)
	waitConfigured(t, d, n, "10-classes")
	ref, _ := busybox(t)
	d.pull(t, ref)

	podCfg := podConfig("v2")
	// A shared PID namespace gives the pod an infra container on every
	// handler, whose limits UpdatePodSandboxResources changes.
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
	}
	podCfg.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 100000, CpuShares: 1024, MemoryLimitInBytes: 128 << 20}
	pod := d.runPod(t, podCfg)

	cfg := containerConfig("v2", ref, "sleep", "100000")
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512,
		MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 96 << 20,
		CpusetCpus: "0", CpusetMems: "0",
		Unified: map[string]string{"memory.high": strconv.Itoa(48 << 20)},
	}
	if hugetlb {
		cfg.Linux.Resources.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}
	}
	id := d.runContainer(t, pod, podCfg, cfg)
	// The container's cgroup is its own (a scope in the pod's slice under
	// the systemd driver), below the pod's; crun runs it one level down.
	l := cgroup.Layout{Driver: cgroup.Detect(), Parent: d.cgroup}
	podDir := cgroup.Dir(l.PodParent("", pod))
	ctrDir := cgroup.Dir(cgroup.Container(l.PodParent("", pod), id))
	own := procCgroup(t, d.containerPid(t, id))
	if own != ctrDir && !strings.HasPrefix(own, ctrDir+"/") {
		t.Errorf("container's process is in cgroup %s, want %s (in the pod's %s)", own, ctrDir, podDir)
	}
	if os.Getenv(handlerEnv) == shimv2Handler && l.Driver == cgroup.Systemd {
		// The pod's shim left crind's cgroup for a scope of its own.
		var m struct {
			ShimPid int `json:"shim_pid"`
		}
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(d.state, "shimv2", shimv2Handler, id, "meta.json"))), &m); err != nil {
			t.Fatal(err)
		}
		if got, want := procCgroup(t, m.ShimPid), "/system.slice/crin-shim-v2-"+pod+".scope"; got != want {
			t.Errorf("the pod's shim (pid %d) is in cgroup %s, want %s", m.ShimPid, got, want)
		}
	}

	want := map[string]string{
		"cpu.max":         "50000 100000",
		"cpu.weight":      weightOf(512),
		"cpuset.cpus":     "0",
		"cpuset.mems":     "0",
		"memory.max":      strconv.Itoa(64 << 20),
		"memory.high":     strconv.Itoa(48 << 20),
		"memory.swap.max": strconv.Itoa(32 << 20),
		"pids.max":        "123",
	}
	if hugetlb {
		want["hugetlb.2MB.max"] = strconv.Itoa(4 << 20)
	}
	got := d.cgroupFiles(t, id, append(slices.Collect(maps.Keys(want)), "io.weight", "io.bfq.weight", "io.max")...)
	if disk != "" {
		// runc and crun write io.bfq.weight as given where the disk's
		// scheduler is BFQ, else io.weight on its own scale (runc's
		// 1 + (w-10)*9999/990).
		if got["io.bfq.weight"] != "" && !strings.HasPrefix(got["io.bfq.weight"], "cat:") {
			want["io.bfq.weight"] = "default 500"
		} else {
			want["io.weight"] = "default 4950"
		}
		want["io.max"] = devnum + " rbps=1048576 wbps=max riops=max wiops=200"
	}
	checkCgroupFiles(t, "after create", got, want)
	t.Logf("the container's cgroup files: %q", got)

	upd := &runtimeapi.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 150000, CpuShares: 2048,
		MemoryLimitInBytes: 96 << 20, MemorySwapLimitInBytes: 160 << 20,
		CpusetCpus: "0", CpusetMems: "0",
		Unified: map[string]string{"memory.high": strconv.Itoa(72 << 20)},
	}
	if goruntime.NumCPU() > 1 {
		upd.CpusetCpus = "0-1"
	}
	if hugetlb {
		// runc's update takes no huge page limits: crind writes them.
		upd.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 8 << 20}}
	}
	if _, err := d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: upd}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	want = map[string]string{
		"cpu.max":         "150000 100000",
		"cpu.weight":      weightOf(2048),
		"cpuset.cpus":     upd.CpusetCpus,
		"memory.max":      strconv.Itoa(96 << 20),
		"memory.high":     strconv.Itoa(72 << 20),
		"memory.swap.max": strconv.Itoa(64 << 20),
		"pids.max":        "123",
	}
	if hugetlb {
		want["hugetlb.2MB.max"] = strconv.Itoa(8 << 20)
	}
	// Read on the host this time (the cgroup the container sees as its
	// root): an exec costs seconds under emulation.
	checkCgroupFiles(t, "after UpdateContainerResources", readCgroupFiles(filepath.Join("/sys/fs/cgroup", own), slices.Collect(maps.Keys(want))...), want)

	infra := d.infraCgroup(t, pod)
	checkCgroupFiles(t, "infra container after RunPodSandbox", readCgroupFiles(filepath.Join("/sys/fs/cgroup", infra), "memory.max", "cpu.max"),
		map[string]string{"memory.max": strconv.Itoa(128 << 20), "cpu.max": "100000 100000"})
	if _, err := d.rs.UpdatePodSandboxResources(ctxT(t), &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: pod,
		Resources:    &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 150000, CpuShares: 1536, MemoryLimitInBytes: 256 << 20},
	}); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	checkCgroupFiles(t, "infra container after UpdatePodSandboxResources", readCgroupFiles(filepath.Join("/sys/fs/cgroup", infra), "memory.max", "cpu.max"),
		map[string]string{"memory.max": strconv.Itoa(256 << 20), "cpu.max": "150000 100000"})

	// The pod's cgroup is crind's (the pod named no parent): gone with
	// the pod, and the container's and infra's with it.
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	for _, dir := range []string{ctrDir, infra, podDir} {
		dir = filepath.Join("/sys/fs/cgroup", dir)
		poll.Until(t, time.Minute, "cgroup "+dir+" removed with its pod", func() (bool, string) {
			_, err := os.Stat(dir)
			return errors.Is(err, fs.ErrNotExist), fmt.Sprintf("stat: %v", err)
		})
	}
}

// procCgroup is pid's cgroup v2 path, from /proc/pid/cgroup.
func procCgroup(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	rel, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok {
		t.Fatalf("/proc/%d/cgroup is %q, not cgroup v2's", pid, b)
	}
	return rel
}

// weightOf is cpu.weight for kubelet's CPU shares as the runtime under
// test maps them: runc's (and crun's before 1.23) 1 + (s-2)*9999/262142,
// or, for runtimes that took the newer curve kubelet documents for
// cgroup v2, ceil(10^((l^2 + 125l)/612 - 7/34)) with l = log2(s). Both
// are given, "a|b", for checkCgroupFiles.
func weightOf(shares uint64) string {
	linear := 1 + (shares-2)*9999/262142
	l := math.Log2(float64(shares))
	curve := uint64(math.Ceil(math.Pow(10, (l*l+125*l)/612-7.0/34)))
	return fmt.Sprintf("%d|%d", linear, curve)
}

// checkCgroupFiles compares files read by cgroupFiles with want; a want
// of "a|b" takes either.
func checkCgroupFiles(t *testing.T, when string, got, want map[string]string) {
	t.Helper()
	for _, f := range slices.Sorted(maps.Keys(want)) {
		if !slices.Contains(strings.Split(want[f], "|"), got[f]) {
			t.Errorf("%s: %s = %q, want %q", when, f, got[f], want[f])
		}
	}
}

// cgroupFiles reads the named files of container id's own cgroup from
// inside it, in one exec: name to content, lines joined by "; ", or
// "cat: ..." when it cannot be read.
func (d *daemon) cgroupFiles(t *testing.T, id string, names ...string) map[string]string {
	t.Helper()
	script := `cd /sys/fs/cgroup && for f; do printf '%s\t' "$f"; cat "$f" 2>&1 | tr '\n' '\v'; echo; done`
	out := d.execOut(t, id, append([]string{"sh", "-c", script, "sh"}, names...)...)
	return parseCgroupFiles(out)
}

func parseCgroupFiles(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		name, v, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		m[name] = strings.Join(strings.FieldsFunc(v, func(r rune) bool { return r == '\v' }), "; ")
	}
	return m
}

// readCgroupFiles reads files of the cgroup dir on the host, as
// cgroupFiles does inside a container.
func readCgroupFiles(dir string, names ...string) map[string]string {
	m := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			m[name] = "cat: " + err.Error()
			continue
		}
		m[name] = strings.Join(strings.Split(strings.TrimSpace(string(b)), "\n"), "; ")
	}
	return m
}

// infraCgroup is the cgroup v2 path of pod's infra process, from its pid
// in the verbose PodSandboxStatus.
func (d *daemon) infraCgroup(t *testing.T, pod string) string {
	t.Helper()
	st, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		t.Fatalf("pod %s has no infra pid in its verbose status (%v): %q", pod, err, st.GetInfo()["info"])
	}
	return procCgroup(t, info.Pid)
}

// wholeDisk returns a whole disk's /dev path and major:minor, or "" when
// there is none (io.max and per-device weights take whole disks only).
func wholeDisk() (path, devnum string) {
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "zram") || strings.HasPrefix(name, "nbd") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", name, "dev"))
		if err != nil {
			continue
		}
		if _, err := os.Stat("/dev/" + name); err != nil {
			continue
		}
		return "/dev/" + name, strings.TrimSpace(string(b))
	}
	return "", ""
}

// hugetlb2MB reports whether the host has the hugetlb controller and 2 MB
// pages (no page need be reserved to set a limit).
func hugetlb2MB() bool {
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil || !slices.Contains(strings.Fields(string(b)), "hugetlb") {
		return false
	}
	_, err = os.Stat("/sys/kernel/mm/hugepages/hugepages-2048kB")
	return err == nil
}
