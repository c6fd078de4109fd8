//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// wantRefusal fails t unless err has code and its message holds every
// mention.
func wantRefusal(t *testing.T, what string, err error, code string, mentions ...string) {
	t.Helper()
	ok := status.Code(err).String() == code
	for _, m := range mentions {
		ok = ok && strings.Contains(err.Error(), m)
	}
	if !ok {
		t.Errorf("%s: %v, want %s mentioning %q", what, err, code, mentions)
	}
}

// TestHostileLogSymlinks: a symbolic link in a pod's log directory, as a
// directory of log_path or as the log file itself, planted before create,
// before start or during a rotation, never gets the container's output
// written through it (crind and the shim run as root). Create refuses with
// InvalidArgument naming log_path, start and reopen with
// FailedPrecondition naming the path, and the link's target is untouched.
// A log directory that is gone makes ReopenContainerLog
// FailedPrecondition too.
//
// On the shim v2 handler crin-logger opens the log at create, so the link
// planted before start has nothing to catch there.
func TestHostileLogSymlinks(t *testing.T) {
	runsOn(t, oci)
	t.Run("runc", func(t *testing.T) { hostileLogSymlinks(t, startDaemon(t, daemonOptions{}), "") })
	t.Run(shimv2Handler, func(t *testing.T) { hostileLogSymlinks(t, shimv2Daemon(t), shimv2Handler) })
}

