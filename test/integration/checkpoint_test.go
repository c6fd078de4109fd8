//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
)

// TestCheckpointRefusals checks what crind says to checkpoint and restore
// requests: bad requests name the field, and where CRIU does not work on
// this host (Debian 12's criu 3.17 on a kernel from 6.13 on) the request is
// FailedPrecondition with CRIU's reason, the container keeps running and
// nothing is written. Where CRIU works, TestCheckpointContainer checks the
// checkpoint itself.
func TestCheckpointRefusals(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("ckpt")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("counter", ref, "sh", "-c", "i=0; while true; do i=$((i+1)); echo $i; sleep 1; done"))
	out := filepath.Join(t.TempDir(), "ckpt.tar")

	for _, tc := range []struct {
		req  *runtimeapi.CheckpointContainerRequest
		code string
		want string
	}{
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id}, "InvalidArgument", "location"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "rel.tar"}, "InvalidArgument", "location"},
		{&runtimeapi.CheckpointContainerRequest{Location: out}, "InvalidArgument", "container_id"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: strings.Repeat("0e", 32), Location: out}, "NotFound", "0e0e"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: "nope", Location: out}, "InvalidArgument", "nope"},
	} {
		_, err := d.rs.CheckpointContainer(ctx, tc.req)
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointContainer(%v): %v; want %s naming %s", tc.req, err, tc.code, tc.want)
		}
	}

	for _, tc := range []struct {
		req  *runtimeapi.CheckpointContainerRequest
		want string
	}{
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: "/nonexistent-dir/ckpt.tar"}, "its directory does not exist"},
		{&runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: out, Timeout: -1}, "timeout -1"},
	} {
		_, err := d.rs.CheckpointContainer(ctx, tc.req)
		if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointContainer(%v): %v; want InvalidArgument saying %q", tc.req, err, tc.want)
		}
	}

	criuWorks := exec.Command("criu", "check").Run() == nil
	if ok, reason, _ := d.checkpointStatus(t); ok != criuWorks || !ok && !strings.Contains(reason, "criu") {
		t.Errorf("verbose Status says checkpoints available=%v (%q), but criu check works=%v", ok, reason, criuWorks)
	}
	if !criuWorks {
		_, err := d.rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: out})
		if code(err) != "FailedPrecondition" || !strings.Contains(err.Error(), "criu") {
			t.Errorf("CheckpointContainer where CRIU does not work: %v; want FailedPrecondition saying why", err)
		}
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("a refused checkpoint left %s: %v", out, serr)
	}
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after a refused checkpoint: %v", st.State)
	}
	// An archive as the image is refused where restoring is off (the
	// default), before the file is looked at.
	_, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod, SandboxConfig: podCfg, Config: containerConfig("restored", out, "true"),
	})
	if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), "restore_from_archives") {
		t.Errorf("CreateContainer from an archive with restoring off: %v; want InvalidArgument naming restore_from_archives", err)
	}
	checkPodCheckpointRefusals(t, d, pod, id, criuWorks)
	empty := t.TempDir()
	for _, tc := range []struct {
		req        *runtimeapi.RestorePodRequest
		code, want string
	}{
		{&runtimeapi.RestorePodRequest{CheckpointPath: out}, "InvalidArgument", "config"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: "rel", Config: podCfg}, "InvalidArgument", "checkpoint_path"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty, Config: podCfg}, "InvalidArgument", "container_configs"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty, Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref), containerConfig("a", ref)}}, "InvalidArgument", "named twice"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty, Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref)}, RuntimeHandler: "nope"}, "InvalidArgument", "runtime_handler"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty, Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref)}, Options: map[string]string{"k": "v"}}, "InvalidArgument", "options"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty + "/none", Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref)}}, "NotFound", "checkpoint_path"},
		{&runtimeapi.RestorePodRequest{CheckpointPath: empty, Config: podCfg, ContainerConfigs: []*runtimeapi.ContainerConfig{containerConfig("a", ref)}}, "InvalidArgument", "pod-checkpoint.json"},
	} {
		_, err := d.rs.RestorePod(ctx, tc.req)
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RestorePod(%v): %v; want %s naming %s", tc.req, err, tc.code, tc.want)
		}
	}
}

// checkPodCheckpointRefusals checks CheckpointPod's refusals of bad
// requests for pod, whose container id runs; where CRIU does not work the
// good request is FailedPrecondition. Nothing is written.
func checkPodCheckpointRefusals(t *testing.T, d *daemon, pod, id string, criuWorks bool) {
	ctx := ctxT(t)
	empty, full := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req        *runtimeapi.CheckpointPodRequest
		code, want string
	}{
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, ContainerIds: []string{id}}, "InvalidArgument", "output_path"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty + "/none", ContainerIds: []string{id}}, "InvalidArgument", "does not exist"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: full, ContainerIds: []string{id}}, "InvalidArgument", "not empty"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty}, "InvalidArgument", "container_ids"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty, ContainerIds: []string{id, id}}, "InvalidArgument", "listed twice"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty, ContainerIds: []string{strings.Repeat("0e", 32)}}, "NotFound", "container_ids[0]"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty, ContainerIds: []string{id}, Options: map[string]string{"k": "v"}}, "InvalidArgument", "options"},
		{&runtimeapi.CheckpointPodRequest{PodSandboxId: strings.Repeat("0e", 32), OutputPath: empty, ContainerIds: []string{id}}, "NotFound", "0e0e"},
	} {
		_, err := d.rs.CheckpointPod(ctx, tc.req)
		if code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckpointPod(%v): %v; want %s naming %s", tc.req, err, tc.code, tc.want)
		}
	}
	if !criuWorks {
		_, err := d.rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: empty, ContainerIds: []string{id}})
		if code(err) != "FailedPrecondition" {
			t.Errorf("CheckpointPod where CRIU does not work: %v; want FailedPrecondition saying why", err)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("refused pod checkpoints wrote %d entries into output_path", len(ents))
	}
}

