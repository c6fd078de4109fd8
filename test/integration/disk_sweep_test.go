//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/test/poll"
)

// plantDiskOrphans leaves, while crind is down, what a crind killed in
// the middle of a pull, a create or a remove leaves on disk for objects
// no record owns, and returns their paths.
func (d *daemon) plantDiskOrphans(t *testing.T) []string {
	t.Helper()
	img := filepath.Join(d.root, "image")
	pod, ctr, shimPod := randHex(32), randHex(32), randHex(32)
	files := []string{
		filepath.Join(d.root, "pods", pod, "hostname"),       // a pod's files
		filepath.Join(d.state, "c", ctr, "config.json"),      // a container's runtime state dir
		filepath.Join(d.state, "c", ".pod-"+shimPod, "x"),    // a pod shim's dir
		filepath.Join(img, "containers", ctr, "upper", "f"),  // a rootfs without a lease
		filepath.Join(img, "l", "ORPHANLAYER", "bin", "x"),   // a layer no record names
		filepath.Join(img, "blobs", "sha256", randHex(32)),   // a blob no image uses
		filepath.Join(img, "blobs", "tmp", "download-12345"), // a download in progress
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("orphan"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return []string{
		filepath.Join(d.root, "pods", pod), filepath.Join(d.state, "c", ctr),
		filepath.Join(d.state, "c", ".pod-"+shimPod), filepath.Join(img, "containers", ctr),
		filepath.Join(img, "l", "ORPHANLAYER"), files[5], files[6],
	}
}

// loseContainerRecord makes container id one no record owns while crind
// is down, with its rootfs unmounted (a store that lost the record, a
// node that rebooted): its upper dir, lease and runtime state stay.
func (d *daemon) loseContainerRecord(t *testing.T, id string) {
	t.Helper()
	rootfs := filepath.Join(d.root, "image", "containers", id, "rootfs")
	if err := syscall.Unmount(rootfs, syscall.MNT_DETACH); err != nil {
		t.Fatalf("unmount %s: %v", rootfs, err)
	}
	st, err := store.Open(filepath.Join(d.root, "crin.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.DeleteContainer(id); err != nil {
		t.Fatal(err)
	}
}

// TestSweepDiskOrphans: what no record owns on disk after a crash (pod
// dirs, runtime state dirs, shim dirs, rootfs with or without a lease,
// unrecorded layers, unused blobs, partial downloads) is removed by the
// restarted crind's start-up sweep; what is owned (a running container,
// its pod, its rootfs, the image it runs) survives, and a name the sweep
// cannot place is left alone.
func TestSweepDiskOrphans(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("sweep")
	pod := d.runPod(t, podCfg)
	ctr := d.runContainer(t, pod, podCfg, containerConfig("keep", ref, "sleep", "3600"))
	lost := d.createContainer(t, pod, podCfg, containerConfig("lost", ref, "true"))

	d.kill()
	d.loseContainerRecord(t, lost)
	orphans := d.plantDiskOrphans(t)
	orphans = append(orphans, filepath.Join(d.root, "image", "containers", lost))
	foreign := filepath.Join(d.root, "pods", "not-an-id")
	if err := os.MkdirAll(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	d.start()

	for _, p := range orphans {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("orphan %s survived the restart (stat: %v)", p, err)
		}
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("the sweep removed %s, a name it cannot place: %v", foreign, err)
	}
	_ = os.Remove(foreign)
	if out := d.execOut(t, ctr, "echo", "alive"); out != "alive" {
		t.Fatalf("exec in the owned container after the sweep: %q", out)
	}
	for _, p := range []string{filepath.Join(d.root, "pods", pod), filepath.Join(d.root, "image", "containers", ctr, "upper")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("owned %s is gone after the sweep: %v", p, err)
		}
	}
	if _, err := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
		t.Fatal(err)
	}
	// The image still runs containers: its layers and blobs survived.
	c2 := d.runContainer(t, pod, podCfg, containerConfig("again", ref, "sleep", "3600"))
	if out := d.execOut(t, c2, "cat", "/etc/hostname"); out == "" {
		t.Fatal("empty /etc/hostname in a container made after the sweep")
	}
	if !strings.Contains(d.logBuf.String(), "released the rootfs of a container no record owns") {
		t.Error("crind did not log the rootfs it released")
	}
}

// TestImageFsInfoAgreesWithDu: after a churn of pulls, removals and
// containers, ImageFsInfo's used bytes are what du(1) counts in the image
// dir (within 1%), so nothing the store no longer owns is left on disk
// uncounted, and nothing counted is gone.
func TestImageFsInfoAgreesWithDu(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	host := strings.SplitN(ref, "/", 2)[0]
	noise := noiseImage(t, host)
	d.pull(t, ref)
	podCfg := podConfig("fsinfo")
	pod := d.runPod(t, podCfg)
	for i := range 3 {
		d.pull(t, noise)
		c := d.createContainer(t, pod, podCfg, containerConfig("churn"+strconv.Itoa(i), noise, "/noise"))
		if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: c}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.is.RemoveImage(ctxT(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: noise}}); err != nil {
			t.Fatal(err)
		}
	}
	d.runContainer(t, pod, podCfg, containerConfig("stay", ref, "sleep", "3600"))

	resp, err := d.is.ImageFsInfo(ctxT(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.ImageFilesystems[0].UsedBytes.Value
	out, err := exec.Command("du", "-s", "-x", "-B1", filepath.Join(d.root, "image")).Output()
	if err != nil {
		t.Fatalf("du: %v", err)
	}
	want, err := strconv.ParseUint(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		t.Fatalf("du said %q: %v", out, err)
	}
	diff := int64(got) - int64(want)
	if diff < 0 {
		diff = -diff
	}
	if diff > int64(want)/100 {
		t.Fatalf("ImageFsInfo used bytes %d, du of the image dir %d: off by %d, more than 1%%", got, want, diff)
	}
	t.Logf("ImageFsInfo %d bytes, du %d", got, want)
}

// entries lists the names in dir.
func entries(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// TestSweepAfterKillMidPull: crind SIGKILLed in the middle of a pull
// (one layer downloaded and unpacked, the other half downloaded) leaves a
// partial download, a layer and blobs no image uses; the restarted crind
// removes them all and keeps the image it had, and the pull works again.
func TestSweepAfterKillMidPull(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	faults := &imagetest.Faults{}
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	ref := host + "/library/busybox:latest"
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	img := imagetest.Image(t, v1.Config{Cmd: []string{"/noise"}},
		imagetest.Layer(t, imagetest.File("small", "a layer under the stall's threshold", 0o644)),
		imagetest.Layer(t, imagetest.NoiseFile("noise", 1<<20)))
	imagetest.Push(t, host, "library/twolayers:1", img)
	d.pull(t, ref)
	imgDir := filepath.Join(d.root, "image")
	layers, blobs := entries(t, filepath.Join(imgDir, "l")), entries(t, filepath.Join(imgDir, "blobs", "sha256"))

	faults.Set(imagetest.StallBlobs)
	pullErr := make(chan error, 1)
	go func() {
		_, err := d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: host + "/library/twolayers:1"}})
		pullErr <- err
	}()
	tmp := filepath.Join(imgDir, "blobs", "tmp")
	poll.Until(t, 2*time.Minute, "the stalled pull wrote half its big layer and unpacked the small one", func() (bool, string) {
		partial, unpacked := false, len(entries(t, filepath.Join(imgDir, "l"))) > len(layers)
		for name := range entries(t, tmp) {
			if fi, err := os.Stat(filepath.Join(tmp, name)); err == nil && fi.Size() >= 256<<10 {
				partial = true
			}
		}
		return partial && unpacked, fmt.Sprintf("partial download %v, small layer unpacked %v", partial, unpacked)
	})
	d.kill()
	<-pullErr
	faults.Set(imagetest.Healthy)
	d.start()

	if left := entries(t, tmp); len(left) > 0 {
		t.Errorf("partial downloads left after the restart: %v", left)
	}
	for name := range entries(t, filepath.Join(imgDir, "l")) {
		if !layers[name] && !strings.HasPrefix(name, ".") {
			t.Errorf("layer dir %s of the interrupted pull left after the restart", name)
		}
	}
	if got := entries(t, filepath.Join(imgDir, "blobs", "sha256")); len(got) != len(blobs) {
		t.Errorf("blobs after the restart: %d, want the %d of the image crind has", len(got), len(blobs))
	}
	for name := range layers {
		if _, err := os.Stat(filepath.Join(imgDir, "l", name)); err != nil {
			t.Errorf("layer %s of the pulled image is gone: %v", name, err)
		}
	}
	d.pull(t, host+"/library/twolayers:1")
	podCfg := podConfig("midpull")
	pod := d.runPod(t, podCfg)
	c := d.runContainer(t, pod, podCfg, containerConfig("bb", ref, "sleep", "3600"))
	if out := d.execOut(t, c, "echo", "ok"); out != "ok" {
		t.Fatalf("exec: %q", out)
	}
}
