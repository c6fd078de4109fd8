//go:build soak

package soak

// The end of a soak: everything stopped and removed, then what is left.

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/harness"
)

// teardown stops the long-running containers (checking their exit codes),
// removes every pod and image, stops crind and checks what is left.
func (s *soak) teardown() {
	t := s.t
	for _, lp := range s.longPods() {
		if lp.ctr == "" {
			// Its container was removed after a shim kill and no new
			// one could be made yet (a fault): nothing to stop.
			continue
		}
		t0 := time.Now()
		err := s.timed("StopContainer", func(ctx context.Context) error {
			_, err := s.e.rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: lp.ctr, Timeout: 10})
			return err
		})
		if err != nil {
			s.check(t0, fmt.Sprintf("stop long pod %d", lp.idx), err)
			continue
		}
		s.checkExit(lp.ctr, lp.pod, lp.code, t0)
	}
	s.checkImageFs()
	harness.RemoveAllPods(t, s.e.rs)
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	if imgs, err := s.e.is.ListImages(ctx, &runtimeapi.ListImagesRequest{}); err == nil {
		for _, img := range imgs.Images {
			if _, err := s.e.is.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img.Id}}); err != nil {
				s.problem("RemoveImage %s: %v", img.Id, err)
			}
		}
	}
	var smp sample
	s.e.hostCounts(&smp)
	s.e.stop()
	fmt.Printf("soak: after removing everything: %d shims, %d processes in the cgroups, %d mounts, %d netns, %d cgroups, %d veths, %d IPAM, %d layers, %d files\n",
		smp.shims, smp.procs, smp.mounts, smp.netns, smp.cgroups, smp.veths, smp.ipam, smp.layers, smp.files)
	s.checkNoLeaks()
}

// checkImageFs compares ImageFsInfo's used bytes with what du(1) counts
// in crind's image dir at the end of the churn: they must agree within 1%
// (nothing left on disk that the store does not count).
func (s *soak) checkImageFs() {
	ctx, cancel := ctxFor(time.Minute)
	defer cancel()
	resp, err := s.e.is.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil || len(resp.GetImageFilesystems()) == 0 {
		s.problem("ImageFsInfo: %v (%d filesystems)", err, len(resp.GetImageFilesystems()))
		return
	}
	got := int64(resp.ImageFilesystems[0].GetUsedBytes().GetValue())
	out, err := exec.Command("du", "-s", "-x", "-B1", filepath.Join(s.e.root, "image")).Output()
	if err != nil {
		s.problem("du of the image dir: %v", err)
		return
	}
	want, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		s.problem("du said %q: %v", out, err)
		return
	}
	fmt.Printf("soak: ImageFsInfo used %d bytes, du of the image dir %d\n", got, want)
	if d := got - want; d > want/100 || -d > want/100 {
		s.problem("ImageFsInfo used bytes %d, du of the image dir %d: off by more than 1%%", got, want)
	}
}

// checkNoLeaks is harness.CheckNoLeaks and testnet's, plus the cgroups,
// namespace pins, layers and files the run's crind may have left.
func (s *soak) checkNoLeaks() {
	e, t := s.e, s.t
	harness.CheckNoLeaks(t, e.root, e.state)
	e.net.CheckNoLeaks(t)
	if ents, _ := os.ReadDir(filepath.Join(e.state, "ns")); len(ents) > 0 {
		for _, x := range ents {
			t.Errorf("leaked namespace pins: %s", x.Name())
		}
	}
	for _, b := range e.cgroupBases() {
		_ = filepath.WalkDir(b, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != b {
				t.Errorf("leaked cgroup: %s", p)
			}
			return nil
		})
	}
	for _, l := range append(e.layerDirs(), e.imageLeftovers()...) {
		t.Errorf("leaked layer, blob or rootfs dir: %s", l)
	}
	// What crind keeps with nothing left to run: its stores and the
	// pause binary it copies out for infra containers.
	keep := map[string]bool{"crin.db": true, "image/meta.db": true, "pause-rootfs/pause": true}
	var files []string
	for _, d := range []string{e.root, e.state} {
		_ = filepath.WalkDir(d, func(p string, x fs.DirEntry, err error) error {
			if err != nil || x.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(d, p)
			if !keep[rel] {
				files = append(files, p)
			}
			return nil
		})
	}
	for _, f := range files[:min(len(files), 40)] {
		t.Errorf("leaked file: %s", f)
	}
	if len(files) > 40 {
		t.Errorf("... and %d more leaked files", len(files)-40)
	}
}