func hostileLogSymlinks(t *testing.T, d *daemon, handler string) {
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("loglinks")
	pod := d.runPodWith(t, podCfg, handler)
	logDir := podCfg.LogDirectory
	outside := t.TempDir()
	target := filepath.Join(outside, "host-file")
	const hostContent = "host file\n"
	if err := os.WriteFile(target, []byte(hostContent), 0o644); err != nil {
		t.Fatal(err)
	}
	checkTarget := func(when string) {
		t.Helper()
		if b, err := os.ReadFile(target); err != nil || string(b) != hostContent {
			t.Errorf("%s: the link's target holds %q (%v), want it untouched", when, b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("%s: %d files in the directory a link points to, want 1", when, len(ents))
		}
	}
	if err := os.Symlink(outside, filepath.Join(logDir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(logDir, "planted.log")); err != nil {
		t.Fatal(err)
	}
	ticker := func(name, logPath string) *runtimeapi.ContainerConfig {
		c := containerConfig(name, ref, "sh", "-c", "while true; do echo tick; sleep 0.2; done")
		c.LogPath = logPath
		return c
	}
	for _, tc := range []struct{ name, logPath string }{
		{"dirlink", "sub/c.log"},
		{"filelink", "planted.log"},
	} {
		_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ticker(tc.name, tc.logPath), SandboxConfig: podCfg})
		wantRefusal(t, "CreateContainer with log_path "+tc.logPath, err, "InvalidArgument", "config.log_path", tc.logPath, "symbolic link")
	}
	if ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{}); len(ctrs.GetContainers()) != 0 {
		t.Errorf("refused creates left %d containers", len(ctrs.GetContainers()))
	}
	checkTarget("after the refused creates")

	if handler == "" {
		// Planted between create and start.
		late := d.createContainer(t, pod, podCfg, ticker("late", "late.log"))
		latePath := filepath.Join(logDir, "late.log")
		if err := os.Symlink(target, latePath); err != nil {
			t.Fatal(err)
		}
		_, err := d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: late})
		wantRefusal(t, "StartContainer with the log swapped for a link", err, "FailedPrecondition", latePath, "symbolic link")
		time.Sleep(time.Second)
		checkTarget("after the refused start")
	}

	// Swapped in during a rotation, before ReopenContainerLog.
	cfg := ticker("rotated", "rotated.log")
	id := d.runContainer(t, pod, podCfg, cfg)
	path := logPath(podCfg, cfg)
	waitLog(t, path, "tick")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, err := d.rs.ReopenContainerLog(ctxT(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	wantRefusal(t, "ReopenContainerLog onto a link", err, "FailedPrecondition", path, "symbolic link")
	time.Sleep(time.Second)
	checkTarget("after the refused reopen")
	// The link gone, the rotation completes.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.ReopenContainerLog(ctxT(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog once the link is gone: %v", err)
	}
	waitLog(t, path, "tick")

	// The whole log directory gone.
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	_, err = d.rs.ReopenContainerLog(ctxT(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	wantRefusal(t, "ReopenContainerLog with the log directory gone", err, "FailedPrecondition", path, "does not exist")
	if st := d.status(t, id); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after the refused reopen: %s, want running", st.State)
	}
}

// TestHostileIDPrefixes: the RPCs that stop, remove, change or give access
// to a pod or container refuse a one-character id prefix with
// InvalidArgument naming the field and the value, and act on nothing;
// reads still resolve prefixes (crictl inspect passes what was typed).
func TestHostileIDPrefixes(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("prefix")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("c", ref, "sleep", "1000"))
	pp, cp := pod[:1], id[:1]
	for _, tc := range []struct {
		name, field, value string
		err                error
	}{
		{"StopContainer", "container_id", cp, errOf(d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: cp}))},
		{"RemoveContainer", "container_id", cp, errOf(d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: cp}))},
		{"UpdateContainerResources", "container_id", cp, errOf(d.rs.UpdateContainerResources(ctxT(t), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: cp, Linux: &runtimeapi.LinuxContainerResources{}}))},
		{"ReopenContainerLog", "container_id", cp, errOf(d.rs.ReopenContainerLog(ctxT(t), &runtimeapi.ReopenContainerLogRequest{ContainerId: cp}))},
		{"ExecSync", "container_id", cp, errOf(d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: cp, Cmd: []string{"true"}}))},
		{"Exec", "container_id", cp, errOf(d.rs.Exec(ctxT(t), &runtimeapi.ExecRequest{ContainerId: cp, Cmd: []string{"sh"}, Stdout: true}))},
		{"Attach", "container_id", cp, errOf(d.rs.Attach(ctxT(t), &runtimeapi.AttachRequest{ContainerId: cp, Stdout: true}))},
		{"StartContainer", "container_id", cp, errOf(d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: cp}))},
		{"StopPodSandbox", "pod_sandbox_id", pp, errOf(d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pp}))},
		{"RemovePodSandbox", "pod_sandbox_id", pp, errOf(d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pp}))},
		{"PortForward", "pod_sandbox_id", pp, errOf(d.rs.PortForward(ctxT(t), &runtimeapi.PortForwardRequest{PodSandboxId: pp, Port: []int32{80}}))},
		{"CreateContainer", "pod_sandbox_id", pp, errOf(d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pp, Config: containerConfig("x", ref, "true"), SandboxConfig: podCfg}))},
	} {
		wantRefusal(t, tc.name+" with a one-character prefix", tc.err, "InvalidArgument", tc.field, `"`+tc.value+`"`, "full 64-character id")
	}
	// Nothing was acted on; reads still take the prefix.
	if st := d.status(t, cp); st.Id != id || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container by prefix after the refusals: %s %s, want %s running", st.Id, st.State, id)
	}
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pp})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod by prefix after the refusals: %v, %v; want ready", ps, err)
	}
	if ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{}); len(ctrs.GetContainers()) != 1 {
		t.Errorf("%d containers after the refusals, want 1", len(ctrs.GetContainers()))
	}
	// A full id that matches nothing is gone already: stop and remove
	// succeed (the CRI contract), the rest are NotFound.
	unknown := strings.Repeat("0f", 32)
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("RemovePodSandbox of an unknown full id: %v, want success", err)
	}
	_, err = d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: unknown})
	wantRefusal(t, "StartContainer of an unknown full id", err, "NotFound", unknown)
}

