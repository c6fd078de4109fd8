package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
)

// UnitStopper stops systemd units (cgroup.Units in production). With
// the systemd cgroup driver, a pod slice crind made and the scope of a
// container no record owns are removed by stopping their units: systemd
// owns those cgroups, kills what is left inside and removes the
// directories. A unit that is not loaded is already stopped: success.
type UnitStopper interface {
	StopUnit(ctx context.Context, name string) error
}

// layout is how this crind names cgroups.
func (s *Service) layout() cgroup.Layout {
	d := s.opts.CgroupDriver
	if d == "" {
		d = cgroup.Cgroupfs
	}
	return cgroup.Layout{Driver: d, Parent: s.opts.CgroupParent}
}

// removeUnitCgroup removes cgroup p (a slice, or a scope in runc's
// slice:prefix:name form) by stopping its unit, then removes what systemd
// left of its directory (nothing, unless the unit was never systemd's).
func (s *Service) removeUnitCgroup(ctx context.Context, p string) error {
	unit := cgroup.Unit(p)
	if s.opts.Units == nil {
		return fmt.Errorf("remove cgroup %s: unit %s: no systemd connection (cgroup driver %s)", p, unit, s.layout().Driver)
	}
	if err := s.opts.Units.StopUnit(ctx, unit); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", p, err)
	}
	dir := filepath.Join(s.cgroupFS(), cgroup.Dir(p))
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return removeCgroupDir(ctx, dir)
}

// validateRunRequest is validateRunRequest (the checks that need no
// state), the pod's cgroup parent checked in this crind's driver's form,
// and the room left on crind's disk (checkDiskRoom).
func (s *Service) validateRunRequest(cfg *runtimeapi.PodSandboxConfig) error {
	if err := validateRunRequest(cfg); err != nil {
		return err
	}
	if p := cfg.GetLinux().GetCgroupParent(); p != "" {
		if err := s.layout().CheckParent("config.linux.cgroup_parent", p); err != nil {
			return err
		}
	}
	return s.checkDiskRoom("run pod sandbox")
}
