//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPullThroughMirror pulls docker.io/library/busybox by tag and by digest
// through a configured mirror (docker.io itself is unreachable here), checks
// ImageStatus/ListImages, runs it, and removes it by tag, digest and id.
func TestPullThroughMirror(t *testing.T) {
	runsOn(t, oci)
	host := imagetest.StartRegistry(t)
	digest := imagetest.Push(t, host, "cache/library/busybox:latest", imagetest.Busybox(t))
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf(`
[registry.mirrors."docker.io"]
endpoints = ["http://%s/cache"]
`, host)})

	id := d.pull(t, "busybox")
	st, err := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil || st.Image == nil {
		t.Fatalf("ImageStatus busybox: %v %v", st, err)
	}
	img := st.Image
	if img.Id != id || !contains(img.RepoTags, "docker.io/library/busybox:latest") ||
		!contains(img.RepoDigests, "docker.io/library/busybox@"+digest) || img.Size == 0 {
		t.Errorf("ImageStatus = id %s tags %v digests %v size %d; want id %s, the docker.io name and digest %s",
			img.Id, img.RepoTags, img.RepoDigests, img.Size, id, digest)
	}
	if img.GetUid().GetValue() != 0 && img.Username != "" {
		t.Errorf("image user: uid %v username %q", img.Uid, img.Username)
	}
	byDigest := d.pull(t, "docker.io/library/busybox@"+digest)
	if byDigest != id {
		t.Errorf("pull by digest gave %s, by tag %s", byDigest, id)
	}
	list, err := d.is.ListImages(ctxT(t), &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 {
		t.Errorf("ListImages: %v, %d images", err, len(list.GetImages()))
	}
	list, _ = d.is.ListImages(ctxT(t), &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox@" + digest}}})
	if len(list.GetImages()) != 1 {
		t.Errorf("ListImages filtered by digest: %d images", len(list.GetImages()))
	}
	fs, err := d.is.ImageFsInfo(ctxT(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(fs.ImageFilesystems) == 0 || fs.ImageFilesystems[0].UsedBytes.GetValue() == 0 {
		t.Errorf("ImageFsInfo: %v %v", fs, err)
	}

	podCfg := podConfig("mirror")
	pod := d.runPod(t, podCfg)
	c := d.runContainer(t, pod, podCfg, containerConfig("c", "busybox", "sleep", "1000"))
	if got := d.execOut(t, c, "id", "-u"); got != "0" {
		t.Errorf("id -u = %q", got)
	}
	cst := d.status(t, c)
	if cst.Image.GetImage() != "docker.io/library/busybox:latest" || cst.ImageId != id {
		t.Errorf("container image %q id %q", cst.Image.GetImage(), cst.ImageId)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
		t.Fatal(err)
	}

	for _, ref := range []string{"busybox", "docker.io/library/busybox@" + digest, id} {
		if _, err := d.is.RemoveImage(ctxT(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			t.Errorf("RemoveImage %s: %v", ref, err)
		}
		st, err := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: id}})
		if err != nil || st.Image != nil {
			t.Errorf("ImageStatus after RemoveImage %s: %v %v", ref, st, err)
		}
		d.pull(t, "busybox")
	}
}

// TestMaliciousLayersRefused pushes layers that try to write outside their
// root with "..", absolute paths, symlinks and hard links; each pull is
// refused and writes nothing outside.
func TestMaliciousLayersRefused(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	host := imagetest.StartRegistry(t)
	outside, err := os.MkdirTemp("", "crinoutside")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel := strings.Repeat("../", 20) + strings.TrimPrefix(outside, "/")
	for _, tc := range []struct {
		name    string
		entries []imagetest.Entry
		// replaces: the layer legitimately replaces its own symlink with a
		// file (tar semantics); the pull may succeed but must not write
		// through the link.
		replaces bool
	}{
		{"dotdot", []imagetest.Entry{imagetest.File(rel+"/dotdot", "x", 0o644)}, false},
		{"symlink dir", []imagetest.Entry{imagetest.Symlink("link", outside), imagetest.File("link/through-symlink", "x", 0o644)}, false},
		{"relative symlink dir", []imagetest.Entry{imagetest.Symlink("up", rel), imagetest.File("up/through-relative", "x", 0o644)}, false},
		{"symlink overwrite", []imagetest.Entry{imagetest.Symlink("v", victim), imagetest.File("v", "pwned", 0o644)}, true},
		{"hardlink out", []imagetest.Entry{imagetest.Hardlink("hl", victim)}, false},
		{"hardlink dotdot", []imagetest.Entry{imagetest.Hardlink("hl", rel+"/victim")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layer := imagetest.Layer(t, tc.entries...)
			img := imagetest.Image(t, v1.Config{Cmd: []string{"sh"}}, layer)
			ref := host + "/evil/" + strings.ReplaceAll(tc.name, " ", "-") + ":latest"
			imagetest.Push(t, host, strings.TrimPrefix(ref, host+"/"), img)
			_, err := d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			if tc.replaces {
				return
			}
			if err == nil {
				t.Errorf("pull of a layer escaping its root succeeded")
			}
			st, _ := d.is.ImageStatus(ctxT(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
			if st.GetImage() != nil {
				t.Errorf("refused image is listed")
			}
		})
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files appeared outside the layer root: %v", names)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Errorf("victim file changed: %q", b)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
