package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultDevices are created in every container's /dev.
func defaultDevices() []specs.LinuxDevice {
	mode := os.FileMode(0o666)
	dev := func(p string, major, minor int64) specs.LinuxDevice {
		m := mode
		var zero uint32
		return specs.LinuxDevice{Path: p, Type: "c", Major: major, Minor: minor, FileMode: &m, UID: &zero, GID: &zero}
	}
	return []specs.LinuxDevice{
		dev("/dev/null", 1, 3), dev("/dev/zero", 1, 5), dev("/dev/full", 1, 7),
		dev("/dev/random", 1, 8), dev("/dev/urandom", 1, 9), dev("/dev/tty", 5, 0),
	}
}

// defaultDeviceRules deny every device, then allow the default ones, the
// pty multiplexer and the pty slaves.
func defaultDeviceRules() []specs.LinuxDeviceCgroup {
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	for _, d := range defaultDevices() {
		rules = append(rules, deviceRule(d, "rwm"))
	}
	ptmx, pts := int64(5), int64(136)
	two := int64(2)
	rules = append(rules,
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &ptmx, Minor: &two, Access: "rwm"},
		specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &pts, Access: "rwm"},
	)
	return rules
}

func deviceRule(d specs.LinuxDevice, access string) specs.LinuxDeviceCgroup {
	major, minor := d.Major, d.Minor
	return specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: access}
}

// criDevices resolves the CRI devices on the host. A host_path that is a
// directory adds every device beneath it, at the same place under
// container_path.
func criDevices(in []*runtimeapi.Device) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	var (
		devs  []specs.LinuxDevice
		rules []specs.LinuxDeviceCgroup
	)
	for i, d := range in {
		field := fmt.Sprintf("devices[%d]", i)
		hp, cp, perms := d.GetHostPath(), d.GetContainerPath(), d.GetPermissions()
		if err := checkContainerPath(hp); err != nil {
			return nil, nil, invalidf("%s.host_path %q: %s", field, hp, err)
		}
		if err := checkContainerPath(cp); err != nil {
			return nil, nil, invalidf("%s.container_path %q: %s", field, cp, err)
		}
		if perms == "" {
			perms = "rwm"
		}
		if !validDevicePermissions(perms) {
			return nil, nil, invalidf("%s.permissions %q: not a combination of r, w and m", field, perms)
		}
		fi, err := os.Stat(hp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, invalidf("%s.host_path %q: no such device", field, hp)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("stat device %s: %w", hp, err)
		}
		if !fi.IsDir() {
			dev, err := hostDevice(hp, path.Clean(cp))
			if err != nil {
				return nil, nil, invalidf("%s.host_path %q: %v", field, hp, err)
			}
			devs = append(devs, dev)
			rules = append(rules, deviceRule(dev, perms))
			continue
		}
		sub, err := hostDevicesUnder(hp, path.Clean(cp), nil)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", field, err)
		}
		for _, dev := range sub {
			devs = append(devs, dev)
			rules = append(rules, deviceRule(dev, perms))
		}
	}
	return devs, rules, nil
}

func validDevicePermissions(p string) bool {
	if len(p) == 0 || len(p) > 3 {
		return false
	}
	for i, c := range p {
		if !strings.ContainsRune("rwm", c) || strings.ContainsRune(p[i+1:], c) {
			return false
		}
	}
	return true
}

// hostDevice describes the device node at hostPath (following symlinks,
// as /dev/disk/by-id links are) for creation at containerPath.
func hostDevice(hostPath, containerPath string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(hostPath, &st); err != nil {
		return specs.LinuxDevice{}, err
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return specs.LinuxDevice{}, errors.New("not a device node")
	}
	mode := os.FileMode(st.Mode & 0o777)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path: containerPath, Type: typ,
		Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev)),
		FileMode: &mode, UID: &uid, GID: &gid,
	}, nil
}

// hostDevicesUnder lists the device nodes under dir (not following
// symlinks, skipping the subdirectories in skip), placed under cdir.
func hostDevicesUnder(dir, cdir string, skip []string) ([]specs.LinuxDevice, error) {
	var out []specs.LinuxDevice
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrPermission) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
			return nil
		}
		dev, err := hostDevice(p, path.Join(cdir, filepath.ToSlash(rel)))
		if err != nil {
			return nil // gone or changed since listed
		}
		out = append(out, dev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list devices under %s: %w", dir, err)
	}
	return out, nil
}

// privilegedDevices are every device of the host, created in the
// container's own /dev tmpfs; the pseudo-terminal and namespace-specific
// ones are made by the runtime.
func privilegedDevices() ([]specs.LinuxDevice, error) {
	devs, err := hostDevicesUnder("/dev", "/dev", []string{"pts", "shm", "mqueue", "fd"})
	if err != nil {
		return nil, err
	}
	out := devs[:0]
	for _, d := range devs {
		switch d.Path {
		case "/dev/console", "/dev/ptmx", "/dev/tty":
			continue
		}
		out = append(out, d)
	}
	return out, nil
}
