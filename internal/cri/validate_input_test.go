package cri

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestExactIDs checks that the RPCs that change, destroy or give access to
// a pod or container refuse a prefix of an existing one, naming the field
// and the value, and leave it as it was; reads still resolve prefixes.
func TestExactIDs(t *testing.T) {
	h := newHub(t)
	h.opts.StreamAddress = "127.0.0.1:0"
	h.start(t, true)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	ctr := h.create(t, pod, "c")
	h.startCtr(t, ctr)
	pp, cp := pod[:1], ctr[:1]
	for _, tc := range []struct {
		name, field, value string
		call               func(context.Context) error
	}{
		{"StopPodSandbox", "pod_sandbox_id", pp, func(ctx context.Context) error {
			_, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pp})
			return err
		}},
		{"RemovePodSandbox", "pod_sandbox_id", pp, func(ctx context.Context) error {
			_, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pp})
			return err
		}},
		{"UpdatePodSandboxResources", "pod_sandbox_id", pp, func(ctx context.Context) error {
			_, err := h.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: pp})
			return err
		}},
		{"CreateContainer", "pod_sandbox_id", pp, func(ctx context.Context) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pp, Config: ctrConfig("x"), SandboxConfig: podConfig("web")})
			return err
		}},
		{"PortForward", "pod_sandbox_id", pp, func(ctx context.Context) error {
			_, err := h.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pp, Port: []int32{80}})
			return err
		}},
		{"StopContainer", "container_id", cp, func(ctx context.Context) error {
			_, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cp})
			return err
		}},
		{"RemoveContainer", "container_id", cp, func(ctx context.Context) error {
			_, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cp})
			return err
		}},
		{"StartContainer", "container_id", cp, func(ctx context.Context) error {
			_, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cp})
			return err
		}},
		{"UpdateContainerResources", "container_id", cp, func(ctx context.Context) error {
			_, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: cp, Linux: &runtimeapi.LinuxContainerResources{}})
			return err
		}},
		{"ReopenContainerLog", "container_id", cp, func(ctx context.Context) error {
			_, err := h.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: cp})
			return err
		}},
		{"ExecSync", "container_id", cp, func(ctx context.Context) error {
			_, err := h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cp, Cmd: []string{"true"}})
			return err
		}},
		{"Exec", "container_id", cp, func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cp, Cmd: []string{"sh"}, Stdout: true})
			return err
		}},
		{"Attach", "container_id", cp, func(ctx context.Context) error {
			_, err := h.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: cp, Stdout: true})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx)
			if classify(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), `"`+tc.value+`"`) {
				t.Errorf("one-character prefix: %v, want InvalidArgument naming %s %q", err, tc.field, tc.value)
			}
		})
	}
	st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: cp})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("status by prefix after the refusals: %v, %v; want the container, running", st, err)
	}
	ps, err := h.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pp})
	if err != nil || ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod status by prefix after the refusals: %v, %v; want the pod, ready", ps, err)
	}
}

