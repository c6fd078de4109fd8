package cri

import (
	"context"
	"encoding/json"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/serving"
)

// crind's gRPC server (internal/serving) serves the Service.
var _ serving.CRI = (*Service)(nil)

// Version reports crind's name and versions.
func (s *Service) Version(ctx context.Context, r *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       "crin",
		RuntimeVersion:    s.opts.Version,
		RuntimeApiVersion: "v1",
	}, nil
}

// Status reports the runtime and network conditions. The network is not
// ready while no CNI config is loaded.
func (s *Service) Status(ctx context.Context, r *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	netCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if err := s.opts.Network.Status(); err != nil {
		netCond.Status = false
		netCond.Reason = "NetworkPluginNotReady"
		netCond.Message = err.Error()
	}
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			netCond,
		}},
		// Supplemental groups policy (Merge and Strict) and the bind
		// mount options (noexec, nodev, nosuid and the atime family) are
		// crind's own work on the spec, so every handler has them.
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true},
	}
	// A handler whose runtime cannot run here is listed (with no features)
	// and has a condition of its own saying why; kubelet needs only
	// RuntimeReady and NetworkReady, the other conditions are for people.
	for _, name := range s.runtimeNames() {
		if err := s.notReady[name]; err != nil {
			resp.Status.Conditions = append(resp.Status.Conditions, &runtimeapi.RuntimeCondition{
				Type: "RuntimeHandlerReady/" + name, Status: false, Reason: "RuntimeHandlerNotReady", Message: err.Error(),
			})
		}
	}
	// The CRI names the handler used for pods that name none "" (kubelet
	// reads the default's features under that name); every configured
	// handler is listed under its own name too.
	for _, name := range append([]string{""}, s.runtimeNames()...) {
		resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{
			Name:     name,
			Features: s.handlerFeatures(name),
		})
	}
	if r.GetVerbose() {
		b, err := json.Marshal(map[string]any{
			"defaultRuntime": s.opts.DefaultRuntime,
			"runtimes":       s.runtimeNames(),
			"features":       s.features,
			"checkpoint":     s.ckpt.Status(ctx, s.runtimeNames()),
		})
		if err == nil {
			resp.Info = map[string]string{"config": string(b)}
		}
	}
	return resp, nil
}

// handlerFeatures is what a handler ("" for the default) supports. It says
// only what crind really implements with that handler's runtime: recursive
// read-only mounts when the runtime lists the "rro" mount option in its
// features; user namespaces when the start-up probe found that id-mapped
// mounts work here and the runtime is one they were tested with (runc).
func (s *Service) handlerFeatures(name string) *runtimeapi.RuntimeHandlerFeatures {
	if name == "" {
		name = s.opts.DefaultRuntime
	}
	f := s.features[name]
	if s.notReady[name] != nil {
		f = nil
	}
	return &runtimeapi.RuntimeHandlerFeatures{
		RecursiveReadOnlyMounts: f != nil && slices.Contains(f.MountOptions, "rro"),
		UserNamespaces:          s.env.UserNSUsable(name, s.features[name]) == nil,
	}
}

// RuntimeConfig reports the cgroup driver crind runs with; kubelet takes
// it over its own cgroupDriver setting (KubeletCgroupDriverFromCRI), so
// the pod cgroups it makes and names are in the form crind expects.
func (s *Service) RuntimeConfig(ctx context.Context, r *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	d := runtimeapi.CgroupDriver_CGROUPFS
	if s.env.Layout().Driver == cgroup.Systemd {
		d = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: d},
	}, nil
}

// UpdateRuntimeConfig takes the node's pod CIDR for the network plugins.
func (s *Service) UpdateRuntimeConfig(ctx context.Context, r *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if cidr := r.GetRuntimeConfig().GetNetworkConfig().GetPodCidr(); cidr != "" {
		if err := s.opts.Network.SetPodCIDR(cidr); err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "pod CIDR updated", "pod_cidr", cidr)
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

func (s *Service) runtimeNames() []string {
	names := make([]string, 0, len(s.opts.Runtimes))
	for n := range s.opts.Runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
