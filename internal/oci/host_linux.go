package oci

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"

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
	h.Capabilities = boundingSet()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		h.NofileHard = rl.Max
	}
	return h
}

// boundingSet reads crind's capability bounding set; nil if unknown.
func boundingSet() []string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil
		}
		return capabilitiesFromMask(mask)
	}
	return nil
}
