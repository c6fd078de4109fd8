package shimv2

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/errdefs"
)

// BinaryName is the executable of a shim v2 runtime type: the last two
// dot-separated parts of the type name, "io.containerd.runc.v2" giving
// "containerd-shim-runc-v2" (the convention every shim v2 runtime ships
// under: kata, gVisor's runsc, runwasi, youki). A name with fewer than
// three parts, or with an empty or path-like part, is
// errdefs.ErrInvalidArgument.
func BinaryName(runtimeType string) (string, error) {
	parts := strings.Split(runtimeType, ".")
	if len(parts) < 3 {
		return "", fmt.Errorf("runtime type %q: want a name like io.containerd.runc.v2: %w", runtimeType, errdefs.ErrInvalidArgument)
	}
	name, version := parts[len(parts)-2], parts[len(parts)-1]
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, "/\\ ") {
			return "", fmt.Errorf("runtime type %q: empty or path-like part %q: %w", runtimeType, p, errdefs.ErrInvalidArgument)
		}
	}
	return "containerd-shim-" + name + "-" + version, nil
}

// ResolveBinary finds the shim of a runtime: path when set (a bare name is
// looked up in $PATH), else the binary named by runtimeType (BinaryName)
// in $PATH. A shim that cannot be found wraps errdefs.ErrNotFound; neither
// a path nor a type is errdefs.ErrInvalidArgument.
func ResolveBinary(path, runtimeType string) (string, error) {
	name := path
	if name == "" {
		if runtimeType == "" {
			return "", fmt.Errorf("shim v2 runtime: neither a path nor a runtime type: %w", errdefs.ErrInvalidArgument)
		}
		var err error
		if name, err = BinaryName(runtimeType); err != nil {
			return "", err
		}
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("shim binary %s: %w: %w", name, err, errdefs.ErrNotFound)
	}
	return bin, nil
}

// runcOptions turns a runtime's option table into the options the runc
// shim takes at Create (containerd.runc.v1.Options). Unknown keys and bad
// values are errdefs.ErrInvalidArgument, naming the key.
func runcOptions(opts map[string]string, root string) (*options.Options, error) {
	o := &options.Options{Root: root}
	for k, v := range opts {
		var err error
		switch k {
		case "binary_name":
			o.BinaryName = v
		case "shim_cgroup":
			o.ShimCgroup = v
		case "systemd_cgroup":
			o.SystemdCgroup, err = strconv.ParseBool(v)
		case "no_pivot_root":
			o.NoPivotRoot, err = strconv.ParseBool(v)
		case "no_new_keyring":
			o.NoNewKeyring, err = strconv.ParseBool(v)
		default:
			return nil, fmt.Errorf("option %q: unknown (known: binary_name, shim_cgroup, systemd_cgroup, no_pivot_root, no_new_keyring): %w",
				k, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return nil, fmt.Errorf("option %q: value %q: %w", k, v, errdefs.ErrInvalidArgument)
		}
	}
	return o, nil
}
