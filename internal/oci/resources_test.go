package oci

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestResourceVerdicts checks that every way a resource value comes in
// (CRI CreateContainer, UpdateContainerResources, UpdatePodSandboxResources,
// an NRI adjustment, an NRI update) accepts or refuses it the same way,
// with an error naming the value.
func TestResourceVerdicts(t *testing.T) {
	tests := []struct {
		name string
		cri  *runtimeapi.LinuxContainerResources
		nri  *api.LinuxResources
		want error  // nil: accepted
		text string // what every refusal mentions
	}{
		{name: "shares 1", cri: &runtimeapi.LinuxContainerResources{CpuShares: 1},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(1)}}, want: errdefs.ErrInvalidArgument, text: "shares"},
		{name: "shares 2", cri: &runtimeapi.LinuxContainerResources{CpuShares: 2},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(2)}}},
		{name: "shares too many", cri: &runtimeapi.LinuxContainerResources{CpuShares: 1 << 20},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(1 << 20)}}, want: errdefs.ErrInvalidArgument, text: "1048576"},
		{name: "quota 10", cri: &runtimeapi.LinuxContainerResources{CpuQuota: 10},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: api.Int64(10)}}, want: errdefs.ErrInvalidArgument, text: "quota 10"},
		{name: "quota unlimited", cri: &runtimeapi.LinuxContainerResources{CpuQuota: -1},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Quota: api.Int64(-1)}}},
		{name: "period 5", cri: &runtimeapi.LinuxContainerResources{CpuPeriod: 5},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Period: api.UInt64(5)}}, want: errdefs.ErrInvalidArgument, text: "period 5"},
		{name: "cpuset open range", cri: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-"},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "0-"}}, want: errdefs.ErrInvalidArgument, text: `"0-"`},
		{name: "cpuset word", cri: &runtimeapi.LinuxContainerResources{CpusetCpus: "abc"},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "abc"}}, want: errdefs.ErrInvalidArgument, text: `"abc"`},
		{name: "cpuset backwards", cri: &runtimeapi.LinuxContainerResources{CpusetCpus: "3-1"},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "3-1"}}, want: errdefs.ErrInvalidArgument, text: `"3-1"`},
		{name: "cpuset ok", cri: &runtimeapi.LinuxContainerResources{CpusetCpus: "0-1,3"},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: "0-1,3"}}},
		{name: "mems word", cri: &runtimeapi.LinuxContainerResources{CpusetMems: "x"},
			nri: &api.LinuxResources{Cpu: &api.LinuxCPU{Mems: "x"}}, want: errdefs.ErrInvalidArgument, text: `"x"`},
		{name: "memory -2", cri: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -2},
			nri: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(-2)}}, want: errdefs.ErrInvalidArgument, text: "-2"},
		{name: "memory unlimited", cri: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1},
			nri: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(-1)}}},
		{name: "memory 64M", cri: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20},
			nri: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(64 << 20)}}},
		{name: "hugepage size", cri: &runtimeapi.LinuxContainerResources{HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2M"}}},
			nri: &api.LinuxResources{HugepageLimits: []*api.HugepageLimit{{PageSize: "2M"}}}, want: errdefs.ErrInvalidArgument, text: `"2M"`},
		{name: "unified cgroup.procs", cri: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"cgroup.procs": "1"}},
			nri: &api.LinuxResources{Unified: map[string]string{"cgroup.procs": "1"}}, want: errdefs.ErrInvalidArgument, text: `["cgroup.procs"]`},
		{name: "unified path", cri: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"../memory.max": "1"}},
			nri: &api.LinuxResources{Unified: map[string]string{"../memory.max": "1"}}, want: errdefs.ErrInvalidArgument, text: `["../memory.max"]`},
		{name: "unified on v1", cri: &runtimeapi.LinuxContainerResources{Unified: map[string]string{"memory.high": "1G"}},
			nri: &api.LinuxResources{Unified: map[string]string{"memory.high": "1G"}}, want: errdefs.ErrNotImplemented, text: "needs cgroup v2"},
	}
	paths := []struct {
		name  string
		apply func(t *testing.T, cri *runtimeapi.LinuxContainerResources, nri *api.LinuxResources) error
	}{
		{"create", func(t *testing.T, r *runtimeapi.LinuxContainerResources, _ *api.LinuxResources) error {
			o := containerOpts(t, podConfig(nil), &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{Resources: r}})
			o.Host = hostV1
			_, err := ContainerSpec(o)
			return err
		}},
		{"update", func(_ *testing.T, r *runtimeapi.LinuxContainerResources, _ *api.LinuxResources) error {
			_, err := MergeCRIResources("linux", &specs.LinuxResources{}, r, hostV1)
			return err
		}},
		{"pod update", func(_ *testing.T, r *runtimeapi.LinuxContainerResources, _ *api.LinuxResources) error {
			_, err := CRIResources("resources", r, hostV1)
			return err
		}},
		{"nri adjustment", func(_ *testing.T, _ *runtimeapi.LinuxContainerResources, r *api.LinuxResources) error {
			adj := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: r}}
			return ApplyAdjustment(nriBaseSpec(), adj, AdjustOptions{ContainerID: testCtr, Features: newerFeatures(), RuntimeName: "runc", Host: hostV1})
		}},
		{"nri update", func(_ *testing.T, _ *runtimeapi.LinuxContainerResources, r *api.LinuxResources) error {
			_, err := ApplyUpdate(&specs.LinuxResources{}, r, UpdateOptions{ContainerID: testCtr, Features: newerFeatures(), RuntimeName: "runc", Host: hostV1})
			return err
		}},
	}
	for _, tc := range tests {
		for _, p := range paths {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				err := p.apply(t, tc.cri, tc.nri)
				if tc.want == nil {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if !strings.Contains(err.Error(), tc.text) {
					t.Errorf("err = %q, want it to mention %q", err, tc.text)
				}
			})
		}
	}
}

func TestNRIResourcesFromCRI(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *runtimeapi.LinuxContainerResources
		want *api.LinuxResources
	}{
		{name: "nil", in: nil, want: nil},
		{name: "empty", in: &runtimeapi.LinuxContainerResources{},
			want: &api.LinuxResources{Memory: &api.LinuxMemory{}, Cpu: &api.LinuxCPU{}}},
		{
			name: "all",
			in: &runtimeapi.LinuxContainerResources{
				CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, CpusetCpus: "0-1", CpusetMems: "0",
				MemoryLimitInBytes: 64 << 20, MemorySwapLimitInBytes: 128 << 20,
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}},
				Unified:        map[string]string{"memory.high": "max"},
			},
			want: &api.LinuxResources{
				Memory:         &api.LinuxMemory{Limit: api.Int64(64 << 20), Swap: api.Int64(128 << 20)},
				Cpu:            &api.LinuxCPU{Shares: api.UInt64(512), Quota: api.Int64(50000), Period: api.UInt64(100000), Cpus: "0-1", Mems: "0"},
				HugepageLimits: []*api.HugepageLimit{{PageSize: "2MB"}},
				Unified:        map[string]string{"memory.high": "max"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NRIResourcesFromCRI(tc.in)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("NRIResourcesFromCRI (-want +got):\n%s", diff)
			}
		})
	}
}
