package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/crin-dev/crin/internal/runtime"
)

var _ runtime.Checker = (*Runtime)(nil)

// Check looks for what the OCI runtime is known to refuse on this host.
// A runtime whose features say it has no systemd cgroup driver (crin-lxc,
// which takes cgroupfs paths only) cannot run under crind's systemd
// driver: every container would fail at create. And crun refuses a
// hybrid cgroup layout: crun (1.8 and later alike) runs on cgroup v1 or
// v2 but refuses a host whose cgroup v2 mount holds controllers while the
// others are on v1 hierarchies ("cgroups in hybrid mode not supported"),
// which is this project's CI machine with hugetlb alone on cgroup2. runc
// copes with that layout.
func (o *Runtime) Check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if o.cfg.SystemdCgroup && noSystemdDriver(cctx, o.cfg.Binary) {
		return fmt.Errorf("runtime %s: %s has no systemd cgroup driver (its features say cgroup.systemd false), and crind runs with cri.cgroup_driver systemd: set it to \"cgroupfs\" to use this handler: %w",
			o.cfg.Name, o.cfg.Binary, errdefs.ErrFailedPrecondition)
	}
	ver, err := exec.CommandContext(cctx, o.cfg.Binary, "--version").Output()
	if err != nil {
		return fmt.Errorf("runtime %s: %s --version: %w", o.cfg.Name, o.cfg.Binary, err)
	}
	if !bytes.HasPrefix(ver, []byte("crun ")) {
		return nil
	}
	mnt, ctrls, err := hybridV2Controllers(cgroups.Mode(), "/sys/fs/cgroup/unified")
	if err != nil {
		return fmt.Errorf("runtime %s: cgroup layout: %w", o.cfg.Name, err)
	}
	if len(ctrls) > 0 {
		return fmt.Errorf("runtime %s: crun refuses this host's hybrid cgroup layout: controller(s) %s are on the cgroup v2 mount %s while the others are on cgroup v1; bind them to a v1 hierarchy to use crun: %w",
			o.cfg.Name, strings.Join(ctrls, ","), mnt, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// noSystemdDriver reports whether "bin features" (asked without
// --systemd-cgroup, which such a runtime refuses) says the runtime has no
// systemd cgroup driver. A runtime that says nothing is taken at its word
// at create.
func noSystemdDriver(ctx context.Context, bin string) bool {
	out, err := exec.CommandContext(ctx, bin, "features").Output()
	if err != nil {
		return false
	}
	var f features.Features
	if json.Unmarshal(out, &f) != nil || f.Linux == nil || f.Linux.Cgroup == nil || f.Linux.Cgroup.Systemd == nil {
		return false
	}
	return !*f.Linux.Cgroup.Systemd
}

// hybridV2Controllers returns, on a hybrid host (cgroup v1 hierarchies and
// the cgroup2 mount at unified), that mount and the controllers enabled on
// it; on a pure v1 or v2 host it returns no controllers.
func hybridV2Controllers(mode cgroups.CGMode, unified string) (string, []string, error) {
	if mode != cgroups.Hybrid {
		return "", nil, nil
	}
	b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers"))
	if err != nil {
		return "", nil, err
	}
	return unified, strings.Fields(string(b)), nil
}
