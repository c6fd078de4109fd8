package config

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/names"
)

// BlockioClass is a named set of block I/O limits that an NRI plugin may
// give a container by name. Devices are written "/dev/path:value" and
// resolved to major:minor when crind starts.
type BlockioClass struct {
	// Weight and LeafWeight are relative weights, 10 to 1000; 0 leaves
	// them unset.
	Weight     uint16 `toml:"weight,omitempty"`
	LeafWeight uint16 `toml:"leaf_weight,omitempty"`
	// WeightDevice sets a per-device weight: "/dev/sda:500".
	WeightDevice []string `toml:"weight_device,omitempty"`
	// Throttle lists limit a device: "/dev/sda:1048576" (bytes or
	// operations per second).
	ThrottleReadBPS   []string `toml:"throttle_read_bps,omitempty"`
	ThrottleWriteBPS  []string `toml:"throttle_write_bps,omitempty"`
	ThrottleReadIOPS  []string `toml:"throttle_read_iops,omitempty"`
	ThrottleWriteIOPS []string `toml:"throttle_write_iops,omitempty"`
}

// RdtClass is a named Intel RDT class of service (resctrl group) that an
// NRI plugin may give a container by name.
type RdtClass struct {
	// ClosID is the resctrl group; empty means the class name.
	ClosID string `toml:"clos_id,omitempty"`
	// Schemata are the lines written to the group's schemata file.
	Schemata []string `toml:"schemata,omitempty"`
}

