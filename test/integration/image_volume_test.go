//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// volumeImage pushes busybox and an image of known files to a fresh
// registry and returns their references and the data image's digest.
func volumeImage(t *testing.T) (bb, data, digest string) {
	t.Helper()
	host := imagetest.StartRegistry(t)
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t,
			imagetest.Dir("data", 0o755),
			imagetest.File("data/hello.txt", "hello from the image\n", 0o644),
			imagetest.Dir("data/sub", 0o755),
			imagetest.File("data/sub/inner.txt", "inner", 0o644),
		),
		// A second layer: the view is an overlay of all of them, and a
		// symlink resolves inside the image, never on the host.
		imagetest.Layer(t,
			imagetest.File("data/two.txt", "layer two", 0o644),
			imagetest.Symlink("link", "/data/sub"),
			imagetest.Symlink("escape", "/etc"),
		),
	)
	digest = imagetest.Push(t, host, "vol/data:v1", img)
	return host + "/library/busybox:latest", host + "/vol/data:v1", digest
}

// imageVolumeMounts lists the image volume views mounted for d.
func (d *daemon) imageVolumeMounts() []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], d.root+"/") && strings.Contains(f[4], "/volumes/") {
			out = append(out, f[4])
		}
	}
	return out
}

func volumeMount(path, image, sub string) *runtimeapi.Mount {
	return &runtimeapi.Mount{ContainerPath: path, Image: &runtimeapi.ImageSpec{Image: image}, ImageSubPath: sub,
		Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE}
}

// TestImageVolume mounts an image into a container as kubelet's image
// volumes do: the files are there read-only, a sub path mounts only that
// directory, bad requests are refused naming the field, the image cannot
// be removed while mounted, and RemoveContainer leaves nothing mounted.
func TestImageVolume(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	bb, data, _ := volumeImage(t)
	d.pull(t, bb)
	// kubelet mounts what PullImage returned.
	dataRef := d.pull(t, data)
	podCfg := podConfig("imgvol")
	pod := d.runPod(t, podCfg)

	cfg := containerConfig("reader", bb, "sleep", "600")
	cfg.Mounts = []*runtimeapi.Mount{
		volumeMount("/data", dataRef, ""),
		volumeMount("/sub", data, "data/sub"),
		volumeMount("/link", dataRef, "link"),
	}
	id := d.runContainer(t, pod, podCfg, cfg)
	for cmd, want := range map[string]string{
		"cat /data/data/hello.txt":                  "hello from the image",
		"cat /data/data/two.txt":                    "layer two",
		"ls /sub":                                   "inner.txt",
		"cat /link/inner.txt":                       "inner",
		"touch /data/x 2>/dev/null || echo refused": "refused",
	} {
		if got := d.execOut(t, id, "sh", "-c", cmd); got != want {
			t.Errorf("%s: %q, want %q", cmd, got, want)
		}
	}

	st := d.status(t, id)
	wantRef := dataRef // what PullImage returned: the CRI has image_ref equal it
	for i, m := range st.GetMounts() {
		if m.GetImage().GetImage() != cfg.Mounts[i].Image.Image || m.GetImage().GetImageRef() != wantRef ||
			m.GetImageSubPath() != cfg.Mounts[i].ImageSubPath || !m.GetReadonly() {
			t.Errorf("status mounts[%d] = %v, want image %s, image_ref %s, sub path %q", i, m, cfg.Mounts[i].Image.Image, wantRef, cfg.Mounts[i].ImageSubPath)
		}
	}
	if n := len(st.GetMounts()); n != 3 {
		t.Errorf("status has %d mounts, want 3", n)
	}
	if got := d.imageVolumeMounts(); len(got) != 3 {
		t.Errorf("%d views mounted, want 3: %v", len(got), got)
	}

	// Refusals name the field and leave nothing mounted.
	for _, tc := range []struct {
		name  string
		mount *runtimeapi.Mount
		code  codes.Code
		want  string
	}{
		{"missing sub path", volumeMount("/d", dataRef, "data/nope"), codes.NotFound, `mounts[1].image_sub_path "data/nope"`},
		{"escaping sub path", volumeMount("/d", dataRef, "../etc"), codes.InvalidArgument, `mounts[1].image_sub_path "../etc"`},
		{"read-write", &runtimeapi.Mount{ContainerPath: "/d", Image: &runtimeapi.ImageSpec{Image: dataRef}}, codes.InvalidArgument, "mounts[1].readonly"},
		{"missing image", volumeMount("/d", "example.invalid/nope:v1", ""), codes.NotFound, `"example.invalid/nope:v1"`},
	} {
		bad := containerConfig("bad", bb, "sleep", "600")
		// mounts[0] is good: the refusal must undo it.
		bad.Mounts = []*runtimeapi.Mount{volumeMount("/ok", dataRef, ""), tc.mount}
		_, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: bad, SandboxConfig: podCfg})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.code, tc.want)
		}
		if got := d.imageVolumeMounts(); len(got) != 3 {
			t.Errorf("%s: views mounted after the refusal: %v", tc.name, got)
		}
	}

	// The image stays while a container mounts it.
	_, err := d.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: dataRef}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), id) {
		t.Errorf("RemoveImage of a mounted image: %v, want FailedPrecondition naming container %s", err, id)
	}
	if s, err := d.is.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: data}}); err != nil || s.GetImage() == nil {
		t.Errorf("ImageStatus after the refused removal: %v, %v", s, err)
	}

	if _, err := d.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	if got := d.imageVolumeMounts(); len(got) != 0 {
		t.Errorf("views mounted after RemoveContainer: %v", got)
	}
	if _, err := d.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: dataRef}}); err != nil {
		t.Errorf("RemoveImage once no container mounts it: %v", err)
	}
}

