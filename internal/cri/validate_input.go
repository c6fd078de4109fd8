package cri

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/oci"
)

// Limits on what a client may send besides the gRPC message size
// (serving.MaxRequestSize; docs/errors.md, "Request sizes"). kubelet's own requests stay far below
// them.
const (
	// maxSelectorLabels is the most entries a list filter's label_selector
	// may have: kubelet sends at most a handful.
	maxSelectorLabels = 64
	// maxLabelKey and maxLabelValue bound one selector entry: a
	// Kubernetes label key is at most 253 bytes of prefix, '/' and 63 of
	// name; values here are generous, as the CRI labels kubelet sets hold
	// pod names (up to 253 bytes).
	maxLabelKey   = 317
	maxLabelValue = 1024
	// maxNameLen is NAME_MAX: the longest file name Linux takes.
	maxNameLen = 255
	// maxPathLen is PATH_MAX less the terminating NUL.
	maxPathLen = 4095
)

// validateRunRequest is every check of a pod config that needs no state.
func validateRunRequest(cfg *runtimeapi.PodSandboxConfig) error {
	if err := validatePodConfig(cfg); err != nil {
		return err
	}
	return validatePodInput(cfg)
}

// validatePodInput checks what validatePodConfig leaves: annotations, the
// log directory and port mappings, which would otherwise fail late (in CNI) or reach the
// spec unchecked.
func validatePodInput(cfg *runtimeapi.PodSandboxConfig) error {
	if err := checkAnnotations("config.annotations", cfg.GetAnnotations()); err != nil {
		return err
	}
	if d := cfg.GetLogDirectory(); d != "" && !filepath.IsAbs(d) {
		return fmt.Errorf("config.log_directory %q: must be absolute: %w", d, errdefs.ErrInvalidArgument)
	}
	return checkPortMappings(cfg.GetPortMappings())
}

// validateContainerInput checks what validateContainerConfig leaves:
// annotations and the length of log_path's names.
func validateContainerInput(cfg *runtimeapi.ContainerConfig) error {
	if err := checkAnnotations("config.annotations", cfg.GetAnnotations()); err != nil {
		return err
	}
	return checkLogPathNames(cfg.GetLogPath())
}

// checkAnnotations refuses a CRI annotation under crin's own prefix: crin
// sets and reads those keys itself (oci.AnnotationPrefix), and one that
// came from a client would reach the spec looking like crin's.
func checkAnnotations(field string, ann map[string]string) error {
	var bad []string
	for k := range ann {
		if strings.HasPrefix(k, oci.AnnotationPrefix) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%s[%q]: the %q prefix is reserved for crin's own annotations: %w", field, bad[0], oci.AnnotationPrefix, errdefs.ErrInvalidArgument)
}

// checkPortMappings refuses ports that are not TCP, UDP or SCTP ports;
// the portmap plugin would otherwise fail with an error kubelet cannot
// tell from a broken node.
func checkPortMappings(pms []*runtimeapi.PortMapping) error {
	for i, pm := range pms {
		field := fmt.Sprintf("config.port_mappings[%d]", i)
		if pm == nil {
			return fmt.Errorf("%s: must be set: %w", field, errdefs.ErrInvalidArgument)
		}
		if p := pm.GetHostPort(); p < 0 || p > 65535 {
			return fmt.Errorf("%s.host_port %d: must be 0 (none) to 65535: %w", field, p, errdefs.ErrInvalidArgument)
		}
		if p := pm.GetContainerPort(); p < 1 || p > 65535 {
			return fmt.Errorf("%s.container_port %d: must be 1 to 65535: %w", field, p, errdefs.ErrInvalidArgument)
		}
		if _, ok := runtimeapi.Protocol_name[int32(pm.GetProtocol())]; !ok {
			return fmt.Errorf("%s.protocol %d: must be TCP, UDP or SCTP: %w", field, pm.GetProtocol(), errdefs.ErrInvalidArgument)
		}
		if ip := pm.GetHostIp(); ip != "" {
			if _, err := netip.ParseAddr(ip); err != nil {
				return fmt.Errorf("%s.host_ip %q: not an IP address: %w", field, ip, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// checkLogPathNames refuses a log_path no file system could hold, so
// CreateContainer fails rather than StartContainer.
func checkLogPathNames(p string) error {
	if len(p) > maxPathLen {
		return fmt.Errorf("config.log_path (%d bytes): longer than %d bytes: %w", len(p), maxPathLen, errdefs.ErrInvalidArgument)
	}
	for _, name := range strings.Split(filepath.ToSlash(p), "/") {
		if len(name) > maxNameLen {
			return fmt.Errorf("config.log_path %q: file name of %d bytes, longer than %d: %w", p, len(name), maxNameLen, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// checkLabelSelector bounds a list filter's label_selector, which is held
// and compared against every pod or container.
func checkLabelSelector(field string, sel map[string]string) error {
	if len(sel) > maxSelectorLabels {
		return fmt.Errorf("%s: %d entries, more than %d: %w", field, len(sel), maxSelectorLabels, errdefs.ErrInvalidArgument)
	}
	for k, v := range sel {
		if len(k) > maxLabelKey {
			return fmt.Errorf("%s: key %.64q... of %d bytes, longer than %d: %w", field, k, len(k), maxLabelKey, errdefs.ErrInvalidArgument)
		}
		if len(v) > maxLabelValue {
			return fmt.Errorf("%s[%q]: value of %d bytes, longer than %d: %w", field, k, len(v), maxLabelValue, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// checkFilterID bounds an id (prefix) in a list filter: crind's ids are
// idLen bytes, so a longer one matches nothing and is a mistake.
func checkFilterID(field, id string) error {
	if len(id) > idLen {
		return fmt.Errorf("%s %.64q...: %d bytes, longer than an id (%d): %w", field, id, len(id), idLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

// listFilter is what the list filters of pods and containers, and of
// their stats, have in common.
type listFilter interface {
	GetId() string
	GetLabelSelector() map[string]string
}

// checkPodFilter bounds the filter of ListPodSandbox and
// ListPodSandboxStats.
func checkPodFilter(f listFilter) error {
	if err := checkFilterID("filter.id", f.GetId()); err != nil {
		return err
	}
	return checkLabelSelector("filter.label_selector", f.GetLabelSelector())
}

// checkContainerFilter bounds the filter of ListContainers and
// ListContainerStats.
func checkContainerFilter(f interface {
	listFilter
	GetPodSandboxId() string
}) error {
	if err := checkPodFilter(f); err != nil {
		return err
	}
	return checkFilterID("filter.pod_sandbox_id", f.GetPodSandboxId())
}

// validateRunRequest is validateRunRequest (the checks that need no
// state), the pod's cgroup parent checked in this crind's driver's form,
// and the room left on crind's disk (checkDiskRoom).
func (s *Service) validateRunRequest(cfg *runtimeapi.PodSandboxConfig) error {
	if err := validateRunRequest(cfg); err != nil {
		return err
	}
	if p := cfg.GetLinux().GetCgroupParent(); p != "" {
		if err := s.env.Layout().CheckParent("config.linux.cgroup_parent", p); err != nil {
			return err
		}
	}
	return s.checkDiskRoom("run pod sandbox")
}
