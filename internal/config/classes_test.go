package config

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fakeDevices maps device paths to major:minor.
func fakeDevices(devs map[string][2]int64) deviceNumberFunc {
	return func(path string) (int64, int64, error) {
		d, ok := devs[path]
		if !ok {
			return 0, 0, fmt.Errorf("no such device: %w", errdefs.ErrInvalidArgument)
		}
		return d[0], d[1], nil
	}
}

func TestCDISpecDirs(t *testing.T) {
	c := Default()
	if diff := cmp.Diff([]string{"/etc/cdi", "/var/run/cdi"}, c.CRI.CDISpecDirs); diff != "" {
		t.Errorf("default cdi_spec_dirs (-want +got):\n%s", diff)
	}
	if err := Parse([]byte("[cri]\ncdi_spec_dirs = [\"/opt/cdi\"]\n"), c); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/opt/cdi"}, c.CRI.CDISpecDirs); diff != "" {
		t.Errorf("cdi_spec_dirs from file (-want +got):\n%s", diff)
	}
	err := Parse([]byte("[cri]\ncdi_spec_dirs = [\"/etc/cdi\", \"cdi\"]\n"), Default())
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `cri.cdi_spec_dirs[1] = "cdi"`) {
		t.Errorf("relative cdi dir: err = %v", err)
	}
}

func TestBlockioClasses(t *testing.T) {
	const file = `
[cri.blockio_classes.slow]
weight = 100
leaf_weight = 50
weight_device = ["/dev/sda:200"]
throttle_read_bps = ["/dev/sda:1048576", "/dev/disk/by-id/nvme:2097152"]
throttle_write_bps = ["/dev/sda:524288"]
throttle_read_iops = ["/dev/sda:100"]
throttle_write_iops = ["/dev/sda:50"]
[cri.blockio_classes.fast]
weight = 1000
`
	c := Default()
	if err := Parse([]byte(file), c); err != nil {
		t.Fatal(err)
	}
	resolve, err := c.CRI.blockioResolver(fakeDevices(map[string][2]int64{
		"/dev/sda":             {8, 0},
		"/dev/disk/by-id/nvme": {259, 1},
	}))
	if err != nil {
		t.Fatal(err)
	}
	dev := func(major, minor int64) specs.LinuxBlockIODevice {
		return specs.LinuxBlockIODevice{Major: major, Minor: minor}
	}
	want := &specs.LinuxBlockIO{
		Weight:                  new(uint16(100)),
		LeafWeight:              new(uint16(50)),
		WeightDevice:            []specs.LinuxWeightDevice{{LinuxBlockIODevice: dev(8, 0), Weight: new(uint16(200))}},
		ThrottleReadBpsDevice:   []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev(8, 0), Rate: 1048576}, {LinuxBlockIODevice: dev(259, 1), Rate: 2097152}},
		ThrottleWriteBpsDevice:  []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev(8, 0), Rate: 524288}},
		ThrottleReadIOPSDevice:  []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev(8, 0), Rate: 100}},
		ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev(8, 0), Rate: 50}},
	}
	got, err := resolve("slow")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("class slow (-want +got):\n%s", diff)
	}
	// Callers may change what they get without changing the class.
	*got.Weight = 7
	got.ThrottleReadBpsDevice[0].Rate = 1
	*got.WeightDevice[0].Weight = 9
	again, _ := resolve("slow")
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("class changed by a caller (-want +got):\n%s", diff)
	}
	if fast, err := resolve("fast"); err != nil || *fast.Weight != 1000 || fast.ThrottleReadBpsDevice != nil {
		t.Errorf("class fast = %+v, %v", fast, err)
	}
	_, err = resolve("medium")
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown class: err = %v", err)
	}
	for _, w := range []string{`"medium"`, "fast, slow"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("unknown class error %q does not mention %q", err, w)
		}
	}
}

