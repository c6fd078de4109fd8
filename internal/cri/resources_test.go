package cri

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// TestUpdateRefusesWhatCreateRefuses: values CreateContainer refuses never
// reach the runtime through UpdateContainerResources or
// UpdatePodSandboxResources, and are refused the same way.
func TestUpdateRefusesWhatCreateRefuses(t *testing.T) {
	h := newHub(t)
	pod := h.runPod(t, "p")
	id := h.create(t, pod, "c")
	h.startCtr(t, id)
	tests := []struct {
		name string
		res  *runtimeapi.LinuxContainerResources
		text string
	}{
		{"cpu_shares 1", &runtimeapi.LinuxContainerResources{CpuShares: 1}, "cpu_shares 1"},
		{"cpuset abc", &runtimeapi.LinuxContainerResources{CpusetCpus: "abc"}, `cpuset_cpus "abc"`},
		{"cpuset open", &runtimeapi.LinuxContainerResources{CpusetCpus: "0-"}, `cpuset_cpus "0-"`},
		{"unified cgroup.procs", &runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.procs": "1"}}, `unified["cgroup.procs"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig("bad")
			cfg.Linux = &runtimeapi.LinuxContainerConfig{Resources: tc.res}
			_, createErr := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg})
			_, updErr := h.UpdateContainerResources(t.Context(), &runtimeapi.UpdateContainerResourcesRequest{ContainerId: id, Linux: tc.res})
			_, podErr := h.UpdatePodSandboxResources(t.Context(), &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: pod, Resources: tc.res})
			for call, err := range map[string]error{"CreateContainer": createErr, "UpdateContainerResources": updErr, "UpdatePodSandboxResources": podErr} {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.text) {
					t.Errorf("%s: err = %v, want InvalidArgument naming %s", call, err, tc.text)
				}
			}
			h.rt.mu.Lock()
			res := h.rt.ctrs[id].res
			h.rt.mu.Unlock()
			if res != nil {
				t.Errorf("the runtime was updated with %+v", res)
			}
		})
	}
}

func TestRuntimeUpdateError(t *testing.T) {
	exitErr := exec.Command("false").Run()
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"refused", &runtime.RuntimeError{Runtime: "runc", Args: []string{"update"}, Msg: "invalid argument", Err: exitErr}, errdefs.ErrInvalidArgument},
		{"silent exit", &runtime.RuntimeError{Runtime: "runc", Args: []string{"update"}, Err: exitErr}, errdefs.ErrUnavailable},
		{"not started", &runtime.RuntimeError{Runtime: "runc", Args: []string{"update"}, Err: exec.ErrNotFound}, errdefs.ErrUnavailable},
		{"timeout", &runtime.RuntimeError{Runtime: "runc", Args: []string{"update"}, Msg: "x", Err: fmt.Errorf("signal: killed: %w", context.DeadlineExceeded)}, errdefs.ErrUnavailable},
		{"classified", fmt.Errorf("container is stopped: %w", errdefs.ErrFailedPrecondition), errdefs.ErrFailedPrecondition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtimeUpdateError(tc.err); !errors.Is(got, tc.want) {
				t.Errorf("runtimeUpdateError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
