// Package config loads crind's TOML configuration. Every key has a default,
// so no file is needed; unknown keys and bad values are refused with the key,
// the value and the reason.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"

	"github.com/crin-dev/crin/internal/cgroup"
)

// DefaultPath is where crind looks for its config file.
const DefaultPath = "/etc/crin/crin.toml"

// Config is crind's whole configuration.
type Config struct {
	// Root holds persistent state: the store, images, container layers.
	Root string `toml:"root" comment:"persistent state: store, images, container layers (0700)"`
	// State holds runtime state that does not survive a reboot: sockets,
	// bundles, netns pins.
	State string `toml:"state" comment:"volatile state: sockets, bundles, pinned netns (0700)"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level" comment:"debug, info, warn or error"`
	// DefaultRuntime is the runtime handler used when a pod names none.
	DefaultRuntime string `toml:"default_runtime" comment:"runtime handler used when a pod names none"`

	CRI       CRI                `toml:"cri"`
	Runtimes  map[string]Runtime `toml:"runtimes"`
	CNI       CNI                `toml:"cni"`
	Registry  Registry           `toml:"registry"`
	Image     Image              `toml:"image"`
	NRI       NRI                `toml:"nri"`
	GoRuntime GoRuntime          `toml:"go_runtime"`
}

// GoRuntime tunes crind's own Go runtime (docs/memory.md).
type GoRuntime struct {
	// GCPercent is the garbage collection target (GOGC): how far, in
	// percent of the live heap, the heap grows before the next
	// collection. 0 keeps Go's default (100). The GOGC environment
	// variable, when set, wins.
	GCPercent int `toml:"gc_percent" comment:"crind's own Go GC target (GOGC), in percent of the live heap; 0: Go's default (100); default 50; env GOGC wins"`
	// MemoryLimitBytes is a soft limit on the Go runtime's memory
	// (GOMEMLIMIT): near it the collector runs more often. 0 sets none.
	// The GOMEMLIMIT environment variable, when set, wins.
	MemoryLimitBytes int64 `toml:"memory_limit_bytes" comment:"soft limit on crind's own Go runtime memory (GOMEMLIMIT), in bytes; 0: none; env GOMEMLIMIT wins"`
	// ReleaseAfter is how long pod and container lifecycle work must
	// have been quiet before the heap's free pages are returned to the OS
	// (a forced collection); 0 never does.
	ReleaseAfter Duration `toml:"release_after" comment:"after pod/container lifecycle work has been quiet this long, return the Go heap's free pages to the OS (one forced collection); 0: never"`
}