func TestBlockioResolverErrors(t *testing.T) {
	devs := fakeDevices(map[string][2]int64{"/dev/sda": {8, 0}, "/dev/disk/by-id/sda": {8, 0}})
	for _, tc := range []struct {
		name, toml string
		wantErr    []string
	}{
		{"missing device", "[cri.blockio_classes.a]\nthrottle_read_bps = [\"/dev/sda:1\", \"/dev/sdz:1\"]\n",
			[]string{"cri.blockio_classes.a.throttle_read_bps[1]", "/dev/sdz", "no such device"}},
		{"same device twice", "[cri.blockio_classes.a]\nthrottle_write_iops = [\"/dev/sda:1\", \"/dev/disk/by-id/sda:2\"]\n",
			[]string{"cri.blockio_classes.a.throttle_write_iops[1]", "/dev/disk/by-id/sda", "8:0", "twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			if err := Parse([]byte(tc.toml), c); err != nil {
				t.Fatalf("parse: %v", err)
			}
			f, err := c.CRI.blockioResolver(devs)
			if err == nil || f != nil {
				t.Fatalf("resolved; want an error mentioning %v", tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error not InvalidArgument: %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestBlockioRealDevices(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("block devices are resolved on linux only")
	}
	c := Default()
	if err := Parse([]byte("[cri.blockio_classes.a]\nthrottle_read_bps = [\"/dev/null:1\"]\n"), c); err != nil {
		t.Fatal(err)
	}
	_, err := c.CRI.BlockioResolver()
	if err == nil || !strings.Contains(err.Error(), "/dev/null") || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("character device accepted or unclear error: %v", err)
	}
	if err := Parse([]byte("[cri.blockio_classes.a]\nthrottle_read_bps = [\"/dev/crin-no-such-disk:1\"]\n"), c); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CRI.BlockioResolver(); err == nil || !strings.Contains(err.Error(), "/dev/crin-no-such-disk") {
		t.Errorf("missing device: err = %v", err)
	}
}

func TestNoClassesMeansNilResolvers(t *testing.T) {
	c := Default()
	f, err := c.CRI.BlockioResolver()
	if err != nil || f != nil {
		t.Errorf("BlockioResolver with no classes = %v, %v; want nil, nil", f != nil, err)
	}
	if c.CRI.RdtResolver() != nil {
		t.Errorf("RdtResolver with no classes is not nil")
	}
}

func TestRdtClasses(t *testing.T) {
	c := Default()
	err := Parse([]byte(`
[cri.rdt_classes.gold]
clos_id = "gold-clos"
schemata = ["L3:0=ff;1=ff", "MB:0=100"]
[cri.rdt_classes.bronze]
schemata = ["L3:0=f"]
`), c)
	if err != nil {
		t.Fatal(err)
	}
	resolve := c.CRI.RdtResolver()
	got, err := resolve("gold")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&specs.LinuxIntelRdt{ClosID: "gold-clos", Schemata: []string{"L3:0=ff;1=ff", "MB:0=100"}}, got); diff != "" {
		t.Errorf("class gold (-want +got):\n%s", diff)
	}
	got.Schemata[0] = "changed"
	if again, _ := resolve("gold"); again.Schemata[0] != "L3:0=ff;1=ff" {
		t.Errorf("class changed by a caller: %v", again.Schemata)
	}
	if b, _ := resolve("bronze"); b == nil || b.ClosID != "bronze" {
		t.Errorf("clos_id does not default to the class name: %+v", b)
	}
	_, err = resolve("platinum")
	if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"platinum"`) || !strings.Contains(err.Error(), "bronze, gold") {
		t.Errorf("unknown class: err = %v", err)
	}
}

func TestClassValidationErrors(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		wantErr    []string
	}{
		{"weight too low", "[cri.blockio_classes.a]\nweight = 5\n", []string{"cri.blockio_classes.a.weight", "5", "10 to 1000"}},
		{"leaf weight too high", "[cri.blockio_classes.a]\nleaf_weight = 1001\n", []string{"cri.blockio_classes.a.leaf_weight", "1001"}},
		{"no colon", "[cri.blockio_classes.a]\nthrottle_read_bps = [\"/dev/sda\"]\n", []string{"cri.blockio_classes.a.throttle_read_bps[0]", "/dev/sda", "/dev/path:value"}},
		{"relative device", "[cri.blockio_classes.a]\nthrottle_write_bps = [\"sda:10\"]\n", []string{"throttle_write_bps[0]", "sda:10", "absolute"}},
		{"not a number", "[cri.blockio_classes.a]\nthrottle_read_iops = [\"/dev/sda:lots\"]\n", []string{"throttle_read_iops[0]", "lots"}},
		{"negative rate", "[cri.blockio_classes.a]\nthrottle_write_iops = [\"/dev/sda:-1\"]\n", []string{"throttle_write_iops[0]", "-1"}},
		{"device weight range", "[cri.blockio_classes.a]\nweight_device = [\"/dev/sda:5000\"]\n", []string{"weight_device[0]", "5000", "10 to 1000"}},
		{"bad class name", "[cri.blockio_classes.\"a b\"]\nweight = 100\n", []string{"cri.blockio_classes.a b", "class names"}},
		{"unknown blockio key", "[cri.blockio_classes.a]\nthrottle = 1\n", []string{"cri.blockio_classes.a.throttle"}},
		{"bad clos id", "[cri.rdt_classes.a]\nclos_id = \"../x\"\n", []string{"cri.rdt_classes.a.clos_id", "../x"}},
		{"dot clos id", "[cri.rdt_classes.a]\nclos_id = \"..\"\n", []string{"cri.rdt_classes.a.clos_id", ".."}},
		{"bad schemata", "[cri.rdt_classes.a]\nschemata = [\"L3:0=f\", \"nonsense\"]\n", []string{"cri.rdt_classes.a.schemata[1]", "nonsense"}},
		{"unknown rdt key", "[cri.rdt_classes.a]\nl3 = \"x\"\n", []string{"cri.rdt_classes.a.l3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Parse([]byte(tc.toml), Default())
			if err == nil {
				t.Fatalf("accepted; want an error mentioning %v", tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error not InvalidArgument: %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