// needCRIUEnv, when set (the node lane sets it), makes a test that needs a
// working CRIU fail where it does not work instead of skipping.
const needCRIUEnv = "CRIN_TEST_NEED_CRIU"

// requireCRIU skips, or fails under needCRIUEnv, where "criu check" fails.
func requireCRIU(t *testing.T) {
	t.Helper()
	out, err := exec.Command("criu", "check").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("CRIU does not work on this host (criu check: %v: %s); the node lane runs this test", err, harness.Tail(string(out), 400))
	if os.Getenv(needCRIUEnv) != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestCheckpointContainer checkpoints a container that counts, into a file
// and its log, and checks the archive: CRIU's images of its processes,
// its writable layer with the count in it, its spec and config as
// checkpoint tools read them (and checkpointctl itself); the container
// counts on after it. Then it restores the container from the archive,
// given as the image of a container in a new pod: the restored one
// continues from the checkpointed count, in its own cgroup and log, while
// the original counts on.
func TestCheckpointContainer(t *testing.T) {
	runsOn(t, oci)
	requireCRIU(t)
	d := startDaemon(t, daemonOptions{restoreArchives: true})
	if ok, reason, handlers := d.checkpointStatus(t); !ok || len(handlers) == 0 {
		t.Errorf("verbose Status says checkpoints available=%v (%q) on handlers %v, where criu check works", ok, reason, handlers)
	}
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("ckpt-" + randHex(2))
	cfg := containerConfig("counter", ref, "sh", "-c", counterScript)
	ownPIDNamespace(podCfg, cfg)
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, cfg)
	waitLog(t, logPath(podCfg, cfg), " stdout F 3\n")

	out := filepath.Join(t.TempDir(), "ckpt.tar")
	start := time.Now()
	if _, err := d.rs.CheckpointContainer(ctxT(t), &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: out, Timeout: 600}); err != nil {
		t.Fatalf("CheckpointContainer: %v", err)
	}
	t.Logf("checkpoint took %v", time.Since(start).Round(time.Millisecond))
	files := readTar(t, out)
	for _, name := range []string{"config.dump", "spec.dump", "checkpoint/", "checkpoint/inventory.img", "checkpoint/pstree.img", "rootfs-diff.tar", "stats-dump"} {
		if _, ok := files[name]; !ok {
			t.Errorf("the archive has no %s", name)
		}
	}
	// CRIU dumps the tmpfs the spec mounts on /dev with its contents.
	if !slices.ContainsFunc(keys(files), func(k string) bool { return strings.HasPrefix(k, "checkpoint/tmpfs-dev-") }) {
		t.Errorf("the archive has no CRIU image of the container's /dev tmpfs (checkpoint/tmpfs-dev-*); entries %v", keys(files))
	}
	var conf struct {
		ID              string `json:"id"`
		Name            string `json:"name"`
		RootfsImageRef  string `json:"rootfsImageRef"`
		RootfsImageName string `json:"rootfsImageName"`
		CreatedTime     string `json:"createdTime"`
	}
	if err := json.Unmarshal(files["config.dump"], &conf); err != nil || conf.ID != id || conf.Name != "counter" || conf.RootfsImageRef == "" || conf.CreatedTime == "" {
		t.Errorf("config.dump %s (%v): want id %s, name counter, the image and the creation time", files["config.dump"], err, id)
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(files["spec.dump"], &spec); err != nil || spec.Annotations["io.kubernetes.cri.container-name"] != "counter" ||
		spec.Annotations["io.kubernetes.cri.sandbox-name"] != podCfg.Metadata.Name {
		t.Errorf("spec.dump annotations %v (%v): want the container's and the pod's names", spec.Annotations, err)
	}
	checkpointctl(t, out, "counter", id[:12])
	diff := readTarBytes(t, files["rootfs-diff.tar"])
	n, err := strconv.Atoi(strings.TrimSpace(string(diff["count"])))
	if err != nil || n < 3 {
		t.Fatalf("rootfs-diff.tar count %q (%v), want the count at the checkpoint (3 or more); entries %v", diff["count"], err, keys(diff))
	}
	// Left running: it counts past the checkpointed value.
	waitLog(t, logPath(podCfg, cfg), fmt.Sprintf(" stdout F %d\n", n+2))
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after its checkpoint: %v, want running", st.State)
	}
	t.Run("restored in a new pod", func(t *testing.T) { checkRestore(t, d, out, n, id, podCfg, cfg) })
}