// CRI configures the CRI server.
type CRI struct {
	// Socket is the CRI unix socket (created 0660).
	Socket string `toml:"socket" comment:"CRI gRPC unix socket (0660)"`
	// MetricsAddress is a local host:port serving Prometheus metrics; empty
	// disables it.
	MetricsAddress string `toml:"metrics_address" comment:"local host:port for Prometheus /metrics; empty disables"`
	// StreamAddress is the host:port the CRI streaming server (exec,
	// attach, port-forward) listens on; port 0 picks a free port. The host
	// must be an explicit IP or "localhost" (not empty or unspecified),
	// since kubelet is handed URLs that name it. Empty disables streaming.
	StreamAddress string `toml:"stream_address" comment:"host:port of the exec/attach/port-forward server (port 0: any free port); empty disables"`
	// StatsPeriod is how often container writable layers are measured and
	// CPU usage sampled for the stats RPCs; zero means 10s.
	StatsPeriod Duration `toml:"stats_period" comment:"how often writable layers are measured and CPU sampled for stats "`
	// CgroupDriver is how pod and container cgroups are made: "cgroupfs"
	// or "systemd"; empty picks systemd when systemd is PID 1 on a cgroup
	// v2 host, else cgroupfs (cgroup.Detect). RuntimeConfig reports it to
	// kubelet, whose cgroupDriver must agree.
	CgroupDriver string `toml:"cgroup_driver" comment:"cgroupfs or systemd; empty: systemd when systemd is PID 1 on a cgroup v2 host, else cgroupfs"`
	// CgroupParent is the cgroup under which pods without a cgroup parent
	// run: a path (cgroupfs) or a slice (systemd); empty means /crin or
	// crin.slice.
	CgroupParent string `toml:"cgroup_parent" comment:"cgroup for pods that name no cgroup_parent: a path (cgroupfs) or a slice (systemd); empty: /crin or crin.slice"`
	// PauseBinary is crin-pause, the infra process of every pod; empty means
	// next to the crind binary, then $PATH.
	PauseBinary string `toml:"pause_binary" comment:"crin-pause path; empty: next to crind, then $PATH"`
	// ShimBinary is crin-shim; empty means next to crind, then $PATH.
	ShimBinary string `toml:"shim_binary" comment:"crin-shim path; empty: next to crind, then $PATH"`
	// SeccompProfileRoot resolves relative Localhost seccomp profiles.
	SeccompProfileRoot string `toml:"seccomp_profile_root" comment:"directory relative Localhost seccomp profiles are resolved in"`
	// RestoreFromArchives lets CreateContainer restore a container from a
	// checkpoint archive named by an absolute path as its image
	// (docs/checkpoint.md). Off by default: an archive holds the memory of
	// the container it was taken of, secrets included, and any pod could
	// name any archive on the node.
	RestoreFromArchives bool `toml:"restore_from_archives" comment:"let CreateContainer restore a container from a checkpoint archive given as an absolute path in place of its image"`
	// AdminSocket is the unix socket of crind's admin API (crinctl);
	// empty means <state>/crind-admin.sock. See Config.AdminSocketPath.
	AdminSocket string `toml:"admin_socket" comment:"admin API socket for crinctl (0600); empty: <state>/crind-admin.sock"`
	// CDISpecDirs are where CDI device names (from NRI plugins) are
	// resolved.
	CDISpecDirs []string `toml:"cdi_spec_dirs" comment:"CDI spec directories NRI-injected CDI devices are resolved in"`
	// BlockioClasses are block I/O classes NRI plugins may assign by name.
	BlockioClasses map[string]BlockioClass `toml:"blockio_classes" comment:"block I/O classes for NRI: [cri.blockio_classes.NAME] weight, leaf_weight, weight_device, throttle_{read,write}_{bps,iops} = [\"/dev/sda:VALUE\"]"`
	// RdtClasses are Intel RDT classes NRI plugins may assign by name.
	RdtClasses map[string]RdtClass `toml:"rdt_classes" comment:"Intel RDT classes for NRI: [cri.rdt_classes.NAME] clos_id (default NAME), schemata = [\"L3:0=ff\"]"`
}

// Runtime is one runtime handler.
type Runtime struct {
	// Type is "oci" (an OCI runtime CLI under crin-shim), "shimv2" (a
	// containerd shim v2 runtime) or "lxc" (LXC containers through
	// crin-lxc under crin-shim), docs/runtimes.md.
	Type string `toml:"type" comment:"oci: an OCI runtime CLI (runc, crun) run under crin-shim; shimv2: a containerd shim v2 runtime; lxc: LXC containers through crin-lxc"`
	// Path is the runtime binary (oci), the shim (shimv2) or crin-lxc
	// (lxc; empty: next to crind, else in $PATH); a bare name is looked
	// up in $PATH.
	Path string `toml:"path" comment:"runtime binary, shim binary for shimv2, crin-lxc for lxc (empty: next to crind or in $PATH); a bare name is looked up in $PATH"`
	// Root is the runtime's state dir (--root); empty means <state>/runtimes/<name>.
	Root string `toml:"root" comment:"runtime --root; empty: <state>/runtimes/<name>"`
	// RuntimeType names a shim v2 runtime as containerd does
	// (io.containerd.runc.v2: containerd-shim-runc-v2 in $PATH); shimv2
	// only, used when Path is empty.
	RuntimeType string `toml:"runtime_type,omitempty" comment:"shimv2: runtime type, e.g. io.containerd.runc.v2 (used when path is empty)"`
	// Options are the shim's options (shimv2 only; for runc shims:
	// binary_name, systemd_cgroup, no_pivot_root, no_new_keyring, shim_cgroup).
	Options map[string]string `toml:"options,omitempty" comment:"shimv2: shim options (runc: binary_name, systemd_cgroup, ...)"`
}

