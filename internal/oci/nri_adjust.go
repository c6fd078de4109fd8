package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// adjuster applies one adjustment to one spec.
type adjuster struct {
	s    *specs.Spec
	o    *AdjustOptions
	host *Host
	rt   *runtimeFeatures
}

// runtimeFeatures answers "can the runtime honour this field".
type runtimeFeatures struct {
	name string
	f    *features.Features
	fl   *features.Linux
	max  ociVersion
}

func newRuntimeFeatures(name string, f *features.Features) (*runtimeFeatures, error) {
	if f == nil {
		f = &conservativeFeatures
	}
	if name == "" {
		name = "the OCI runtime"
	}
	hi, err := parseOCIVersion(f.OCIVersionMax)
	if err != nil {
		return nil, invalidf("%s features ociVersionMax: %v", name, err)
	}
	fl := f.Linux
	if fl == nil {
		fl = &features.Linux{}
	}
	return &runtimeFeatures{name: name, f: f, fl: fl, max: hi}, nil
}

// needs refuses field unless the runtime speaks the spec version that
// introduced it.
func (rt *runtimeFeatures) needs(field, intro string) error {
	if rt.max.compare(mustVersion(intro)) < 0 {
		return unsupportedf("%s: %s supports OCI runtime spec up to %s, the field needs %s", field, rt.name, rt.f.OCIVersionMax, intro)
	}
	return nil
}

// enabled refuses field unless the runtime's features say it supports it.
func (rt *runtimeFeatures) enabled(field, key string, on *bool) error {
	if on == nil || !*on {
		return unsupportedf("%s: %s does not report support for it (features %s)", field, rt.name, key)
	}
	return nil
}

// fitter returns fit.go's checker for reusing its per-section checks.
func (rt *runtimeFeatures) fitter() *fitter {
	return &fitter{f: rt.f, max: rt.max, need: mustVersion("1.0.0")}
}

func newAdjuster(s *specs.Spec, o *AdjustOptions) (*adjuster, error) {
	rt, err := newRuntimeFeatures(o.RuntimeName, o.Features)
	if err != nil {
		return nil, err
	}
	return &adjuster{s: s, o: o, host: hostOrDetect(o.Host), rt: rt}, nil
}

// owner names the plugin that owns a simple field.
func (a *adjuster) owner(get func(*api.OwningPlugins, string) (string, bool)) string {
	if a.o.Owners == nil {
		return ""
	}
	p, _ := get(a.o.Owners, a.o.ContainerID)
	return api.ClearRemovalMarker(p)
}

// ownerOf names the plugin that owns one key of a compound field.
func (a *adjuster) ownerOf(get func(*api.OwningPlugins, string, string) (string, bool), key string) string {
	if a.o.Owners == nil {
		return ""
	}
	p, _ := get(a.o.Owners, a.o.ContainerID, key)
	return api.ClearRemovalMarker(p)
}

func (a *adjuster) fail(plugin string, err error) error {
	return pluginError(plugin, "adjusts", err)
}

func (a *adjuster) process() *specs.Process {
	if a.s.Process == nil {
		a.s.Process = &specs.Process{}
	}
	return a.s.Process
}

func (a *adjuster) linux() *specs.Linux {
	if a.s.Linux == nil {
		a.s.Linux = &specs.Linux{}
	}
	return a.s.Linux
}

func (a *adjuster) apply(adj *api.ContainerAdjustment) error {
	for _, step := range []func(*api.ContainerAdjustment) error{
		a.annotations, a.mounts, a.env, a.args, a.hooks, a.rlimits,
		a.devices, a.cdiDevices, a.resources, a.linuxFields,
	} {
		if err := step(adj); err != nil {
			return err
		}
	}
	if len(adj.Mounts) > 0 || len(adj.CDIDevices) > 0 {
		orderMounts(a.s.Mounts)
	}
	return nil
}

// reservedAnnotation reports keys crin itself sets and reads back: a
// plugin changing them would confuse crin and shim v2 runtimes about what
// the container is.
func reservedAnnotation(k string) bool {
	return strings.HasPrefix(k, AnnotationPrefix) || k == criContainerTypeKey || k == criSandboxIDKey
}

func (a *adjuster) annotations(adj *api.ContainerAdjustment) error {
	if len(adj.Annotations) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(adj.Annotations))
	for _, pass := range []bool{true, false} { // removals first
		for _, raw := range keys {
			k, remove := api.IsMarkedForRemoval(raw)
			if remove != pass {
				continue
			}
			field := fmt.Sprintf("annotations[%q]", k)
			switch {
			case k == "":
				return a.fail(a.ownerOf((*api.OwningPlugins).AnnotationOwner, k), invalidf("%s: empty key", field))
			case reservedAnnotation(k):
				return a.fail(a.ownerOf((*api.OwningPlugins).AnnotationOwner, k), invalidf("%s: crin's own annotation", field))
			}
			if remove {
				delete(a.s.Annotations, k)
				continue
			}
			if a.s.Annotations == nil {
				a.s.Annotations = map[string]string{}
			}
			a.s.Annotations[k] = adj.Annotations[raw]
		}
	}
	return nil
}