// The patterns below are compiled where a config is validated, not at
// package init: crind checks its config once, and a package-level regexp
// would stay on the heap for the daemon's life (docs/memory.md).
const (
	schemataRowPattern = `^[A-Za-z0-9_]+:[^\n]+$`
	// annotationKeyPattern is a Kubernetes annotation key: [DNS prefix/]name.
	annotationKeyPattern = `^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
)

// isClassName reports whether s is a class (or runtime) name: 1 to 63
// letters, digits, '_', '.', '-', starting with a letter or digit.
func isClassName(s string) bool { return names.Valid(s, 63, true) }

// blockioLists names every device list of a class with its key.
func (b *BlockioClass) lists() []struct {
	key  string
	vals []string
} {
	return []struct {
		key  string
		vals []string
	}{
		{"weight_device", b.WeightDevice},
		{"throttle_read_bps", b.ThrottleReadBPS},
		{"throttle_write_bps", b.ThrottleWriteBPS},
		{"throttle_read_iops", b.ThrottleReadIOPS},
		{"throttle_write_iops", b.ThrottleWriteIOPS},
	}
}

// validateClasses reports bad [cri.blockio_classes] and [cri.rdt_classes]
// values; device paths are only checked for form here (they are resolved
// at daemon start, see BlockioResolver).
func (c *CRI) validateClasses(bad func(key string, val any, why string)) {
	for _, name := range sortedKeys(c.BlockioClasses) {
		key := "cri.blockio_classes." + name
		b := c.BlockioClasses[name]
		if !isClassName(name) {
			bad(key, name, "class names are letters, digits, '_', '.', '-'")
		}
		for _, w := range []struct {
			key string
			val uint16
		}{{"weight", b.Weight}, {"leaf_weight", b.LeafWeight}} {
			if w.val != 0 && (w.val < 10 || w.val > 1000) {
				bad(key+"."+w.key, w.val, "must be 10 to 1000 (0: unset)")
			}
		}
		for _, l := range b.lists() {
			for i, entry := range l.vals {
				if _, _, err := parseDeviceValue(entry, l.key == "weight_device"); err != nil {
					bad(fmt.Sprintf("%s.%s[%d]", key, l.key, i), entry, err.Error())
				}
			}
		}
	}
	var schemataRow *regexp.Regexp
	for _, name := range sortedKeys(c.RdtClasses) {
		key := "cri.rdt_classes." + name
		r := c.RdtClasses[name]
		if !isClassName(name) {
			bad(key, name, "class names are letters, digits, '_', '.', '-'")
		}
		if r.ClosID != "" && (!names.Valid(r.ClosID, 64, false) || r.ClosID == "." || r.ClosID == "..") {
			bad(key+".clos_id", r.ClosID, "must be a resctrl group name (letters, digits, '_', '.', '-')")
		}
		for i, row := range r.Schemata {
			if schemataRow == nil {
				schemataRow = regexp.MustCompile(schemataRowPattern)
			}
			if !schemataRow.MatchString(row) {
				bad(fmt.Sprintf("%s.schemata[%d]", key, i), row, `must be one schemata line "RESOURCE:id=value;..."`)
			}
		}
	}
}

// parseDeviceValue splits "/dev/path:value". A weight must be 10 to 1000;
// a rate any unsigned 64-bit number.
func parseDeviceValue(s string, weight bool) (path string, val uint64, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, fmt.Errorf(`want "/dev/path:value"`)
	}
	path, num := s[:i], s[i+1:]
	if !strings.HasPrefix(path, "/") {
		return "", 0, fmt.Errorf(`device %q must be an absolute path ("/dev/path:value")`, path)
	}
	val, err = strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("value %q is not an unsigned integer", num)
	}
	if weight && (val < 10 || val > 1000) {
		return "", 0, fmt.Errorf("weight %d must be 10 to 1000", val)
	}
	return path, val, nil
}

// deviceNumberFunc returns the major and minor number of the block device
// at path (blockDeviceNumber; tests use a fake).
type deviceNumberFunc func(path string) (major, minor int64, err error)

// BlockioResolver resolves every configured block I/O class now (stat of
// each device) and returns the lookup the OCI layer uses. It returns nil
// when no class is configured. Errors name the key and the device and wrap
// errdefs.ErrInvalidArgument.
func (c *CRI) BlockioResolver() (func(name string) (*specs.LinuxBlockIO, error), error) {
	return c.blockioResolver(blockDeviceNumber)
}

func (c *CRI) blockioResolver(devnum deviceNumberFunc) (func(name string) (*specs.LinuxBlockIO, error), error) {
	if len(c.BlockioClasses) == 0 {
		return nil, nil
	}
	classes := make(map[string]*specs.LinuxBlockIO, len(c.BlockioClasses))
	for _, name := range sortedKeys(c.BlockioClasses) {
		b := c.BlockioClasses[name]
		out, err := b.resolve("cri.blockio_classes."+name, devnum)
		if err != nil {
			return nil, err
		}
		classes[name] = out
	}
	names := sortedKeys(classes)
	return func(name string) (*specs.LinuxBlockIO, error) {
		b, ok := classes[name]
		if !ok {
			return nil, fmt.Errorf("blockio class %q is not configured (configured: %s): %w", name, strings.Join(names, ", "), errdefs.ErrInvalidArgument)
		}
		return cloneBlockIO(b), nil
	}, nil
}

func (b *BlockioClass) resolve(key string, devnum deviceNumberFunc) (*specs.LinuxBlockIO, error) {
	out := &specs.LinuxBlockIO{}
	if b.Weight != 0 {
		out.Weight = new(b.Weight)
	}
	if b.LeafWeight != 0 {
		out.LeafWeight = new(b.LeafWeight)
	}
	// Weights per device are merged by device, so two entries for one
	// device are an error rather than a silent override.
	seen := map[string]map[[2]int64]bool{}
	for _, l := range b.lists() {
		seen[l.key] = map[[2]int64]bool{}
		for i, entry := range l.vals {
			ekey := fmt.Sprintf("%s.%s[%d]", key, l.key, i)
			path, val, err := parseDeviceValue(entry, l.key == "weight_device")
			if err != nil {
				return nil, fmt.Errorf("%s = %q: %v: %w", ekey, entry, err, errdefs.ErrInvalidArgument)
			}
			major, minor, err := devnum(path)
			if err != nil {
				return nil, fmt.Errorf("%s: device %s: %w", ekey, path, err)
			}
			if seen[l.key][[2]int64{major, minor}] {
				return nil, fmt.Errorf("%s: device %s (%d:%d) is listed twice: %w", ekey, path, major, minor, errdefs.ErrInvalidArgument)
			}
			seen[l.key][[2]int64{major, minor}] = true
			dev := specs.LinuxBlockIODevice{Major: major, Minor: minor}
			switch l.key {
			case "weight_device":
				out.WeightDevice = append(out.WeightDevice, specs.LinuxWeightDevice{LinuxBlockIODevice: dev, Weight: new(uint16(val))})
			case "throttle_read_bps":
				out.ThrottleReadBpsDevice = append(out.ThrottleReadBpsDevice, specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: val})
			case "throttle_write_bps":
				out.ThrottleWriteBpsDevice = append(out.ThrottleWriteBpsDevice, specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: val})
			case "throttle_read_iops":
				out.ThrottleReadIOPSDevice = append(out.ThrottleReadIOPSDevice, specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: val})
			case "throttle_write_iops":
				out.ThrottleWriteIOPSDevice = append(out.ThrottleWriteIOPSDevice, specs.LinuxThrottleDevice{LinuxBlockIODevice: dev, Rate: val})
			}
		}
	}
	return out, nil
}

// cloneBlockIO copies b deeply, so callers may change what they get.
func cloneBlockIO(b *specs.LinuxBlockIO) *specs.LinuxBlockIO {
	out := &specs.LinuxBlockIO{
		ThrottleReadBpsDevice:   slices.Clone(b.ThrottleReadBpsDevice),
		ThrottleWriteBpsDevice:  slices.Clone(b.ThrottleWriteBpsDevice),
		ThrottleReadIOPSDevice:  slices.Clone(b.ThrottleReadIOPSDevice),
		ThrottleWriteIOPSDevice: slices.Clone(b.ThrottleWriteIOPSDevice),
	}
	if b.Weight != nil {
		out.Weight = new(*b.Weight)
	}
	if b.LeafWeight != nil {
		out.LeafWeight = new(*b.LeafWeight)
	}
	for _, wd := range b.WeightDevice {
		c := specs.LinuxWeightDevice{LinuxBlockIODevice: wd.LinuxBlockIODevice}
		if wd.Weight != nil {
			c.Weight = new(*wd.Weight)
		}
		if wd.LeafWeight != nil {
			c.LeafWeight = new(*wd.LeafWeight)
		}
		out.WeightDevice = append(out.WeightDevice, c)
	}
	return out
}

// RdtResolver returns the lookup of configured RDT classes, or nil when
// none is configured.
func (c *CRI) RdtResolver() func(name string) (*specs.LinuxIntelRdt, error) {
	if len(c.RdtClasses) == 0 {
		return nil
	}
	classes := make(map[string]RdtClass, len(c.RdtClasses))
	for name, r := range c.RdtClasses {
		r.Schemata = slices.Clone(r.Schemata)
		if r.ClosID == "" {
			r.ClosID = name
		}
		classes[name] = r
	}
	names := sortedKeys(classes)
	return func(name string) (*specs.LinuxIntelRdt, error) {
		r, ok := classes[name]
		if !ok {
			return nil, fmt.Errorf("rdt class %q is not configured (configured: %s): %w", name, strings.Join(names, ", "), errdefs.ErrInvalidArgument)
		}
		return &specs.LinuxIntelRdt{ClosID: r.ClosID, Schemata: slices.Clone(r.Schemata)}, nil
	}
}

// sortedKeys returns m's keys in order, for stable errors and output.
func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	return slices.Sorted(maps.Keys(m))
}
