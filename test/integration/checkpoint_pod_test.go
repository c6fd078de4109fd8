//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCheckpointPod checkpoints a pod of two counting containers with
// CheckpointPod and makes a new pod of them with RestorePod: the
// checkpoint dir holds the manifest and one checkpoint per container, the
// originals count on, RestorePod refuses a request the checkpoint does not
// match and leaves no pod, the restored containers come back CREATED and,
// once started, continue from their checkpointed counts, and the
// checkpoint dir is as CheckpointPod left it.
func TestCheckpointPod(t *testing.T) {
	runsOn(t, oci)
	requireCRIU(t)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("ckpod-" + randHex(2))
	cfgs := podCounters(ref)
	ownPIDNamespace(podCfg, cfgs...)
	pod := d.runPod(t, podCfg)
	var ids []string
	for _, c := range cfgs {
		ids = append(ids, d.runContainer(t, pod, podCfg, c))
	}
	waitLog(t, logPath(podCfg, cfgs[0]), " stdout F 3\n")
	waitLog(t, logPath(podCfg, cfgs[1]), " stdout F 1003\n")

	out := t.TempDir()
	start := time.Now()
	if _, err := d.rs.CheckpointPod(ctxT(t), &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: out, ContainerIds: ids}); err != nil {
		t.Fatalf("CheckpointPod: %v", err)
	}
	t.Logf("pod checkpoint took %v", time.Since(start).Round(time.Millisecond))
	counts := podCheckpointCounts(t, out, ids, cfgs)
	for i, c := range cfgs {
		// Left running: each counts past its checkpointed value.
		waitLog(t, logPath(podCfg, c), fmt.Sprintf(" stdout F %d\n", counts[i]+2))
	}
	before := treeOf(t, out)

	podCfg2 := podConfig("ckpod-restored-" + randHex(2))
	cfgs2 := podCounters(ref)
	ownPIDNamespace(podCfg2, cfgs2...)
	pods := d.podCount(t)
	bad := podCounters(ref)
	ownPIDNamespace(podCfg2, bad...)
	bad[1].Args = []string{"-c", "echo another process"}
	_, err := d.rs.RestorePod(ctxT(t), &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podCfg2, ContainerConfigs: bad})
	if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "container_configs[1].args") {
		t.Errorf("RestorePod with another container's args: %v; want FailedPrecondition naming container_configs[1].args", err)
	}
	if n := d.podCount(t); n != pods {
		t.Errorf("a refused RestorePod left %d pods, had %d", n, pods)
	}

	start = time.Now()
	resp, err := d.rs.RestorePod(ctxT(t), &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podCfg2, ContainerConfigs: cfgs2})
	if err != nil {
		t.Fatalf("RestorePod: %v", err)
	}
	t.Logf("RestorePod took %v", time.Since(start).Round(time.Millisecond))
	if len(resp.RestoredContainers) != len(cfgs2) {
		t.Fatalf("RestorePod returned %v, want %d containers", resp.RestoredContainers, len(cfgs2))
	}
	start = time.Now()
	for i, rc := range resp.RestoredContainers {
		if rc.Name != cfgs2[i].Metadata.Name {
			t.Errorf("restored container %d is %q, want %q", i, rc.Name, cfgs2[i].Metadata.Name)
		}
		if st := d.status(t, rc.ContainerId); st.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			t.Errorf("restored container %s is %v before its start, want CREATED", rc.Name, st.State)
		}
		d.startContainer(t, rc.ContainerId)
	}
	t.Logf("starting the restored containers took %v", time.Since(start).Round(time.Millisecond))
	for i, c := range cfgs2 {
		first := waitLog(t, logPath(podCfg2, c), " stdout F ")
		got := firstCount(t, first)
		if got < counts[i] || got > counts[i]+1 {
			t.Errorf("restored %s's first count is %d, want %d or %d (its checkpointed count; log %q)", c.Metadata.Name, got, counts[i], counts[i]+1, first)
		}
		waitLog(t, logPath(podCfg2, c), fmt.Sprintf(" stdout F %d\n", got+2))
		pid := d.containerPid(t, resp.RestoredContainers[i].ContainerId)
		if cg := procCgroup(t, pid); !strings.Contains(cg, resp.RestoredContainers[i].ContainerId) {
			t.Errorf("restored %s runs in cgroup %s, want its own", c.Metadata.Name, cg)
		}
	}
	if after := treeOf(t, out); after != before {
		t.Errorf("RestorePod changed the checkpoint:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// podCounters are two containers that count from different starts.
func podCounters(ref string) []*runtimeapi.ContainerConfig {
	return []*runtimeapi.ContainerConfig{
		containerConfig("counter-a", ref, "sh", "-c", counterScript),
		containerConfig("counter-b", ref, "sh", "-c", strings.Replace(counterScript, "i=0", "i=1000", 1)),
	}
}

// podCheckpointCounts checks the pod checkpoint in dir (its manifest names
// each container and its dir, which holds CRIU's images and a rootfs diff)
// and returns each container's count at the checkpoint, read from /count
// in its rootfs diff.
func podCheckpointCounts(t *testing.T, dir string, ids []string, cfgs []*runtimeapi.ContainerConfig) []int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "pod-checkpoint.json"))
	if err != nil {
		t.Fatalf("the pod checkpoint has no manifest: %v", err)
	}
	var m struct {
		Engine     string `json:"engine"`
		Containers []struct {
			Name, ID, Dir string
		} `json:"containers"`
	}
	if err := json.Unmarshal(b, &m); err != nil || len(m.Containers) != len(ids) || m.Engine == "" {
		t.Fatalf("manifest %s (%v): want %d containers and the engine", b, err, len(ids))
	}
	counts := make([]int, len(ids))
	for i, c := range m.Containers {
		if c.ID != ids[i] || c.Name != cfgs[i].Metadata.Name {
			t.Errorf("manifest container %d is %s %s, want %s %s", i, c.Name, c.ID, cfgs[i].Metadata.Name, ids[i])
		}
		cdir := filepath.Join(dir, c.Dir)
		for _, f := range []string{"checkpoint/inventory.img", "checkpoint/pstree.img", "config.dump", "spec.dump", "stats-dump"} {
			if _, err := os.Stat(filepath.Join(cdir, f)); err != nil {
				t.Errorf("container %s's checkpoint: %v", c.Name, err)
			}
		}
		diff := readTar(t, filepath.Join(cdir, "rootfs-diff.tar"))
		n, err := strconv.Atoi(strings.TrimSpace(string(diff["count"])))
		if err != nil {
			t.Fatalf("%s's rootfs-diff.tar count %q: %v", c.Name, diff["count"], err)
		}
		counts[i] = n
	}
	return counts
}