// removable is an NRI adjustment entry keyed by a path that may be marked
// for removal (a mount or a device).
type removable interface {
	comparable
	IsMarkedForRemoval() (string, bool)
}

// applyRemovals calls remove with the cleaned path of each entry marked
// for removal, in order, and returns the other entries (nil ones dropped):
// an adjustment's removals apply before its additions.
func applyRemovals[T removable](entries []T, remove func(path string)) []T {
	var zero T
	var add []T
	for _, e := range entries {
		if e == zero {
			continue
		}
		p, marked := e.IsMarkedForRemoval()
		if !marked {
			add = append(add, e)
			continue
		}
		remove(path.Clean(p))
	}
	return add
}

func (a *adjuster) mounts(adj *api.ContainerAdjustment) error {
	add := applyRemovals(adj.Mounts, func(dst string) {
		a.s.Mounts = slices.DeleteFunc(a.s.Mounts, func(x specs.Mount) bool { return path.Clean(x.Destination) == dst })
	})
	for _, m := range add {
		plugin := a.ownerOf((*api.OwningPlugins).MountOwner, m.Destination)
		mnt, err := a.checkMount(m)
		if err != nil {
			return a.fail(plugin, err)
		}
		a.s.Mounts = slices.DeleteFunc(a.s.Mounts, func(x specs.Mount) bool { return path.Clean(x.Destination) == mnt.Destination })
		a.s.Mounts = append(a.s.Mounts, mnt)
		a.propagation(mnt.Options)
	}
	return nil
}

func (a *adjuster) checkMount(m *api.Mount) (specs.Mount, error) {
	field := fmt.Sprintf("mounts[%q]", m.Destination)
	if err := checkContainerPath(m.Destination); err != nil {
		return specs.Mount{}, invalidf("%s destination: %v", field, err)
	}
	dst := path.Clean(m.Destination)
	if dst == "/" {
		return specs.Mount{}, invalidf("%s: cannot mount over the rootfs", field)
	}
	bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
	if bind && m.Source == "" {
		return specs.Mount{}, invalidf("%s: bind mount without a source", field)
	}
	if m.Type == "" && !bind {
		return specs.Mount{}, invalidf("%s: neither a type nor a bind mount", field)
	}
	for _, opt := range m.Options {
		if opt == "idmap" || opt == "ridmap" {
			if err := a.rt.needs(field+" option "+opt, "1.2.0"); err != nil {
				return specs.Mount{}, err
			}
		}
		if slices.Contains(genericMountOptions, opt) {
			if err := listed(field+" option", a.rt.f.MountOptions, opt); err != nil {
				return specs.Mount{}, err
			}
		}
		if opt == api.SELinuxRelabel {
			return specs.Mount{}, unsupportedf("%s option %q: crin does not relabel for SELinux", field, opt)
		}
	}
	if bind {
		if err := checkBindSource(field, m.Source); err != nil {
			return specs.Mount{}, err
		}
	}
	return specs.Mount{Destination: dst, Type: m.Type, Source: m.Source, Options: slices.Clone(m.Options)}, nil
}

// checkBindSource checks a plugin's bind mount source on the host now,
// so a missing one fails naming the plugin and the field instead of as
// the runtime's message about a mount it cannot tell the origin of.
func checkBindSource(field, src string) error {
	if !path.IsAbs(src) {
		return invalidf("%s source %q: not an absolute path", field, src)
	}
	_, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: source %q does not exist: %w", field, src, errdefs.ErrNotFound)
	case err != nil:
		return invalidf("%s source %q: %v", field, src, err)
	}
	return nil
}

// propagation makes the rootfs propagation allow what a mount asks for:
// a shared mount needs a shared rootfs, a slave one a slave or shared
// rootfs (the runtime's default, rslave, is enough).
func (a *adjuster) propagation(opts []string) {
	cur := a.linux().RootfsPropagation
	for _, o := range opts {
		switch o {
		case "rshared", "shared":
			a.s.Linux.RootfsPropagation = "rshared"
			return
		case "rslave", "slave":
			if cur != "" && cur != "rshared" && cur != "shared" && cur != "rslave" && cur != "slave" {
				a.s.Linux.RootfsPropagation = "rslave"
			}
		}
	}
}

func checkEnvName(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return invalidf("env[%q]: not a variable name", k)
	}
	return nil
}

