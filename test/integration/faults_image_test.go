//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// pullErr pulls ref and returns the gRPC status of the failure (nil if the
// pull worked).
func (d *daemon) pullErr(ctx context.Context, ref string) *status.Status {
	_, err := d.is.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	return st
}

// checkAlive fails the test unless crind still runs and serves CRI.
func (d *daemon) checkAlive(t *testing.T, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("crind does not answer after %s: %v\n%s", after, err, tail(d.logBuf.String(), 4000))
	}
	if strings.Contains(d.logBuf.String(), "panic") {
		t.Errorf("crind log mentions a panic after %s", after)
	}
}

// procStatusKB reads a "VmXxx:  N kB" line of /proc/<pid>/status.
func procStatusKB(t *testing.T, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// TestImageFaultsUnreachableHosts pulls from hosts that do not resolve:
// directly, behind a mirror that answers 404 (the air-gapped node), and a
// layer blob redirected to one. Each is a clean error with a documented
// code naming the host, and crind keeps serving (it used to crash on every
// one of them).
func TestImageFaultsUnreachableHosts(t *testing.T) {
	runsOn(t, oci)
	mirror := imagetest.StartRegistry(t) // has nothing: answers 404
	faults := &imagetest.Faults{}
	redirecting := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	imagetest.Push(t, redirecting, "library/busybox:latest", imagetest.Busybox(t))
	faults.Set(imagetest.RedirectBlobs)
	d := startDaemon(t, daemonOptions{extraConfig: fmt.Sprintf(`
[registry.mirrors."mirrored.nosuchhost.invalid"]
endpoints = ["http://%s"]
`, mirror)})

	tests := []struct {
		name  string
		ref   string
		code  codes.Code
		names []string
	}{
		{"host does not resolve", "nosuchhost.invalid/foo:1", codes.Unavailable, []string{"nosuchhost.invalid"}},
		{"mirror 404 and upstream does not resolve", "mirrored.nosuchhost.invalid/foo:1", codes.NotFound,
			[]string{"http://" + mirror, "not found", "https://mirrored.nosuchhost.invalid", "no such host"}},
		{"mirror 404 by digest", "mirrored.nosuchhost.invalid/foo@sha256:" + strings.Repeat("0", 64), codes.NotFound,
			[]string{"http://" + mirror, "https://mirrored.nosuchhost.invalid"}},
		{"blob redirected to a host that does not resolve", redirecting + "/library/busybox:latest", codes.Unavailable,
			[]string{imagetest.RedirectHost}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := d.pullErr(ctxT(t), tc.ref)
			if st == nil {
				t.Fatalf("pull %s worked", tc.ref)
			}
			if st.Code() != tc.code {
				t.Errorf("pull %s: code %v (%s), want %v", tc.ref, st.Code(), st.Message(), tc.code)
			}
			for _, n := range tc.names {
				if !strings.Contains(st.Message(), n) {
					t.Errorf("message %q does not name %q", st.Message(), n)
				}
			}
			d.checkAlive(t, "pull of "+tc.ref)
		})
	}
	// The redirect gone, the image pulls and nothing of the failed pull
	// is in the way.
	faults.Set(imagetest.Healthy)
	d.pull(t, redirecting+"/library/busybox:latest")
}

// TestImageFaultHugeManifest serves a 50 MB manifest: the pull is refused
// before crind reads more than the cap, so its peak RSS barely moves (it
// used to read and parse the whole body: 35 → 322 MB).
func TestImageFaultHugeManifest(t *testing.T) {
	runsOn(t, oci)
	faults := &imagetest.Faults{}
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	imagetest.Push(t, host, "library/busybox:latest", imagetest.Busybox(t))
	d := startDaemon(t, daemonOptions{})
	pid := d.cmd.Process.Pid
	before := procStatusKB(t, pid, "VmHWM")

	faults.Set(imagetest.HugeManifests)
	st := d.pullErr(ctxT(t), host+"/library/busybox:latest")
	if st == nil || st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "image.max_manifest_bytes") {
		t.Fatalf("pull of a %d-byte manifest: %v; want ResourceExhausted naming image.max_manifest_bytes", imagetest.HugeManifestSize, st)
	}
	d.checkAlive(t, "a huge manifest")
	after := procStatusKB(t, pid, "VmHWM")
	if grown := after - before; grown > 40<<10 {
		t.Errorf("crind's peak RSS grew by %d kB (%d → %d kB) reading a refused manifest", grown, before, after)
	}
	t.Logf("crind peak RSS %d kB before, %d kB after the huge manifest", before, after)

	faults.Set(imagetest.Healthy)
	d.pull(t, host+"/library/busybox:latest")
}

// TestImageFaultStalledRegistry stops sending mid-blob: the pull is
// abandoned after image.pull_progress_timeout (it used to hang until the
// 30 min pull timeout), no partial blob stays, and the same image pulls
// once the registry behaves.
func TestImageFaultStalledRegistry(t *testing.T) {
	runsOn(t, oci)
	faults := &imagetest.Faults{}
	host := imagetest.StartRegistryWithOptions(t, imagetest.RegistryOptions{Faults: faults})
	img := imagetest.Busybox(t)
	imagetest.Push(t, host, "library/busybox:latest", img)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	layerDigest, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{extraConfig: `
[image]
pull_progress_timeout = "3s"
`})
	faults.Set(imagetest.StallBlobs)
	// Far more than the progress timeout, far less than the pull timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := d.pullErr(ctx, host+"/library/busybox:latest")
	if st == nil || st.Code() != codes.Unavailable || !strings.Contains(st.Message(), host) ||
		!strings.Contains(st.Message(), "image.pull_progress_timeout") {
		t.Fatalf("pull from a stalled registry: %v; want Unavailable naming %s and image.pull_progress_timeout", st, host)
	}
	d.checkAlive(t, "a stalled pull")
	blobs := filepath.Join(d.root, "image", "blobs")
	if ents, _ := os.ReadDir(filepath.Join(blobs, "tmp")); len(ents) != 0 {
		t.Errorf("%d partial downloads left in %s", len(ents), filepath.Join(blobs, "tmp"))
	}
	if _, err := os.Stat(filepath.Join(blobs, "sha256", layerDigest.Hex)); err == nil {
		t.Errorf("layer blob %s stored although its download stalled", layerDigest)
	}

	faults.Set(imagetest.Healthy)
	id := d.pull(t, host+"/library/busybox:latest")
	if id == "" {
		t.Fatal("pull gave no image id")
	}
}
