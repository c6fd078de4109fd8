//go:build e2e

package e2e

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/poll"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// testSupplementalGroupsStrict runs a pod with supplementalGroupsPolicy
// Strict in an image whose /etc/group puts uid 1000 in group 5000: the
// process must get only the groups the pod names, not 5000.
func testSupplementalGroupsStrict(t *testing.T, n *node) {
	img, err := mutate.AppendLayers(imagetest.Busybox(t), imagetest.Layer(t,
		imagetest.File("etc/group", "root:x:0:\napp:x:1000:\nextra:x:5000:app\nnogroup:x:65534:\n", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	imagetest.Push(t, n.registry, "library/groups:latest", img)
	c := n.ctr("main", "exec sleep 3600")
	c["image"] = n.registry + "/library/groups:latest"
	n.addPod(t, "strict", map[string]any{
		"containers": []any{c},
		"securityContext": map[string]any{
			"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": []int{4000},
			"supplementalGroupsPolicy": "Strict",
		},
	})
	p := n.waitPod(t, "strict", 2*time.Minute, "Running, or rejected", func(p *pod) bool {
		return p.Status.Phase == "Failed" || p.Status.Phase == "Running" && p.condition("Ready") == "True"
	})
	if p.Status.Phase == "Failed" {
		if strings.Contains(p.Status.Reason, "SupplementalGroupsPolicy") {
			t.Fatalf("kubelet rejects the pod: crind's Status must report the supplemental_groups_policy feature: %s: %s", p.Status.Reason, p.Status.Message)
		}
		t.Fatalf("pod failed: %s", p.summary())
	}
	out, err := n.runIn(n.podName("strict"), "main", "id -G")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); strings.Join(got, ",") != "3000,4000" {
		t.Errorf("groups %v, want only 3000 and 4000 (no 5000 from the image's /etc/group)", got)
	}
	if u := p.container("main").User; u == nil || u.Linux == nil {
		t.Errorf("kubelet reports no effective user for the container (crind's ContainerStatus.user is empty)")
	} else if u.Linux.UID != 1000 || u.Linux.GID != 3000 {
		t.Errorf("reported user %+v, want uid 1000 gid 3000", *u.Linux)
	}
}

// testStatsRootfs writes 5 MiB into a container's writable layer: kubelet's
// /stats/summary must count it in the container's rootfs and the pod's
// ephemeral storage.
func testStatsRootfs(t *testing.T, n *node) {
	const wrote = 5 << 20
	n.addPod(t, "filler", map[string]any{"containers": []any{
		n.ctr("main", "head -c 5242880 /dev/urandom > /fill; exec sleep 3600"),
	}})
	n.waitRunning(t, "filler")
	var (
		ps   *podStats
		last string
	)
	if ok, _ := poll.Within(2*time.Minute, func() (bool, string) {
		b, err := n.get("/stats/summary")
		if err != nil {
			t.Fatal(err)
		}
		var s statsSummary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if ps = s.pod(n.podName("filler")); ps != nil && len(ps.Containers) == 1 {
			b, _ := json.Marshal(ps)
			last = string(b)
			r, e := ps.Containers[0].Rootfs, ps.EphemeralStorage
			return r != nil && r.UsedBytes != nil && *r.UsedBytes >= wrote && e != nil && e.UsedBytes != nil && *e.UsedBytes >= wrote, ""
		}
		return false, ""
	}); ok {
		return
	}
	if ps == nil || len(ps.Containers) != 1 {
		t.Fatalf("/stats/summary never listed the pod")
	}
	t.Errorf("a pod that wrote %d bytes into its rootfs: %s; want at least that in container rootfs and pod ephemeral-storage", wrote, last)
}

// testStatsFields checks that /stats/summary has every field kubelet fills
// for containerd: container CPU rate, working set, rootfs bytes and inodes;
// pod CPU rate, working set, network rx/tx and ephemeral storage.
func testStatsFields(t *testing.T, n *node) {
	n.addPod(t, "busy", map[string]any{"containers": []any{
		// A little CPU all the time (a rate of zero would look missing),
		// and some memory held.
		n.ctr("main", "head -c 8388608 /dev/zero > /dev/shm/held; while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.5; done"),
	}})
	p := n.waitRunning(t, "busy")
	// Some traffic into the pod's network namespace (refused, but counted).
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(p.Status.PodIP, "1"), 2*time.Second); err == nil {
		c.Close()
	}
	// Kubelet computes rates from two samples and refreshes cAdvisor's
	// every 10s or so: give it a minute to fill everything.
	var (
		missing = []string{"the pod"}
		last    string
	)
	poll.Within(time.Minute, func() (bool, string) {
		b, err := n.get("/stats/summary")
		if err != nil {
			t.Fatal(err)
		}
		var s statsSummary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if ps := s.pod(n.podName("busy")); ps != nil && len(ps.Containers) == 1 {
			missing = missingStats(ps)
			b, _ := json.Marshal(ps)
			last = string(b)
		}
		return len(missing) == 0, ""
	})
	if len(missing) == 1 && missing[0] == "the pod" {
		t.Fatalf("/stats/summary never listed the pod")
	}
	t.Logf("pod stats: %s", last)
	if len(missing) == 1 && missing[0] == "pod network" && !n.opts.featureGates["PodAndContainerStatsFromCRI"] {
		// Without the gate kubelet asks cAdvisor for the pod's network,
		// and cAdvisor attributes network namespaces only to runtimes it
		// knows (docker, containerd, CRI-O); TestKubeletCRIStats checks
		// crind's own figures through the CRI stats path.
		t.Skipf("pod network comes from cAdvisor on this path, which does not know crind: see TestKubeletCRIStats")
	}
	if len(missing) > 0 {
		t.Errorf("/stats/summary fields empty or zero: %s", strings.Join(missing, ", "))
	}
}

// missingStats names the fields of ps that are absent or zero.
func missingStats(ps *podStats) []string {
	var out []string
	zero := func(name string, v *uint64) {
		if v == nil || *v == 0 {
			out = append(out, name)
		}
	}
	c := ps.Containers[0]
	zero("container cpu.usageNanoCores", c.CPU.UsageNanoCores)
	zero("container memory.workingSetBytes", c.Memory.WorkingSetBytes)
	if c.Rootfs == nil {
		out = append(out, "container rootfs")
	} else {
		zero("container rootfs.usedBytes", c.Rootfs.UsedBytes)
		zero("container rootfs.inodesUsed", c.Rootfs.InodesUsed)
	}
	zero("pod cpu.usageNanoCores", ps.CPU.UsageNanoCores)
	zero("pod memory.workingSetBytes", ps.Memory.WorkingSetBytes)
	if ps.Network == nil {
		out = append(out, "pod network")
	} else {
		zero("pod network.rxBytes", ps.Network.RxBytes)
		zero("pod network.txBytes", ps.Network.TxBytes)
	}
	if ps.EphemeralStorage == nil {
		out = append(out, "pod ephemeral-storage")
	} else {
		zero("pod ephemeral-storage.usedBytes", ps.EphemeralStorage.UsedBytes)
	}
	return out
}