func (a *adjuster) env(adj *api.ContainerAdjustment) error {
	if len(adj.Env) == 0 {
		return nil
	}
	e := &envList{list: a.process().Env}
	var add []*api.KeyValue
	for _, kv := range adj.Env {
		if kv == nil {
			continue
		}
		k, remove := kv.IsMarkedForRemoval()
		if err := checkEnvName(k); err != nil {
			return a.fail(a.ownerOf((*api.OwningPlugins).EnvOwner, k), err)
		}
		if !remove {
			add = append(add, kv)
			continue
		}
		for i := e.index(k); i >= 0; i = e.index(k) {
			e.list = slices.Delete(e.list, i, i+1)
		}
	}
	for _, kv := range add {
		if strings.IndexByte(kv.Value, 0) >= 0 {
			return a.fail(a.ownerOf((*api.OwningPlugins).EnvOwner, kv.Key), invalidf("env[%q]: value contains a NUL byte", kv.Key))
		}
		e.set(kv.Key, kv.Value)
	}
	a.s.Process.Env = e.list
	return nil
}

func (a *adjuster) args(adj *api.ContainerAdjustment) error {
	if len(adj.Args) == 0 {
		return nil
	}
	args := adj.Args
	if args[0] == "" { // api's UpdateArgs marker
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "" {
		return a.fail(a.owner((*api.OwningPlugins).ArgsOwner), invalidf("args %q: no command", adj.Args))
	}
	a.process().Args = slices.Clone(args)
	return nil
}

func (a *adjuster) hooks(adj *api.ContainerAdjustment) error {
	h := adj.Hooks.Hooks()
	if h == nil {
		return nil
	}
	plugin := a.owner((*api.OwningPlugins).HooksOwner)
	conv := func(kind string, in []*api.Hook) ([]specs.Hook, error) {
		var out []specs.Hook
		for i, x := range in {
			if x == nil {
				continue
			}
			field := fmt.Sprintf("hooks.%s[%d]", kind, i)
			if err := checkContainerPath(x.Path); err != nil {
				return nil, invalidf("%s.path %q: %v", field, x.Path, err)
			}
			if t := x.Timeout.Get(); t != nil && *t <= 0 {
				return nil, invalidf("%s.timeout %d: not positive", field, *t)
			}
			out = append(out, x.ToOCI())
		}
		return out, nil
	}
	var add specs.Hooks
	for _, k := range []struct {
		kind string
		in   []*api.Hook
		out  *[]specs.Hook
	}{
		{"prestart", h.Prestart, &add.Prestart}, //nolint:staticcheck // still run by runtimes
		{"createRuntime", h.CreateRuntime, &add.CreateRuntime},
		{"createContainer", h.CreateContainer, &add.CreateContainer},
		{"startContainer", h.StartContainer, &add.StartContainer},
		{"poststart", h.Poststart, &add.Poststart},
		{"poststop", h.Poststop, &add.Poststop},
	} {
		hs, err := conv(k.kind, k.in)
		if err != nil {
			return a.fail(plugin, err)
		}
		*k.out = hs
	}
	if err := fitHooks(a.rt.fitter(), &add); err != nil {
		return a.fail(plugin, err)
	}
	if a.s.Hooks == nil {
		a.s.Hooks = &specs.Hooks{}
	}
	a.s.Hooks.Prestart = append(a.s.Hooks.Prestart, add.Prestart...) //nolint:staticcheck // still run by runtimes
	a.s.Hooks.CreateRuntime = append(a.s.Hooks.CreateRuntime, add.CreateRuntime...)
	a.s.Hooks.CreateContainer = append(a.s.Hooks.CreateContainer, add.CreateContainer...)
	a.s.Hooks.StartContainer = append(a.s.Hooks.StartContainer, add.StartContainer...)
	a.s.Hooks.Poststart = append(a.s.Hooks.Poststart, add.Poststart...)
	a.s.Hooks.Poststop = append(a.s.Hooks.Poststop, add.Poststop...)
	return nil
}

// rlimitTypes are the resource limits Linux has.
var rlimitTypes = []string{
	"RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
	"RLIMIT_LOCKS", "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE", "RLIMIT_NICE",
	"RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_RSS", "RLIMIT_RTPRIO",
	"RLIMIT_RTTIME", "RLIMIT_SIGPENDING", "RLIMIT_STACK",
}

func (a *adjuster) rlimits(adj *api.ContainerAdjustment) error {
	for _, r := range adj.Rlimits {
		if r == nil {
			continue
		}
		field := fmt.Sprintf("rlimits[%q]", r.Type)
		plugin := a.ownerOf((*api.OwningPlugins).RlimitOwner, r.Type)
		if !slices.Contains(rlimitTypes, r.Type) {
			return a.fail(plugin, invalidf("%s: unknown resource limit", field))
		}
		if r.Soft > r.Hard {
			return a.fail(plugin, invalidf("%s: soft limit %d above hard limit %d", field, r.Soft, r.Hard))
		}
		p := a.process()
		rl := specs.POSIXRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft}
		if i := slices.IndexFunc(p.Rlimits, func(x specs.POSIXRlimit) bool { return x.Type == r.Type }); i >= 0 {
			p.Rlimits[i] = rl
		} else {
			p.Rlimits = append(p.Rlimits, rl)
		}
	}
	return nil
}
