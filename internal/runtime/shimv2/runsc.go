package shimv2

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	runtimeoptions "github.com/containerd/containerd/api/types/runtimeoptions/v1"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// gVisor's shim (containerd-shim-runsc-v1) takes its options at Create
// as a runtimeoptions.v1.Options naming a TOML file (config_path), not as
// the options themselves: crind writes that file once per handler, at
// start-up, into the runtime's root (runsc's own state is in
// <root>/<namespace>).
const (
	runtimeOptionsURL = "runtimeoptions.v1.Options"
	runscOptionsType  = "io.containerd.runsc.v1.options"
	// runscConfigFile is the TOML file in the runtime's root.
	runscConfigFile = "shim.toml"
	// runscGroupingFile, in a bundle, is where gVisor's shim looks (after
	// two host-wide paths crind leaves alone) for the keys it reads only
	// from a fixed path; crind writes grouping = true there, so that the
	// shim's start groups the pod's containers into one shim by their
	// io.kubernetes.cri.sandbox-id annotation, as runc's shim does.
	runscGroupingFile = "config.toml"
	// runscNullNetNS is where runsc pins, in its root, the empty network
	// namespace its gofers share (a bind mount it keeps for later
	// containers; runsc's specutils.NullNetNSFilename).
	runscNullNetNS = "null-netns"
	// criContainerTypeKey tells a pod's infra ("sandbox") from its
	// workloads ("container") to runsc; crind sets it (package oci).
	criContainerTypeKey = "io.kubernetes.cri.container-type"
)

// runscShimConfig is the part of the runsc shim's TOML crind writes: the
// shim's own keys, and runsc's command-line flags (without their dashes)
// under runsc_config.
type runscShimConfig struct {
	BinaryName  string            `toml:"binary_name"`
	Root        string            `toml:"root"`
	LogLevel    string            `toml:"log_level,omitempty"`
	LogPath     string            `toml:"log_path,omitempty"`
	RunscConfig map[string]string `toml:"runsc_config,omitempty"`
}

// runscFlag is a runsc flag name as the shim passes it on (--name=value).
var runscFlag = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// isRunscShim reports whether bin is gVisor's shim.
func isRunscShim(bin string) bool {
	return strings.HasPrefix(filepath.Base(bin), "containerd-shim-runsc-")
}

// runscConfig turns a runtime's option table into the runsc shim's TOML:
// binary_name (runsc; a bare name is looked up in $PATH, default
// "runsc"), log_level and log_path are the shim's; systemd_cgroup is
// runsc's systemd-cgroup flag (named as for the runc shim, so the cgroup
// driver sets it the same way); every other key is a runsc flag
// (platform = "systrap", network = "sandbox", ...). A key that cannot be a
// flag is errdefs.ErrInvalidArgument; a runsc that cannot be found wraps
// errdefs.ErrNotFound.
func runscConfig(opts map[string]string, root string) (*runscShimConfig, error) {
	c := &runscShimConfig{BinaryName: "runsc", Root: root, RunscConfig: map[string]string{}}
	for k, v := range opts {
		switch k {
		case "binary_name":
			c.BinaryName = v
		case "log_level":
			c.LogLevel = v
		case "log_path":
			c.LogPath = v
		case "systemd_cgroup":
			c.RunscConfig["systemd-cgroup"] = v
		case "root", "log", "panic-log", "log-format":
			// The shim sets these itself (root comes from the
			// handler's root, the logs go to the bundle).
			return nil, fmt.Errorf("option %q: set by crind or the shim, not an option: %w", k, errdefs.ErrInvalidArgument)
		default:
			if !runscFlag.MatchString(k) {
				return nil, fmt.Errorf("option %q: neither a shim option (binary_name, log_level, log_path, systemd_cgroup) nor a runsc flag: %w",
					k, errdefs.ErrInvalidArgument)
			}
			c.RunscConfig[k] = v
		}
	}
	bin, err := exec.LookPath(c.BinaryName)
	if err != nil {
		return nil, fmt.Errorf("option binary_name: %w: %w", err, errdefs.ErrNotFound)
	}
	c.BinaryName = bin
	return c, nil
}

// runscOptions writes the runsc shim's TOML into root and returns the
// Create options naming it, and the runsc the shim runs. An empty root is
// errdefs.ErrInvalidArgument.
func runscOptions(opts map[string]string, root string) (*anypb.Any, string, error) {
	if root == "" || !filepath.IsAbs(root) {
		return nil, "", fmt.Errorf("runsc root %q must be absolute: %w", root, errdefs.ErrInvalidArgument)
	}
	c, err := runscConfig(opts, root)
	if err != nil {
		return nil, "", err
	}
	data, err := toml.Marshal(c)
	if err != nil {
		return nil, "", fmt.Errorf("encode runsc config: %w", err)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, "", fmt.Errorf("make dir: %w", err)
	}
	path := filepath.Join(root, runscConfigFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, "", fmt.Errorf("write runsc config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, "", fmt.Errorf("write runsc config: %w", err)
	}
	ro, err := proto.Marshal(&runtimeoptions.Options{TypeUrl: runscOptionsType, ConfigPath: path})
	if err != nil {
		return nil, "", fmt.Errorf("encode options: %w", err)
	}
	return &anypb.Any{TypeUrl: runtimeOptionsURL, Value: ro}, c.BinaryName, nil
}

// runscSpec is spec as runsc reads it. runsc matches a container's
// namespace paths against the paths in the specs of the sandbox's other
// containers, not against the host's files: a workload container naming
// the pod's pinned PID namespace (the pod shares one) would make a new
// one for the first container, which every later one would then join,
// and which dies with that first container (a later start fails with
// "creating process: out of memory", the sentry's ENOMEM for a PID
// namespace whose init is gone). Without a PID namespace in its spec a
// container runs in the sandbox's root PID namespace, the infra's: the
// pod's. So a workload container's PID namespace path is dropped, with
// its entry. spec itself is not changed.
func runscSpec(spec *specs.Spec) *specs.Spec {
	if spec == nil || spec.Linux == nil || spec.Annotations[criContainerTypeKey] != "container" {
		return spec
	}
	i := slices.IndexFunc(spec.Linux.Namespaces, func(n specs.LinuxNamespace) bool {
		return n.Type == specs.PIDNamespace && n.Path != ""
	})
	if i < 0 {
		return spec
	}
	out, linux := *spec, *spec.Linux
	linux.Namespaces = slices.Delete(slices.Clone(spec.Linux.Namespaces), i, i+1)
	out.Linux = &linux
	return &out
}

// writeRunscGrouping writes runscGroupingFile into the bundle dir.
func writeRunscGrouping(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, runscGroupingFile), []byte("grouping = true\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", runscGroupingFile, err)
	}
	return nil
}

// correctRunscFeatures sets what `runsc features` reports wrongly. Its
// cgroup section is a constant (specutils.Features at the pinned
// version: v1 true, v2 false, systemd false), while runsc drives cgroup
// v2, unified files included (runsc/cgroup/cgroup_v2.go), and systemd
// (its systemd-cgroup flag). Taken as it is, every pod kubelet runs on a
// cgroup v2 node was refused: kubelet asks linux.resources.unified
// (memory.oom.group) of every container there.
func correctRunscFeatures(f *features.Features) {
	if f.Linux == nil || f.Linux.Cgroup == nil {
		return
	}
	yes := true
	f.Linux.Cgroup.V2 = &yes
	f.Linux.Cgroup.Systemd = &yes
}
