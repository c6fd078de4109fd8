package nri

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	yaml "go.yaml.in/yaml/v3"
)

// RequiredPluginsAnnotation is the pod annotation listing plugins that must
// take part in creating the pod's containers, as a YAML or JSON list of
// plugin names ("name" or "NN-name"). A container-scoped key
// RequiredPluginsAnnotation+"/container.<name>" takes precedence over the
// pod-scoped RequiredPluginsAnnotation+"/pod" and RequiredPluginsAnnotation.
const RequiredPluginsAnnotation = "required-plugins.noderesource.dev"

// DefaultValidatorConfig configures the built-in default validator.
type DefaultValidatorConfig struct {
	// Enable turns the default validator on.
	Enable bool
	// RejectOCIHookAdjustment rejects any plugin adding OCI hooks.
	RejectOCIHookAdjustment bool
	// RejectRuntimeDefaultSeccompAdjustment rejects seccomp policy
	// adjustments of containers whose profile is RuntimeDefault (also the
	// profile the api reports for a container without one).
	RejectRuntimeDefaultSeccompAdjustment bool
	// RejectUnconfinedSeccompAdjustment rejects seccomp policy adjustments
	// of containers whose profile is Unconfined.
	RejectUnconfinedSeccompAdjustment bool
	// RejectCustomSeccompAdjustment rejects seccomp policy adjustments of
	// containers with a custom (Localhost) profile.
	RejectCustomSeccompAdjustment bool
	// RejectNamespaceAdjustment rejects adding, replacing or removing any
	// Linux namespace.
	RejectNamespaceAdjustment bool
	// RejectSysctlAdjustment rejects setting or removing any sysctl.
	RejectSysctlAdjustment bool
	// RequiredPlugins must all have taken part in creating every container
	// ("name" or "NN-name"). Pods that must run without them (static pods
	// started before the plugins) need the TolerateMissingAnnotation.
	RequiredPlugins []string
	// TolerateMissingAnnotation names a pod annotation that, when "true",
	// lets the pod run without the required plugins.
	// The annotation is scoped like RequiredPluginsAnnotation. It waives
	// only RequiredPlugins: plugins a pod requires by its own annotation
	// are always enforced, as the pod asked for both.
	TolerateMissingAnnotation string
}

// defaultValidatorConfig returns the default validator's safe defaults:
// enabled, rejecting OCI hook adjustments and nothing else.
//
// OCI hooks are rejected because a hook is an arbitrary host binary that the
// runtime runs as root outside every container boundary: an adjustment that
// adds one is a node compromise, not a container setting, and the common
// resource, device and topology plugins never need it. Seccomp, namespace
// and sysctl adjustments stay allowed because widely used plugins (seccomp
// notifiers, device and network injectors, tuning plugins) make them for a
// living and rejecting them by default would break those deployments; they
// can be turned off per node. No plugin is required by default, since a
// required plugin that is not installed stops every pod.
func defaultValidatorConfig() DefaultValidatorConfig {
	return DefaultValidatorConfig{
		Enable:                  true,
		RejectOCIHookAdjustment: true,
	}
}

// validationError is a rejection by the default validator: the rule (its
// configuration key, or the annotation) that rejected and what it found.
type validationError struct {
	rule   string
	reason string
	kind   error // errdefs class
}

func (e *validationError) Error() string {
	return "default validator: rule " + e.rule + ": " + e.reason
}

// Unwrap classifies the rejection: errdefs.ErrPermissionDenied for an
// adjustment the node's policy forbids, errdefs.ErrFailedPrecondition for a
// required plugin that did not take part (it may be running later).
func (e *validationError) Unwrap() error { return e.kind }

// defaultValidate is the built-in validator: it checks req (the pristine
// container, the merged adjustment, the field owners and the plugins that
// took part) against cfg and returns an error naming the rule, the field and
// the owning plugin on rejection. Required plugins may also be named by the
// pod annotation "required-plugins.noderesource.dev" (container-scoped
// "required-plugins.noderesource.dev/container.<name>"), a YAML/JSON list.
//
// Every rule is checked; the error joins all rejections (each a
// *validationError). A disabled validator or a nil request accepts.
func defaultValidate(ctx context.Context, cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) error {
	_ = ctx // rejections are returned, never logged
	if !cfg.Enable || req == nil {
		return nil
	}
	var errs []error
	errs = append(errs, validHooks(cfg, req)...)
	errs = append(errs, validSeccomp(cfg, req)...)
	errs = append(errs, validNamespaces(cfg, req)...)
	errs = append(errs, validSysctls(cfg, req)...)
	errs = append(errs, validRequiredPlugins(cfg, req)...)
	return errors.Join(errs...)
}

func validReject(rule, format string, args ...any) error {
	return &validationError{rule: rule, reason: fmt.Sprintf(format, args...), kind: errdefs.ErrPermissionDenied}
}

// validOwner describes who touched a field, from an owner entry: "plugin
// "10-a"", "plugins "10-a", "20-b"" for accumulated hooks, with the verb
// "removed" instead of "set" for a removal mark.
func validOwner(owner string, ok bool) (who, verb string) {
	if !ok || owner == "" {
		return "an unknown plugin", "adjusted"
	}
	verb = "set"
	if p, removed := api.IsMarkedForRemoval(owner); removed {
		owner, verb = p, "removed"
	}
	names := strings.Split(owner, ",")
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	if len(quoted) == 1 {
		return "plugin " + quoted[0], verb
	}
	return "plugins " + strings.Join(quoted, ", "), verb
}