// TestHostileRequestSizes: crind takes requests up to 16 MiB, as
// containerd does, so a CreateContainer bigger than gRPC's default 4 MiB
// works; a larger request is ResourceExhausted; list filters are capped
// (InvalidArgument naming the field), also when many come at once.
func TestHostileRequestSizes(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("sizes")
	pod := d.runPod(t, podCfg)

	big := containerConfig("big", ref, "true")
	for i := range 6 {
		big.Envs = append(big.Envs, &runtimeapi.KeyValue{Key: "BIG" + string(rune('A'+i)), Value: []byte(strings.Repeat("x", 1<<20))})
	}
	if _, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: big, SandboxConfig: podCfg}); err != nil {
		t.Errorf("CreateContainer of 6 MiB: %v, want it created", err)
	}

	huge := &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"k": strings.Repeat("v", 17<<20)}}}
	wantRefusal(t, "ListContainers of 17 MiB", errOf(d.rs.ListContainers(ctxT(t), huge)), "ResourceExhausted")

	many := map[string]string{}
	for i := range 65 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	wantRefusal(t, "ListPodSandbox with 65 selector entries", errOf(d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: many}})), "InvalidArgument", "filter.label_selector", "65 entries")
	wantRefusal(t, "ListContainerStats with a 2 KiB selector value", errOf(d.rs.ListContainerStats(ctxT(t), &runtimeapi.ListContainerStatsRequest{
		Filter: &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": strings.Repeat("v", 2048)}}})), "InvalidArgument", `filter.label_selector["app"]`)

	// The probe's load: concurrent lists with 3.3 MB selectors.
	pid := d.cmd.Process.Pid
	before := procStatusKB(t, pid, "VmRSS")
	sel := map[string]string{strings.Repeat("k", 3300000): "v"}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: sel}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		wantRefusal(t, "concurrent ListContainers with a 3.3 MB selector "+string(rune('a'+i)), err, "InvalidArgument", "filter.label_selector: key")
	}
	t.Logf("crind RSS %d kB before, %d kB after 16 lists of 3.3 MB", before, procStatusKB(t, pid, "VmRSS"))
	if ls, err := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"ctr": "big"}}}); err != nil || len(ls.Containers) != 1 {
		t.Errorf("a small filter after the refusals: %v, %v; want the big container", ls, err)
	}
}

// TestHostileInputs: the refusals of issue 23's probe that need more than
// a request (an image, a plugin): layer entries no file system can hold,
// a registry port out of range, and an NRI plugin's empty update entries.
func TestHostileInputs(t *testing.T) {
	runsOn(t, oci)
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "whiteout:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File("ok", "fine", 0o644), imagetest.File("a/.wh..", "", 0o644))))
	imagetest.Push(t, host, "longname:v1", imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File(strings.Repeat("n", 4000), "x", 0o644))))
	n := newNRISetup(t)
	d := nriDaemon(t, n, "")
	for _, tc := range []struct{ ref, entry string }{
		{host + "/whiteout:v1", `"a/.wh.."`},
		{host + "/longname:v1", "(4000 bytes)"},
	} {
		st := d.pullErr(ctxT(t), tc.ref)
		wantRefusal(t, "pull of "+tc.ref, st.Err(), "InvalidArgument", "unpack layer sha256:", tc.entry)
		if len(st.Message()) > 2048 {
			t.Errorf("pull of %s: a message of %d bytes", tc.ref, len(st.Message()))
		}
		if is, err := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tc.ref}}); err != nil || is.Image != nil {
			t.Errorf("image status after the refused pull of %s: %v, %v; want no image", tc.ref, is, err)
		}
	}
	const badPort = "127.0.0.1:99999/x:1"
	wantRefusal(t, "pull of "+badPort, d.pullErr(ctxT(t), badPort).Err(), "InvalidArgument", `"`+badPort+`"`, "port")

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("emptyupd")
	pod := d.runPod(t, podCfg)
	a := d.runContainer(t, pod, podCfg, containerConfig("a", ref, "sleep", "1000"))
	b := d.runContainer(t, pod, podCfg, containerConfig("b", ref, "sleep", "1000"))
	c := d.runContainer(t, pod, podCfg, containerConfig("c", ref, "sleep", "1000"))
	ev := dialEvictor(t, n.Socket, "50", "updater")
	waitPluginsReady(t, d, "50-updater")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rsp, err := ev.runtime.UpdateContainers(ctx, &api.UpdateContainersRequest{Update: []*api.ContainerUpdate{
		{ContainerId: a},
		{ContainerId: b, Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{}}},
		{ContainerId: c, Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(512)}}}},
	}})
	if err != nil {
		t.Fatalf("UpdateContainers: %v", err)
	}
	var failed []string
	for _, u := range rsp.GetFailed() {
		failed = append(failed, u.GetContainerId())
	}
	if len(failed) != 2 || failed[0] != a || failed[1] != b {
		t.Errorf("failed = %v, want [%s %s], the entries that set nothing", failed, a, b)
	}
	if got := d.status(t, c).GetResources().GetLinux().GetCpuShares(); got != 512 {
		t.Errorf("cpu shares of the container with a real update: %d, want 512", got)
	}
}