// treeOf lists the files under dir with their sizes and modification times.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := e.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d\n", strings.TrimPrefix(p, dir), st.Mode(), st.Size(), st.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// podCount is how many pods crind lists.
func (d *daemon) podCount(t *testing.T) int {
	t.Helper()
	l, err := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("ListPodSandbox: %v", err)
	}
	return len(l.GetItems())
}

// ckptMiBEnv, when set to a number of MiB, has TestCheckpointLarge
// measure the checkpoint and restore of a process holding that much
// memory (docs/checkpoint.md's figures; not run by default: it takes
// minutes in the node lane's VM).
const ckptMiBEnv = "CRIN_TEST_CKPT_MIB"

// TestCheckpointLarge checkpoints a container whose process holds
// $CRIN_TEST_CKPT_MIB MiB of memory and restores it in a new pod, and
// logs how long each took and how large the archive is.
func TestCheckpointLarge(t *testing.T) {
	runsOn(t, oci)
	mib, err := strconv.Atoi(os.Getenv(ckptMiBEnv))
	if err != nil || mib <= 0 {
		t.Skipf("set %s to a number of MiB to measure the checkpoint of a process that large", ckptMiBEnv)
	}
	requireCRIU(t)
	d := startDaemon(t, daemonOptions{restoreArchives: true})
	ref, _ := busybox(t)
	d.pull(t, ref)
	// busybox awk holds a string of n spaces, then counts once a second.
	script := fmt.Sprintf(`awk -v n=%d 'BEGIN{s=sprintf("%%" n "s",""); i=0; while(1){i++; print i; fflush(); system("sleep 1")}}'`, mib<<20)
	podCfg := podConfig("ckbig-" + randHex(2))
	cfg := containerConfig("big", ref, "sh", "-c", script)
	ownPIDNamespace(podCfg, cfg)
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, cfg)
	waitLog(t, logPath(podCfg, cfg), " stdout F 2\n")
	rss := d.execOut(t, id, "sh", "-c", "grep VmRSS /proc/$(pidof awk)/status")

	out := filepath.Join(t.TempDir(), "big.tar")
	start := time.Now()
	if _, err := d.rs.CheckpointContainer(ctxT(t), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: out, Timeout: 1800}); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	took := time.Since(start)
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	podCfg2 := podConfig("ckbig-restored-" + randHex(2))
	cfg2 := containerConfig("big", out, "sh", "-c", script)
	ownPIDNamespace(podCfg2, cfg2)
	pod2 := d.runPod(t, podCfg2)
	start = time.Now()
	d.runContainer(t, pod2, podCfg2, cfg2)
	restored := time.Since(start)
	first := firstCount(t, waitLog(t, logPath(podCfg2, cfg2), " stdout F "))
	t.Logf("a process of %s (%d MiB asked): checkpoint %v, archive %d MiB, restore (create and start) %v, first count after it %d",
		strings.TrimSpace(strings.TrimPrefix(rss, "VmRSS:")), mib, took.Round(100*time.Millisecond), st.Size()>>20, restored.Round(100*time.Millisecond), first)
}
