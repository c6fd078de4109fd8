package oci

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

func (a *adjuster) devices(adj *api.ContainerAdjustment) error {
	l := adj.GetLinux()
	if len(l.GetDevices()) == 0 {
		return nil
	}
	for _, d := range applyRemovals(l.Devices, a.removeDevice) {
		plugin := a.ownerOf((*api.OwningPlugins).DeviceOwner, d.Path)
		dev, err := checkDevice(d)
		if err != nil {
			return a.fail(plugin, err)
		}
		a.removeDevice(dev.Path)
		lx := a.linux()
		lx.Devices = append(lx.Devices, dev)
		if dev.Type == "p" {
			continue // FIFOs are not governed by the devices cgroup
		}
		if lx.Resources == nil {
			lx.Resources = &specs.LinuxResources{}
		}
		rule := deviceRule(dev, deviceAccess(dev.FileMode))
		rule.Type = ruleType(dev.Type)
		lx.Resources.Devices = append(lx.Resources.Devices, rule)
	}
	return nil
}

// removeDevice drops the device at p and the allow rule made for exactly
// that device node, if any.
func (a *adjuster) removeDevice(p string) {
	if a.s.Linux == nil {
		return
	}
	l := a.s.Linux
	i := slices.IndexFunc(l.Devices, func(d specs.LinuxDevice) bool { return path.Clean(d.Path) == p })
	if i < 0 {
		return
	}
	d := l.Devices[i]
	l.Devices = slices.Delete(l.Devices, i, i+1)
	if l.Resources == nil {
		return
	}
	// Another device node may share the numbers (a second path for it).
	if slices.ContainsFunc(l.Devices, func(o specs.LinuxDevice) bool {
		return o.Type == d.Type && o.Major == d.Major && o.Minor == d.Minor
	}) {
		return
	}
	l.Resources.Devices = slices.DeleteFunc(l.Resources.Devices, func(r specs.LinuxDeviceCgroup) bool {
		return r.Allow && r.Type == ruleType(d.Type) && r.Major != nil && *r.Major == d.Major && r.Minor != nil && *r.Minor == d.Minor
	})
}

// ruleType is the devices cgroup type of a device node type: an
// unbuffered character device is a character device.
func ruleType(t string) string {
	if t == "u" {
		return "c"
	}
	return t
}

func checkDevice(d *api.LinuxDevice) (specs.LinuxDevice, error) {
	field := fmt.Sprintf("linux.devices[%q]", d.Path)
	if err := checkContainerPath(d.Path); err != nil {
		return specs.LinuxDevice{}, invalidf("%s path: %v", field, err)
	}
	switch d.Type {
	case "c", "b", "u":
		if d.Major < 0 || d.Minor < 0 {
			return specs.LinuxDevice{}, invalidf("%s: device number %d:%d negative", field, d.Major, d.Minor)
		}
	case "p":
	default:
		return specs.LinuxDevice{}, invalidf("%s type %q: not one of c, b, u, p", field, d.Type)
	}
	if m := d.FileMode.Get(); m != nil && *m&^os.ModePerm != 0 {
		return specs.LinuxDevice{}, invalidf("%s fileMode %#o: not permission bits", field, uint32(*m))
	}
	dev := d.ToOCI()
	dev.Path = path.Clean(d.Path)
	return dev, nil
}

// deviceAccess grants read and write as the node's mode does (both when
// the mode is unset) and mknod, as CRI devices get.
func deviceAccess(mode *os.FileMode) string {
	if mode == nil {
		return "rwm"
	}
	var b strings.Builder
	if *mode&0o444 != 0 {
		b.WriteByte('r')
	}
	if *mode&0o222 != 0 {
		b.WriteByte('w')
	}
	b.WriteByte('m')
	return b.String()
}

// cdiDevices resolves the CDI devices in the configured spec directories
// and applies their edits to the spec: all of them or none.
func (a *adjuster) cdiDevices(adj *api.ContainerAdjustment) error {
	if len(adj.CDIDevices) == 0 {
		return nil
	}
	var names []string
	for _, d := range adj.CDIDevices {
		if d == nil {
			continue
		}
		plugin := a.ownerOf((*api.OwningPlugins).CdiDeviceOwner, d.Name)
		field := fmt.Sprintf("CDI_devices[%q]", d.Name)
		if _, _, _, err := parser.ParseQualifiedName(d.Name); err != nil {
			return a.fail(plugin, invalidf("%s: %v", field, err))
		}
		if len(a.o.CDISpecDirs) == 0 {
			return a.fail(plugin, unsupportedf("%s: CDI is not configured (no CDI spec directories)", field))
		}
		names = append(names, d.Name)
	}
	if len(names) == 0 {
		return nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(a.o.CDISpecDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI registry %s: %w", strings.Join(a.o.CDISpecDirs, ", "), err)
	}
	unresolved, err := cache.InjectDevices(a.s, names...)
	if len(unresolved) > 0 {
		n := unresolved[0]
		var specErrs []error
		for _, errs := range cache.GetErrors() {
			specErrs = append(specErrs, errs...)
		}
		why := fmt.Errorf("no CDI spec in %s defines it: %w", strings.Join(a.o.CDISpecDirs, ", "), errdefs.ErrNotFound)
		if len(specErrs) > 0 {
			why = fmt.Errorf("%w (spec errors: %v)", why, errors.Join(specErrs...))
		}
		return a.fail(a.ownerOf((*api.OwningPlugins).CdiDeviceOwner, n), fmt.Errorf("CDI_devices[%q]: %w", n, why))
	}
	if err != nil {
		// The edits could not be made (a device node missing on the
		// host): the host cannot provide the device.
		return a.fail(a.ownerOf((*api.OwningPlugins).CdiDeviceOwner, names[0]),
			unsupportedf("CDI_devices%q: %v", names, err))
	}
	return nil
}