// CNI configures pod networking.
type CNI struct {
	ConfDir string   `toml:"conf_dir" comment:"CNI network configs"`
	BinDirs []string `toml:"bin_dirs" comment:"CNI plugin binaries"`
}

// Registry configures how images are fetched.
type Registry struct {
	// Mirrors maps a registry host to endpoints tried before it.
	Mirrors map[string]Mirror `toml:"mirrors"`
	// PlainHTTP lists hosts (host[:port]) reached over plain http.
	PlainHTTP []string `toml:"plain_http" comment:"registry hosts (host[:port]) reached over plain http"`
}

// Mirror lists the endpoints of a registry mirror.
type Mirror struct {
	// Endpoints are URLs (scheme, host, optional path prefix) tried in order.
	Endpoints []string `toml:"endpoints"`
}

// Image configures pulls.
type Image struct {
	PullTimeout            Duration `toml:"pull_timeout" comment:"bound on one image pull"`
	MaxConcurrentDownloads int      `toml:"max_concurrent_downloads" comment:"layer downloads in parallel per pull"`
	// PullProgressTimeout cancels a pull whose registry sends nothing for
	// this long; 0 disables it.
	PullProgressTimeout Duration `toml:"pull_progress_timeout" comment:"cancel a pull whose registry sends nothing for this long; 0: never"`
	// MaxManifestBytes and MaxConfigBytes cap one manifest (or index) body
	// and one image config blob.
	MaxManifestBytes int64 `toml:"max_manifest_bytes" comment:"cap on one manifest or index body, in bytes"`
	MaxConfigBytes   int64 `toml:"max_config_bytes" comment:"cap on one image config blob, in bytes"`
	// MaxUnpackedBytes caps the bytes one image's layers unpack to (file
	// content and 512 per entry); 0 means no cap.
	MaxUnpackedBytes int64 `toml:"max_unpacked_bytes" comment:"cap on the bytes one image's layers unpack to (file content + 512 per entry); 0: no cap"`
}

// Duration is a time.Duration written as "90s", "5m" in TOML.
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// CgroupLayout is how crind names cgroups on this host: the configured
// driver (else the one cgroup.Detect picks) and the parent of pods that
// name none (else the driver's default), checked against each other.
func (c *Config) CgroupLayout() (cgroup.Layout, error) {
	d := cgroup.Detect()
	if c.CRI.CgroupDriver != "" {
		var err error
		if d, err = cgroup.ParseDriver(c.CRI.CgroupDriver); err != nil {
			return cgroup.Layout{}, fmt.Errorf("cri.cgroup_driver: %w", err)
		}
	}
	l := cgroup.Layout{Driver: d, Parent: c.CRI.CgroupParent}
	if l.Parent == "" {
		l.Parent = cgroup.DefaultParent(d)
	}
	if err := l.CheckParent("cri.cgroup_parent", l.Parent); err != nil {
		return cgroup.Layout{}, err
	}
	return l, nil
}

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		Root:           "/var/lib/crin",
		State:          "/run/crin",
		LogLevel:       "info",
		DefaultRuntime: "runc",
		CRI: CRI{
			Socket:         "/run/crin/crin.sock",
			MetricsAddress: "127.0.0.1:9781",
			StatsPeriod:    Duration(10 * time.Second),
			StreamAddress:  "127.0.0.1:0",
			CDISpecDirs:    []string{"/etc/cdi", "/var/run/cdi"},
			BlockioClasses: map[string]BlockioClass{},
			RdtClasses:     map[string]RdtClass{},
		},
		Runtimes: map[string]Runtime{
			"runc": {Type: "oci", Path: "runc"},
			"crun": {Type: "oci", Path: "crun"},
		},
		CNI: CNI{
			ConfDir: "/etc/cni/net.d",
			BinDirs: []string{"/usr/lib/cni", "/opt/cni/bin"},
		},
		Registry: Registry{Mirrors: map[string]Mirror{}},
		Image: Image{
			PullTimeout:            Duration(30 * time.Minute),
			MaxConcurrentDownloads: 3,
			PullProgressTimeout:    Duration(time.Minute),
			MaxManifestBytes:       4 << 20,
			MaxConfigBytes:         4 << 20,
		},
		NRI:       defaultNRI(),
		GoRuntime: GoRuntime{GCPercent: DefaultGCPercent, ReleaseAfter: Duration(2 * time.Second)},
	}
}