func TestValidateInput(t *testing.T) {
	pm := func(host, ctr int32, proto runtimeapi.Protocol) *runtimeapi.PodSandboxConfig {
		c := podConfig("p")
		c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80}, {HostPort: host, ContainerPort: ctr, Protocol: proto}}
		return c
	}
	ann := func(k string) map[string]string { return map[string]string{"a": "b", k: "x"} }
	podAnn := podConfig("p")
	podAnn.Annotations = ann("io.crin.sandbox-id")
	ctrAnn := ctrConfig("c")
	ctrAnn.Annotations = ann("io.crin.extra")
	longLog := ctrConfig("c")
	longLog.LogPath = "c/" + strings.Repeat("x", 300)
	okLog := ctrConfig("c")
	okLog.LogPath = "c/" + strings.Repeat("x", 255)
	for _, tc := range []struct {
		name    string
		err     error
		mention string // "" means valid
	}{
		{"good ports", validatePodInput(pm(8080, 80, runtimeapi.Protocol_UDP)), ""},
		{"negative host port", validatePodInput(pm(-1, 80, 0)), "config.port_mappings[1].host_port -1"},
		{"host port too big", validatePodInput(pm(65536, 80, 0)), "config.port_mappings[1].host_port 65536"},
		{"container port 0", validatePodInput(pm(80, 0, 0)), "config.port_mappings[1].container_port 0"},
		{"container port too big", validatePodInput(pm(80, 70000, 0)), "config.port_mappings[1].container_port 70000"},
		{"bad protocol", validatePodInput(pm(80, 80, 7)), "config.port_mappings[1].protocol 7"},
		{"pod annotation", validatePodInput(podAnn), `config.annotations["io.crin.sandbox-id"]`},
		{"container annotation", validateContainerInput(ctrAnn), `config.annotations["io.crin.extra"]`},
		{"long log name", validateContainerInput(longLog), "config.log_path"},
		{"log name of 255", validateContainerInput(okLog), ""},
		{"selector entries", checkPodFilter(&runtimeapi.PodSandboxFilter{LabelSelector: manyLabels(65)}), "filter.label_selector: 65 entries"},
		{"selector of 64", checkPodFilter(&runtimeapi.PodSandboxFilter{LabelSelector: manyLabels(64)}), ""},
		{"selector key", checkContainerFilter(&runtimeapi.ContainerFilter{LabelSelector: map[string]string{strings.Repeat("k", 318): ""}}), "filter.label_selector: key"},
		{"selector value", checkContainerFilter(&runtimeapi.ContainerFilter{LabelSelector: map[string]string{"k": strings.Repeat("v", 1025)}}), `filter.label_selector["k"]`},
		{"filter pod id", checkContainerFilter(&runtimeapi.ContainerStatsFilter{PodSandboxId: strings.Repeat("a", 65)}), "filter.pod_sandbox_id"},
		{"nil filter", checkContainerFilter((*runtimeapi.ContainerFilter)(nil)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mention == "" {
				if tc.err != nil {
					t.Fatalf("unexpected error: %v", tc.err)
				}
				return
			}
			if classify(tc.err) != codes.InvalidArgument || !strings.Contains(tc.err.Error(), tc.mention) {
				t.Errorf("%v, want InvalidArgument mentioning %q", tc.err, tc.mention)
			}
		})
	}
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[strings.Repeat("k", i+1)] = "v"
	}
	return m
}

// TestNRIEmptyUpdates checks that an NRI plugin's UpdateContainers entry
// that sets no resources is listed as failed, not dropped, and that the
// others in the request still apply.
func TestNRIEmptyUpdates(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	a, b, c := h.create(t, pod, "a"), h.create(t, pod, "b"), h.create(t, pod, "c")
	for _, id := range []string{a, b, c} {
		h.startCtr(t, id)
	}
	failed, err := h.NRIEngine().UpdateContainers(ctx, []*api.ContainerUpdate{
		{ContainerId: a},
		{ContainerId: b, Linux: &api.LinuxContainerUpdate{Resources: &api.LinuxResources{}}},
		cpuUpdate(c, 512, false),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, u := range failed {
		ids = append(ids, u.GetContainerId())
	}
	if len(ids) != 2 || ids[0] != a || ids[1] != b {
		t.Errorf("failed = %v, want [%s %s] (the empty entries)", ids, a, b)
	}
	if got := h.cpuShares(t, c); got != 512 {
		t.Errorf("cpu shares of the container with a real update = %d, want 512", got)
	}
}

// TestStopRemoveIDsNamingNothing: the calls the CRI makes idempotent
// succeed for an id that names nothing, whatever its form (critest's
// idempotence specs send a UUID), and still refuse a prefix of a live
// pod or container (TestExactIDs).
func TestStopRemoveIDsNamingNothing(t *testing.T) {
	h := newHub(t)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	ctr := h.create(t, pod, "c")
	const uuid = "9a993b5e-8303-4295-aa37-01033f26ea1b"
	for _, id := range []string{uuid, "x", strings.Repeat("f", 64)} {
		if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("StopPodSandbox(%q): %v", id, err)
		}
		if _, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
			t.Errorf("RemovePodSandbox(%q): %v", id, err)
		}
		if _, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("StopContainer(%q): %v", id, err)
		}
		if _, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("RemoveContainer(%q): %v", id, err)
		}
	}
	if _, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr[:1]}); classify(err) != codes.InvalidArgument {
		t.Errorf("RemoveContainer of a live container's prefix: %v, want InvalidArgument", err)
	}
	if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: ""}); classify(err) != codes.InvalidArgument {
		t.Errorf("StopPodSandbox of an empty id: %v, want InvalidArgument", err)
	}
	st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr})
	if err != nil || st.Status.State != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Errorf("container after the calls: %v, %v; want it created still", st, err)
	}
}