func validHooks(cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) []error {
	if !cfg.RejectOCIHookAdjustment || req.GetAdjust().GetHooks().Hooks() == nil {
		return nil
	}
	who, _ := validOwner(req.GetOwners().HooksOwner(req.GetContainer().GetId()))
	return []error{validReject("reject_oci_hook_adjustment", "OCI hooks added by %s", who)}
}

func validSeccomp(cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) []error {
	if req.GetAdjust().GetLinux().GetSeccompPolicy() == nil {
		return nil
	}
	// A container without a profile reports RuntimeDefault: the stricter
	// reading, so that rule covers it.
	var rule, kind string
	switch req.GetContainer().GetLinux().GetSeccompProfile().GetProfileType() {
	case api.SecurityProfile_RUNTIME_DEFAULT:
		if !cfg.RejectRuntimeDefaultSeccompAdjustment {
			return nil
		}
		rule, kind = "reject_runtime_default_seccomp_adjustment", "a runtime default"
	case api.SecurityProfile_UNCONFINED:
		if !cfg.RejectUnconfinedSeccompAdjustment {
			return nil
		}
		rule, kind = "reject_unconfined_seccomp_adjustment", "an unconfined"
	case api.SecurityProfile_LOCALHOST:
		if !cfg.RejectCustomSeccompAdjustment {
			return nil
		}
		rule, kind = "reject_custom_seccomp_adjustment", "a custom"
	default:
		return nil
	}
	who, verb := validOwner(req.GetOwners().SeccompPolicyOwner(req.GetContainer().GetId()))
	return []error{validReject(rule, "seccomp policy of a container with %s profile %s by %s", kind, verb, who)}
}

func validNamespaces(cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) []error {
	if !cfg.RejectNamespaceAdjustment {
		return nil
	}
	var errs []error
	for _, ns := range req.GetAdjust().GetLinux().GetNamespaces() {
		typ, _ := api.IsMarkedForRemoval(ns.GetType())
		who, verb := validOwner(req.GetOwners().NamespaceOwner(req.GetContainer().GetId(), typ))
		errs = append(errs, validReject("reject_namespace_adjustment", "namespace %q %s by %s", typ, verb, who))
	}
	return errs
}

func validSysctls(cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) []error {
	if !cfg.RejectSysctlAdjustment {
		return nil
	}
	var errs []error
	for _, raw := range slices.Sorted(maps.Keys(req.GetAdjust().GetLinux().GetSysctl())) {
		key, _ := api.IsMarkedForRemoval(raw)
		who, verb := validOwner(req.GetOwners().SysctlOwner(req.GetContainer().GetId(), key))
		errs = append(errs, validReject("reject_sysctl_adjustment", "sysctl %q %s by %s", key, verb, who))
	}
	return errs
}

// validRequiredPlugins checks that the globally required plugins (unless
// tolerated) and the ones the pod's annotation requires took part.
func validRequiredPlugins(cfg DefaultValidatorConfig, req *api.ValidateContainerAdjustmentRequest) []error {
	pod, name := req.GetPod(), req.GetContainer().GetName()
	var errs []error

	global := cfg.RequiredPlugins
	if key := cfg.TolerateMissingAnnotation; key != "" && len(global) > 0 {
		if v, at, ok := validAnnotation(pod, key, name); ok {
			tolerate, err := strconv.ParseBool(strings.TrimSpace(v))
			switch {
			case err != nil:
				errs = append(errs, &validationError{rule: at, kind: errdefs.ErrInvalidArgument,
					reason: fmt.Sprintf("annotation %q: value %q is not a boolean", at, v)})
			case tolerate:
				global = nil
			}
		}
	}
	if missing := validMissing(global, req.GetPlugins()); len(missing) > 0 {
		errs = append(errs, &validationError{rule: "required_plugins", kind: errdefs.ErrFailedPrecondition,
			reason: fmt.Sprintf("required %s did not take part in creating container %q", validPluginList(missing), name)})
	}

	v, at, ok := validAnnotation(pod, RequiredPluginsAnnotation, name)
	if !ok {
		return errs
	}
	var annotated []string
	if err := yaml.Unmarshal([]byte(v), &annotated); err != nil {
		return append(errs, &validationError{rule: at, kind: errdefs.ErrInvalidArgument,
			reason: fmt.Sprintf("annotation %q: value %q is not a list of plugin names", at, v)})
	}
	if missing := validMissing(annotated, req.GetPlugins()); len(missing) > 0 {
		errs = append(errs, &validationError{rule: at, kind: errdefs.ErrFailedPrecondition,
			reason: fmt.Sprintf("required %s did not take part in creating container %q", validPluginList(missing), name)})
	}
	return errs
}

// validAnnotation finds the pod annotation key that applies to container
// name: container-scoped, then pod-scoped, then plain. It returns the value
// and the key it was found under.
func validAnnotation(pod *api.PodSandbox, key, name string) (value, at string, ok bool) {
	annotations := pod.GetAnnotations()
	for _, k := range []string{key + "/container." + name, key + "/pod", key} {
		if v, found := annotations[k]; found {
			return v, k, true
		}
	}
	return "", "", false
}

// validMissing returns the names in required that no plugin in present
// matches, by name or by index-name.
func validMissing(required []string, present []*api.PluginInstance) []string {
	var missing []string
	for _, r := range required {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		found := slices.ContainsFunc(present, func(p *api.PluginInstance) bool {
			return p.GetName() == r || p.GetIndex()+"-"+p.GetName() == r
		})
		if !found && !slices.Contains(missing, r) {
			missing = append(missing, r)
		}
	}
	return missing
}

func validPluginList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	if len(quoted) == 1 {
		return "plugin " + quoted[0]
	}
	return "plugins " + strings.Join(quoted, ", ")
}
