//go:build integration

package integration

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/test/poll"
)

// diskPod is a pod with one running container, as the full-disk tests
// make them.
type diskPod struct {
	id, ctr string
}

// runDiskPod runs pod cfg with a sleeping busybox container ctr. The
// pod carries a large annotation, as kubectl's last applied
// configuration makes them: its record spans many pages of the state
// database, so its updates and removal need room there.
func (d *daemon) runDiskPod(t *testing.T, cfg *runtimeapi.PodSandboxConfig, ctr *runtimeapi.ContainerConfig) diskPod {
	t.Helper()
	cfg.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = randHex(96 << 10)
	id := d.runPod(t, cfg)
	ctrID := d.runContainer(t, id, cfg, ctr)
	return diskPod{id: id, ctr: ctrID}
}

// tearDown stops and removes p's container, then p, as kubelet evicting
// it does; every call must succeed.
func (d *daemon) tearDown(t *testing.T, p diskPod) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := d.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: p.ctr, Timeout: 1}); err != nil {
		t.Fatalf("StopContainer on a full disk: %v", err)
	}
	if _, err := d.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: p.ctr}); err != nil {
		t.Fatalf("RemoveContainer on a full disk: %v", err)
	}
	if _, err := d.rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Fatalf("StopPodSandbox on a full disk: %v", err)
	}
	if _, err := d.rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
		t.Fatalf("RemovePodSandbox on a full disk: %v", err)
	}
	for _, p := range pathsNaming(d.root, d.state, p.id, p.ctr) {
		t.Errorf("left behind by the removal: %s", p)
	}
}

// pathsNaming lists the paths below dirs one of whose names holds one of
// ids.
func pathsNaming(root, state string, ids ...string) []string {
	var out []string
	for _, dir := range []string{root, state} {
		_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			for _, id := range ids {
				if strings.Contains(e.Name(), id) {
					out = append(out, p)
				}
			}
			return nil
		})
	}
	return out
}

// tree is every path below root and state.
func tree(root, state string) map[string]bool {
	out := map[string]bool{}
	for _, dir := range []string{root, state} {
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				out[p] = true
			}
			return nil
		})
	}
	return out
}

// fillDisk appends to the file path until its filesystem has not one
// byte left for it, then makes empty files in path.d until it has no
// inode left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4096, 1} {
		buf := make([]byte, size)
		for {
			_, err := f.Write(buf)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatalf("fill the disk: %v", err)
			}
		}
	}
	// And every inode: empty files until none is left.
	dir := path + ".d"
	if err := os.MkdirAll(dir, 0o700); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			t.Fatalf("fill the disk's inodes: %v", err)
		}
		f.Close()
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	if st.Bavail != 0 || st.Ffree != 0 {
		t.Fatalf("the disk still has %d blocks and %d inodes free after the fill", st.Bavail, st.Ffree)
	}
}

// wantDiskFull fails t unless err is ResourceExhausted and says that the
// disk at disk is full.
func wantDiskFull(t *testing.T, call string, err error, disk string) {
	t.Helper()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "no space left on device") ||
		!strings.Contains(err.Error(), disk) {
		t.Fatalf("%s on a full disk: %v, want ResourceExhausted naming the full disk %s", call, err, disk)
	}
}

// noiseImage is an image of its own on host (a layer of incompressible
// bytes), for a pull that must store something.
func noiseImage(t *testing.T, host string) string { return namedNoiseImage(t, host, "noise") }

// namedNoiseImage is noiseImage as repository name, its one file named
// name too.
func namedNoiseImage(t *testing.T, host, name string) string {
	t.Helper()
	img := imagetest.Image(t, v1.Config{Cmd: []string{"/" + name}}, imagetest.Layer(t, imagetest.NoiseFile(name, 1<<20)))
	imagetest.Push(t, host, "library/"+name+":1", img)
	return host + "/library/" + name + ":1"
}

// TestFullDiskStopRemove: with crind's root and state on a full
// filesystem, kubelet can still evict pods (StopContainer,
// RemoveContainer, StopPodSandbox, RemovePodSandbox), also after crind
// was SIGKILLed and restarted on the full disk, and nothing of them is
// left, and RemoveImage works; RunPodSandbox, CreateContainer and
// PullImage fail ResourceExhausted naming the disk and leave nothing;
// once there is room again pods run (issue 23).
func TestFullDiskStopRemove(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{diskBytes: 64 << 20, diskInodes: 8192})
	host := imagetest.StartRegistry(t)
	ref := host + "/library/busybox:latest"
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	noise := noiseImage(t, host)
	old := namedNoiseImage(t, host, "old")
	d.pull(t, ref)
	d.pull(t, old)
	sleep := []string{"sleep", "3600"}
	// a shares its PID namespace (an infra process), b is what kubelet
	// makes by default (none).
	a := d.runDiskPod(t, podConfig("full-a"), containerConfig("c", ref, sleep...))
	b := d.runDiskPod(t, noInfraPodConfig("full-b"), noInfraContainerConfig("c", ref, sleep...))

	fill := filepath.Join(d.disk, "fill")
	fillDisk(t, fill)
	before := tree(d.root, d.state)
	_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podConfig("full-new")})
	wantDiskFull(t, "RunPodSandbox", err, d.disk)
	_, err = d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: noise}})
	wantDiskFull(t, "PullImage", err, d.disk)
	bCfg := podConfig("full-b")
	_, err = d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: b.id,
		Config: containerConfig("more", ref, "true"), SandboxConfig: bCfg})
	wantDiskFull(t, "CreateContainer", err, d.disk)
	for p := range tree(d.root, d.state) {
		if !before[p] {
			t.Errorf("left by a refused RunPodSandbox, PullImage or CreateContainer: %s", p)
		}
	}
	// kubelet's image garbage collection frees space on a full disk too.
	oldSpec := &runtimeapi.ImageSpec{Image: old}
	if _, err := d.is.RemoveImage(ctxT(t), &runtimeapi.RemoveImageRequest{Image: oldSpec}); err != nil {
		t.Fatalf("RemoveImage on a full disk: %v", err)
	}
	if st, err := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: oldSpec}); err != nil || st.Image != nil {
		t.Fatalf("ImageStatus of the image removed on a full disk: %v, %v; want no image", st, err)
	}
	// That freed its layer and blob: take them before the evictions.
	fillDisk(t, fill)

	d.tearDown(t, a)
	// The removal freed a container's files: take that too, then restart
	// crind on the full disk.
	pid := d.containerPid(t, b.ctr)
	d.kill()
	// What the dead crind held open is free now: take it too.
	fillDisk(t, fill)
	// b's container dies while crind is down, on the full disk: the
	// restarted crind finds its exit and records it.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.start()
	var st *runtimeapi.ContainerStatus
	poll.Until(t, 2*time.Minute, "the container killed while crind was down is exited", func() (bool, string) {
		st = d.status(t, b.ctr)
		return st.State == runtimeapi.ContainerState_CONTAINER_EXITED, "state " + st.State.String()
	})
	if st.ExitCode != 137 {
		t.Errorf("exit code of the container SIGKILLed on the full disk: %d (%s: %s), want 137", st.ExitCode, st.Reason, st.Message)
	}
	d.tearDown(t, b)

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(fill + ".d"); err != nil {
		t.Fatal(err)
	}
	c := d.runDiskPod(t, noInfraPodConfig("full-after"), noInfraContainerConfig("c", ref, sleep...))
	if out := d.execOut(t, c.ctr, "echo", "room"); out != "room" {
		t.Fatalf("exec in a pod made once the disk has room: %q", out)
	}
}
