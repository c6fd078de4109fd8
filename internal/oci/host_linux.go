package oci

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// DetectHost describes this node: its cgroup layout, whether AppArmor is
// enabled, crind's capability bounding set and its RLIMIT_NOFILE. It looks
// once per process and returns that description from then on (shared: do
// not change it): every spec used to read /proc/self/mountinfo for it,
// which grows with the node's mounts (about 1 ms of CPU per container with
// 30 pods running). A cgroup hierarchy mounted after crind started is seen
// after a restart, as with the cgroup mode itself.
func DetectHost() *Host { return detectedHost() }

var detectedHost = sync.OnceValue(detectHost)

func detectHost() *Host {
	h := &Host{CgroupV2: cgroups.Mode() == cgroups.Unified}
	h.NoHugetlb = !hugetlbController(h.CgroupV2)
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

// hugetlbController reports whether pods can get hugetlb limits: on v2 the
// root enables the controller, on v1 (and hybrid) a hierarchy mounts it.
func hugetlbController(v2 bool) bool {
	if v2 {
		b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return err == nil && slices.Contains(strings.Fields(string(b)), "hugetlb")
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true // unknown: keep the limits, as before
	}
	for _, line := range strings.Split(string(b), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(post)
		if ok && len(f) >= 3 && f[0] == "cgroup" && slices.Contains(strings.Split(f[2], ","), "hugetlb") {
			return true
		}
	}
	return false
}
