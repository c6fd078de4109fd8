package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/config"
	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/oci"
	"github.com/crin-dev/crin/internal/runtime/shimv2"
)

// buildRuntimes makes one backend per configured runtime handler. A
// handler whose binary is not installed is disabled with a warning,
// unless it is the default. The returned func closes the backends that
// hold resources (shimv2: connections to shims, shim log readers; oci:
// its background cgroup attach priming).
func buildRuntimes(ctx context.Context, cfg *config.Config, driver cgroup.Driver, units *cgroup.Units, shimBin string, log *slog.Logger) (map[string]runtime.Runtime, func(), error) {
	runtimes := map[string]runtime.Runtime{}
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			_ = c()
		}
	}
	for _, name := range cfg.RuntimeNames() {
		rc := cfg.Runtimes[name]
		rlog := log.With("runtime", name)
		var rt runtime.Runtime
		var err error
		switch rc.Type {
		case "shimv2":
			var bin, logger string
			bin, err = shimv2.ResolveBinary(rc.Path, rc.RuntimeType)
			if err == nil {
				if logger, err = config.FindBinary("", "crin-logger"); err != nil {
					err = fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
				}
			}
			if err == nil {
				var s *shimv2.Runtime
				s, err = shimv2.New(ctx, shimv2.Config{
					Name:         name,
					Binary:       bin,
					StateDir:     filepath.Join(cfg.State, "shimv2", name),
					Root:         rc.Root,
					Options:      shimv2Options(bin, rc.Options, driver),
					LoggerBinary: logger,
					PlaceShim:    shimPlacer(driver, units),
					Logger:       rlog,
				})
				if err == nil {
					rt = s
					closers = append(closers, s.Close)
				}
			}
		default:
			var bin string
			if rc.Type == "lxc" {
				// crin-lxc speaks runc's command line; the oci backend
				// drives it (docs/runtimes.md, "LXC").
				bin, err = config.FindBinary(rc.Path, "crin-lxc")
				if err == nil {
					bin, err = exec.LookPath(bin)
				}
			} else {
				bin, err = exec.LookPath(rc.Path)
			}
			if err != nil {
				err = fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
			} else {
				var o *oci.Runtime
				o, err = oci.New(ctx, oci.Config{
					Name:       name,
					Binary:     bin,
					Root:       rc.Root,
					ShimBinary: shimBin,
					// The runtime makes the containers' cgroups
					// in the driver's form (scopes in the pod's
					// slice with systemd).
					SystemdCgroup: driver == cgroup.Systemd,
					InitFromState: rc.Type == "lxc",
					PlaceShim:     shimPlacer(driver, units),
					StateDir:      filepath.Join(cfg.State, "c"),
					Logger:        rlog,
				})
				if err == nil {
					rt = o
					closers = append(closers, o.Close)
				}
			}
		}
		if errors.Is(err, errdefs.ErrNotFound) && name != cfg.DefaultRuntime {
			log.WarnContext(ctx, "runtime not installed, handler disabled", "runtime", name, "path", rc.Path, "runtime_type", rc.RuntimeType, "error", err)
			continue
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("runtime %s: %w", name, err)
		}
		runtimes[name] = rt
	}
	return runtimes, closeAll, nil
}

// shimv2Options are a shim v2 handler's options with the cgroup driver's:
// a runc or runsc shim (bin) is told systemd_cgroup under the systemd
// driver, unless the handler's config says otherwise. Other shims take
// no options crind knows.
func shimv2Options(bin string, opts map[string]string, driver cgroup.Driver) map[string]string {
	base := filepath.Base(bin)
	if driver != cgroup.Systemd || !strings.HasPrefix(base, "containerd-shim-runc-") && !strings.HasPrefix(base, "containerd-shim-runsc-") {
		return opts
	}
	if _, set := opts["systemd_cgroup"]; set {
		return opts
	}
	out := maps.Clone(opts)
	if out == nil {
		out = map[string]string{}
	}
	out["systemd_cgroup"] = "true"
	return out
}

// shimPlacer moves each crin-shim (and shim v2), with the systemd driver,
// into a scope of its own in system.slice (crin-shim-<pod or container>.scope,
// crin-shim-v2-<pod>.scope), out of
// crind.service: "systemctl kill crind" signals every process in the
// unit's cgroup, and its shims must outlive crind as its containers do
// (docs/cgroups.md). With cgroupfs shims stay where crind is.
func shimPlacer(driver cgroup.Driver, units *cgroup.Units) func(context.Context, string, int) error {
	if driver != cgroup.Systemd {
		return nil
	}
	return func(ctx context.Context, name string, pid int) error {
		return units.StartScope(ctx, "crin-shim-"+name+".scope", "system.slice", pid)
	}
}