// checkpointctl has checkpointctl (from CRIN_TEST_BIN_DIR, where the node
// lane puts it, or $PATH) show and inspect the archive (with CRIU's
// statistics and the process tree), which must name the container (its
// name and id); without checkpointctl this is skipped, or
// fails under needCRIUEnv.
func checkpointctl(t *testing.T, archive string, want ...string) {
	t.Helper()
	bin := filepath.Join(os.Getenv(harness.BinDirEnv), "checkpointctl")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("checkpointctl"); err != nil {
			if os.Getenv(needCRIUEnv) != "" {
				t.Fatalf("no checkpointctl in %s or $PATH to read the archive with", harness.BinDirEnv)
			}
			t.Logf("no checkpointctl: the archive is not read by it")
			return
		}
	}
	for _, args := range [][]string{{"show", archive}, {"inspect", archive}, {"inspect", "--stats", "--ps-tree", archive}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("checkpointctl %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("checkpointctl %s does not name %q:\n%s", strings.Join(args, " "), w, out)
			}
		}
		t.Logf("checkpointctl %s:\n%s", strings.Join(args, " "), out)
	}
}

// readTar reads a tar file's entries, by name (directories end with /).
func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return readTarBytes(t, data)
}

func readTarBytes(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(name, "/") {
			name += "/"
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// counterScript counts once a second, into /count and its log.
const counterScript = "i=0; while true; do i=$((i+1)); echo $i > /count; echo $i; sleep 1; done"

// ownPIDNamespace gives the pod's containers a PID namespace each, as
// kubelet does unless a pod shares one (shareProcessNamespace): CRIU
// restores a container's processes with their pids, which in a shared
// namespace may be taken.
func ownPIDNamespace(pod *runtimeapi.PodSandboxConfig, ctrs ...*runtimeapi.ContainerConfig) {
	ns := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	pod.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: ns}
	for _, c := range ctrs {
		if c.Linux == nil {
			c.Linux = &runtimeapi.LinuxContainerConfig{}
		}
		c.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}
	}
}

// checkRestore restores the container orig, checkpointed at count n into
// archive, in a new pod, and checks that it continues from n in its own
// cgroup and log while orig counts on.
func checkRestore(t *testing.T, d *daemon, archive string, n int, orig string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) {
	podCfg2 := podConfig("restored-" + randHex(2))
	cfg2 := containerConfig("counter", archive, "sh", "-c", counterScript)
	ownPIDNamespace(podCfg2, cfg2)
	pod2 := d.runPod(t, podCfg2)
	start := time.Now()
	restored := d.runContainer(t, pod2, podCfg2, cfg2)
	t.Logf("restore (create and start) took %v", time.Since(start).Round(time.Millisecond))
	// Its first line is the count at the checkpoint or the next: CRIU
	// froze the loop between two of its steps.
	first := waitLog(t, logPath(podCfg2, cfg2), " stdout F ")
	got := firstCount(t, first)
	if got < n || got > n+1 {
		t.Errorf("the restored container's first count is %d, want %d or %d (the checkpointed count; log %q)", got, n, n+1, first)
	}
	waitLog(t, logPath(podCfg2, cfg2), fmt.Sprintf(" stdout F %d\n", got+2))
	if c := d.execOut(t, restored, "cat", "/count"); c == "" {
		t.Errorf("the restored container has no /count")
	}
	pid, origPid := d.containerPid(t, restored), d.containerPid(t, orig)
	if cg := procCgroup(t, pid); !strings.Contains(cg, restored) || cg == procCgroup(t, origPid) {
		t.Errorf("the restored container runs in cgroup %s, want its own (the original's is %s)", cg, procCgroup(t, origPid))
	}
	// The original counts on, apart.
	waitLog(t, logPath(podCfg, cfg), fmt.Sprintf(" stdout F %d\n", n+4))
}

// firstCount is the count of the first full record in a CRI log.
func firstCount(t *testing.T, log string) int {
	t.Helper()
	for line := range strings.Lines(log) {
		if _, rest, ok := strings.Cut(line, " stdout F "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				t.Fatalf("log record %q is no count", line)
			}
			return n
		}
	}
	t.Fatalf("no count in log %q", log)
	return 0
}

// checkpointStatus is the "checkpoint" part of crind's verbose Status:
// where checkpoint and restore work.
func (d *daemon) checkpointStatus(t *testing.T) (available bool, reason string, handlers []string) {
	t.Helper()
	st, err := d.rs.Status(ctxT(t), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var info struct {
		Checkpoint *struct {
			Available bool     `json:"available"`
			Reason    string   `json:"reason"`
			Handlers  []string `json:"handlers"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &info); err != nil || info.Checkpoint == nil {
		t.Fatalf("verbose Status %q (%v) says nothing of checkpoints", st.GetInfo()["config"], err)
	}
	return info.Checkpoint.Available, info.Checkpoint.Reason, info.Checkpoint.Handlers
}
