package cri

import (
	"context"
	"encoding/json"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// PodSandboxStatus reports a pod. Unknown is NotFound.
func (s *Service) PodSandboxStatus(ctx context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := s.getSandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	st := sandboxStatus(sb)
	var info map[string]string
	if r.GetVerbose() {
		b, err := json.Marshal(struct {
			Pid            int                          `json:"pid"`
			NetNS          string                       `json:"netns,omitempty"`
			RuntimeHandler string                       `json:"runtimeHandler"`
			CgroupParent   string                       `json:"cgroupParent"`
			PodDir         string                       `json:"podDir"`
			IPs            []string                     `json:"ips,omitempty"`
			Config         *runtimeapi.PodSandboxConfig `json:"config"`
		}{sb.rec.Pid, sb.rec.NetNS, sb.rec.RuntimeHandler, sb.rec.CgroupParent, sb.rec.PodDir, sb.rec.IPs, sb.config})
		if err == nil {
			info = map[string]string{"info": string(b)}
		}
	}
	sb.mu.Unlock()
	return &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info}, nil
}

// sandboxStatus renders a pod's status; sb.mu must be held.
func sandboxStatus(sb *sandbox) *runtimeapi.PodSandboxStatus {
	rec, cfg := sb.rec, sb.config
	// The fields ListPodSandbox also reports (as a PodSandbox, another
	// type) come from the same record fields: keep the two alike.
	st := &runtimeapi.PodSandboxStatus{
		Id:             rec.ID,
		Metadata:       cfg.GetMetadata(),
		State:          sandboxState(rec.State),
		CreatedAt:      rec.CreatedAt,
		Labels:         cfg.GetLabels(),
		Annotations:    cfg.GetAnnotations(),
		RuntimeHandler: rec.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{
			Namespaces: &runtimeapi.Namespace{Options: cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()},
		},
	}
	if len(rec.IPs) > 0 && rec.State == store.SandboxReady {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: rec.IPs[0]}
		for _, ip := range rec.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return st
}

func sandboxState(s store.SandboxState) runtimeapi.PodSandboxState {
	if s == store.SandboxReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// ListPodSandbox lists the visible pods matching the filter.
func (s *Service) ListPodSandbox(ctx context.Context, r *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := r.GetFilter()
	if err := checkPodFilter(f); err != nil {
		return nil, err
	}
	sbs := s.allSandboxes()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range sbs {
		sb.mu.Lock()
		rec, cfg := sb.rec, sb.config
		ok := (f.GetId() == "" || hasPrefix(rec.ID, f.GetId())) &&
			(f.GetState() == nil || f.GetState().GetState() == sandboxState(rec.State)) &&
			labelsMatch(cfg.GetLabels(), f.GetLabelSelector())
		if ok {
			// As sandboxStatus fills the same fields of a
			// PodSandboxStatus: keep the two alike.
			resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
				Id:             rec.ID,
				Metadata:       cfg.GetMetadata(),
				State:          sandboxState(rec.State),
				CreatedAt:      rec.CreatedAt,
				Labels:         cfg.GetLabels(),
				Annotations:    cfg.GetAnnotations(),
				RuntimeHandler: rec.RuntimeHandler,
			})
		}
		sb.mu.Unlock()
	}
	return resp, nil
}

func hasPrefix(id, prefix string) bool {
	return len(id) >= len(prefix) && id[:len(prefix)] == prefix
}

// labelsMatch reports whether labels hold every key=value of sel.
func labelsMatch(labels, sel map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