// TestImageVolumeCrindKilled kills crind between CreateContainer and
// RemoveContainer of a container with an image volume: the restarted
// crind still protects the image, reports the mount, and its remove leaves
// nothing mounted. A view no record owns (crind died before recording
// it) is swept at start-up.
func TestImageVolumeCrindKilled(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	bb, data, _ := volumeImage(t)
	d.pull(t, bb)
	dataRef := d.pull(t, data)
	podCfg := podConfig("imgvolkill")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("reader", bb, "sleep", "600")
	cfg.Mounts = []*runtimeapi.Mount{volumeMount("/data", dataRef, "data")}
	created := d.createContainer(t, pod, podCfg, cfg)

	d.kill()
	// What a crind killed between mounting a view and recording it
	// leaves: a mount under a container dir no record owns.
	orphan := filepath.Join(d.root, "image", "containers", strings.Repeat("ab", 32), "volumes", "0")
	if err := os.MkdirAll(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", orphan, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
		t.Fatal(err)
	}
	d.start()
	for _, m := range d.imageVolumeMounts() {
		if m == orphan {
			t.Errorf("orphaned view still mounted after the restart: %s", m)
		}
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(orphan))); !os.IsNotExist(err) {
		t.Errorf("orphaned container dir after the restart: %v", err)
	}

	d.startContainer(t, created)
	if got := d.execOut(t, created, "cat", "/data/hello.txt"); got != "hello from the image" {
		t.Errorf("after the restart: %q", got)
	}
	wantRef := dataRef // what PullImage returned: the CRI has image_ref equal it
	if got := d.status(t, created).GetMounts()[0].GetImage().GetImageRef(); got != wantRef {
		t.Errorf("image_ref after the restart %q, want %q", got, wantRef)
	}
	if _, err := d.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: data}}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("RemoveImage after the restart: %v, want FailedPrecondition", err)
	}

	// Killed again, now with the container running; then removed.
	d.kill()
	d.start()
	if _, err := d.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: created}); err != nil {
		t.Fatal(err)
	}
	if got := d.imageVolumeMounts(); len(got) != 0 {
		t.Errorf("views mounted after RemoveContainer: %v", got)
	}
	if _, err := d.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: data}}); err != nil {
		t.Errorf("RemoveImage once no container mounts it: %v", err)
	}
	// cleanupAll's leak check runs at the end.
}
