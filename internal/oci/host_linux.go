package oci

import (
	"bytes"
	"os"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// DetectHost describes this node: its cgroup layout, whether AppArmor is
// enabled, and crind's own RLIMIT_NOFILE.
func DetectHost() *Host {
	h := &Host{CgroupV2: cgroups.Mode() == cgroups.Unified}
	if b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled"); err == nil {
		h.AppArmor = bytes.HasPrefix(b, []byte("Y"))
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		h.NofileHard = rl.Max
	}
	return h
}