// DefaultGCPercent is go_runtime.gc_percent's default. Half of Go's 100
// keeps less garbage resident (about 0.5 MiB less at 30 pods on a 2-core
// node) for more, shorter collections; docs/memory.md has the figures.
const DefaultGCPercent = 50

// minMemoryLimit is the smallest go_runtime.memory_limit_bytes taken: crind's Go
// runtime needs about 8 MiB idle, and a limit below what it needs keeps
// the collector running all the time.
const minMemoryLimit = 16 << 20

// Load reads path over the defaults. A missing file is fine when
// allowMissing is set (the default path); otherwise it is an error.
func Load(path string, missing MissingFile) (*Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && missing == MissingOK {
		return c, c.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := Parse(b, c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// MissingFile says whether Load accepts an absent file.
type MissingFile int

// The MissingFile choices.
const (
	MissingError MissingFile = iota
	MissingOK
)

// Parse decodes b over c and validates the result.
func Parse(b []byte, c *Config) error {
	// Runtimes named in the file replace the defaults only by name; a file
	// that defines runtimes keeps the built-in ones too.
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			keys := make([]string, 0, len(sm.Errors))
			for _, e := range sm.Errors {
				keys = append(keys, strings.Join(e.Key(), "."))
			}
			return fmt.Errorf("unknown key(s) %s: %w", strings.Join(keys, ", "), errdefs.ErrInvalidArgument)
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return fmt.Errorf("line %d column %d: key %s: %s: %w", row, col, strings.Join(de.Key(), "."), de.Error(), errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return c.Validate()
}

// Validate checks every value and fills in derived defaults (runtime roots).
func (c *Config) Validate() error {
	var errs []error
	bad := func(key string, val any, why string) {
		errs = append(errs, fmt.Errorf("%s = %q: %s", key, fmt.Sprint(val), why))
	}
	c.validatePaths(bad)
	c.CRI.validateClasses(bad)
	c.NRI.validate(bad)
	c.validateServing(bad)
	c.validateRuntimes(bad)
	c.validateImage(bad)
	c.validateMemory(bad)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateMemory checks the Go runtime settings.
func (c *Config) validateMemory(bad func(key string, val any, why string)) {
	g := c.GoRuntime
	if g.GCPercent < 0 {
		bad("go_runtime.gc_percent", g.GCPercent, "must not be negative (0: Go's default)")
	}
	if g.MemoryLimitBytes < 0 || (g.MemoryLimitBytes > 0 && g.MemoryLimitBytes < minMemoryLimit) {
		bad("go_runtime.memory_limit_bytes", g.MemoryLimitBytes, fmt.Sprintf("must be 0 (none) or at least %d (16 MiB): a smaller limit keeps the collector running", minMemoryLimit))
	}
	if g.ReleaseAfter < 0 {
		bad("go_runtime.release_after", time.Duration(g.ReleaseAfter), "must not be negative (0: never)")
	}
}

// validatePaths checks the directories and sockets crind uses.
func (c *Config) validatePaths(bad func(key string, val any, why string)) {
	for _, kv := range []struct{ key, val string }{
		{"root", c.Root}, {"state", c.State}, {"cri.socket", c.CRI.Socket}, {"cni.conf_dir", c.CNI.ConfDir},
	} {
		if !filepath.IsAbs(kv.val) {
			bad(kv.key, kv.val, "must be an absolute path")
		}
	}
	if len(c.CRI.Socket) > maxSocketPath {
		bad("cri.socket", c.CRI.Socket, "unix socket paths must be shorter than 108 bytes")
	}
	switch a := c.CRI.AdminSocket; {
	case a != "" && !filepath.IsAbs(a):
		bad("cri.admin_socket", a, "must be an absolute path (or empty: <state>/crind-admin.sock)")
	case len(c.AdminSocketPath()) > maxSocketPath:
		bad("cri.admin_socket", c.AdminSocketPath(), "unix socket paths must be shorter than 108 bytes (set cri.admin_socket or a shorter state)")
	}
	for i, d := range c.CRI.CDISpecDirs {
		if !filepath.IsAbs(d) {
			bad(fmt.Sprintf("cri.cdi_spec_dirs[%d]", i), d, "must be an absolute path")
		}
	}
}

// validateServing checks the cgroup parent, log level and the addresses
// and periods crind serves with.
func (c *Config) validateServing(bad func(key string, val any, why string)) {
	if d := c.CRI.CgroupDriver; d != "" {
		if _, err := cgroup.ParseDriver(d); err != nil {
			bad("cri.cgroup_driver", d, `must be "cgroupfs", "systemd" or empty (picked from the host)`)
		} else if p := c.CRI.CgroupParent; p != "" {
			if err := (cgroup.Layout{Driver: cgroup.Driver(d)}).CheckParent("cri.cgroup_parent", p); err != nil {
				bad("cri.cgroup_parent", p, "not a parent of the "+d+" cgroup driver's form ("+err.Error()+")")
			}
		}
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		bad("log_level", c.LogLevel, "must be debug, info, warn or error")
	}
	if a := c.CRI.MetricsAddress; a != "" {
		host, _, err := net.SplitHostPort(a)
		switch {
		case err != nil:
			bad("cri.metrics_address", a, "must be host:port")
		case host != "localhost" && (net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback()):
			bad("cri.metrics_address", a, "must be a loopback address")
		}
	}
	if c.CRI.StatsPeriod < 0 {
		bad("cri.stats_period", time.Duration(c.CRI.StatsPeriod).String(), "must not be negative")
	}
	if a := c.CRI.StreamAddress; a != "" {
		if why := checkStreamAddress(a); why != "" {
			bad("cri.stream_address", a, why)
		}
	}
}

// validateRuntimes checks the OCI runtimes and fills in their default
// roots under state.
func (c *Config) validateRuntimes(bad func(key string, val any, why string)) {
	for name, r := range c.Runtimes {
		key := "runtimes." + name
		if !isClassName(name) {
			bad(key, name, "runtime names are letters, digits, '_', '.', '-'")
		}
		switch r.Type {
		case "oci":
			if r.Path == "" {
				bad(key+".path", r.Path, "must name a binary")
			}
			if r.RuntimeType != "" || len(r.Options) > 0 {
				bad(key+".type", r.Type, "runtime_type and options are for shimv2 runtimes")
			}
		case "shimv2":
			if r.Path == "" && r.RuntimeType == "" {
				bad(key+".runtime_type", r.RuntimeType, "a shimv2 runtime needs a path or a runtime type")
			}
		case "lxc":
			if r.RuntimeType != "" || len(r.Options) > 0 {
				bad(key+".type", r.Type, "runtime_type and options are for shimv2 runtimes")
			}
		default:
			bad(key+".type", r.Type, `runtime types are "oci", "shimv2" and "lxc"`)
		}
		if r.Root == "" {
			r.Root = filepath.Join(c.State, "runtimes", name)
			c.Runtimes[name] = r
		} else if !filepath.IsAbs(r.Root) {
			bad(key+".root", r.Root, "must be an absolute path")
		}
	}
	if c.DefaultRuntime != "" {
		if _, ok := c.Runtimes[c.DefaultRuntime]; !ok {
			bad("default_runtime", c.DefaultRuntime, "no such runtime; configured: "+strings.Join(c.RuntimeNames(), ", "))
		}
	}
}

// validateImage checks the registry mirrors and the image service's limits.
func (c *Config) validateImage(bad func(key string, val any, why string)) {
	for host, m := range c.Registry.Mirrors {
		if len(m.Endpoints) == 0 {
			bad("registry.mirrors."+host+".endpoints", "", "needs at least one endpoint")
		}
		for i, e := range m.Endpoints {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(fmt.Sprintf("registry.mirrors.%s.endpoints[%d]", host, i), e, "must be an http:// or https:// URL")
			}
		}
	}
	if c.Image.PullTimeout < 0 {
		bad("image.pull_timeout", time.Duration(c.Image.PullTimeout), "must not be negative")
	}
	if c.Image.MaxConcurrentDownloads < 1 {
		bad("image.max_concurrent_downloads", c.Image.MaxConcurrentDownloads, "must be at least 1")
	}
	if c.Image.PullProgressTimeout < 0 {
		bad("image.pull_progress_timeout", time.Duration(c.Image.PullProgressTimeout), "must not be negative (0 disables it)")
	}
	if c.Image.MaxManifestBytes < 1024 {
		bad("image.max_manifest_bytes", c.Image.MaxManifestBytes, "must be at least 1024")
	}
	if c.Image.MaxConfigBytes < 1024 {
		bad("image.max_config_bytes", c.Image.MaxConfigBytes, "must be at least 1024")
	}
	if c.Image.MaxUnpackedBytes < 0 {
		bad("image.max_unpacked_bytes", c.Image.MaxUnpackedBytes, "must not be negative (0: no cap)")
	}
}

// AdminSocketPath is the admin API socket: cri.admin_socket, else
// <state>/crind-admin.sock.
func (c *Config) AdminSocketPath() string {
	if c.CRI.AdminSocket != "" {
		return c.CRI.AdminSocket
	}
	return filepath.Join(c.State, "crind-admin.sock")
}

// RuntimeNames lists the configured runtime handlers, sorted.
func (c *Config) RuntimeNames() []string {
	names := make([]string, 0, len(c.Runtimes))
	for n := range c.Runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ParseLevel maps a log_level value to a slog level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// Encode writes c as TOML, with comments.
func (c *Config) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(true)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FindBinary resolves a helper binary: an explicit path, else next to self,
// else $PATH.
func FindBinary(explicit, name string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("find %s next to crind or in $PATH: %w", name, err)
	}
	return p, nil
}

// checkStreamAddress says what is wrong with a streaming server address, or
// returns "". The host is named in the URLs kubelet gets, so it must be
// something a client can dial: loopback, or an explicit non-wildcard IP.
func checkStreamAddress(a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "must be host:port"
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return "port must be a number from 0 to 65535"
	}
	if host == "localhost" {
		return ""
	}
	ip := net.ParseIP(host)
	switch {
	case host == "":
		return "host must be explicit (an IP address or localhost)"
	case ip == nil:
		return "host must be an IP address or localhost"
	case ip.IsUnspecified():
		return "host must not be a wildcard address: clients are given URLs that name it"
	}
	return ""
}
