package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/cgroup"
)

// SetHugetlbLimits writes huge page limits into the cgroup at cgroupsPath
// (an OCI spec's linux.cgroupsPath, in either driver's form) of a running
// container. runc's update (and so containerd-shim-runc-v2's) takes no
// hugepageLimits, so an update through the runtime leaves the limits the
// container was created with; crind writes them itself after it, as the
// runtime would at create: hugetlb.<size>.limit_in_bytes on cgroup v1,
// hugetlb.<size>.max on v2 (and .rsvd.max where the kernel has it and the
// cgroup already limits reservations). A limit already in place is left
// alone, so a runtime that does apply them (crun, crin-lxc) costs a read.
//
// A cgroup that does not exist is no error: the runtime keeps the
// container's processes elsewhere (gVisor's run in its sandbox's). A page
// size the cgroup has no file for is errdefs.ErrInvalidArgument naming it.
func SetHugetlbLimits(cgroupsPath string, limits []specs.LinuxHugepageLimit) error {
	if len(limits) == 0 || cgroupsPath == "" {
		return nil
	}
	v2 := cgroups.Mode() == cgroups.Unified
	dir := filepath.Join(cgroupRoot, cgroup.Dir(cgroupsPath))
	if !v2 {
		dir = filepath.Join(cgroupRoot, "hugetlb", cgroup.Dir(cgroupsPath))
	}
	return setHugetlbLimits(dir, v2, limits)
}

func setHugetlbLimits(dir string, v2 bool, limits []specs.LinuxHugepageLimit) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, l := range limits {
		if l.Pagesize == "" || strings.ContainsAny(l.Pagesize, "/.") {
			return fmt.Errorf("hugepage limit page size %q: %w", l.Pagesize, errdefs.ErrInvalidArgument)
		}
		want := strconv.FormatUint(l.Limit, 10)
		files := []string{"hugetlb." + l.Pagesize + ".limit_in_bytes"}
		if v2 {
			files = []string{"hugetlb." + l.Pagesize + ".max"}
			// Reservations are limited only where the runtime chose to
			// (runc 1.2 and crun do, runc 1.1 does not): keep them
			// alike.
			rsvd := "hugetlb." + l.Pagesize + ".rsvd.max"
			if b, err := os.ReadFile(filepath.Join(dir, rsvd)); err == nil && strings.TrimSpace(string(b)) != "max" {
				files = append(files, rsvd)
			}
		}
		for _, f := range files {
			p := filepath.Join(dir, f)
			b, err := os.ReadFile(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return fmt.Errorf("hugepage limit page size %q: the container's cgroup has no %s: %w", l.Pagesize, f, errdefs.ErrInvalidArgument)
			case err != nil:
				return fmt.Errorf("hugepage limit %s: %w", l.Pagesize, err)
			case strings.TrimSpace(string(b)) == want:
				continue
			}
			if err := os.WriteFile(p, []byte(want), 0); err != nil {
				if errors.Is(err, syscall.EINVAL) {
					err = fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
				}
				return fmt.Errorf("hugepage limit %s = %s: %w", l.Pagesize, want, err)
			}
		}
	}
	return nil
}
