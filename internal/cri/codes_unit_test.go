package cri

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
	"github.com/crin-dev/crin/internal/serving"
)

// classify is the gRPC code crind's server answers err with.
func classify(err error) codes.Code { return serving.Code(err) }

// TestRPCRefusals checks, for every CRI RPC crind serves, the code of its
// refusals that TestRPCCodes does not: a missing id or config is
// InvalidArgument, an unknown id NotFound (or success where the CRI asks
// for it: stop and remove of what is gone, the status of an image that is
// not there), a request the object's state does not allow
// FailedPrecondition. Each row says what a kubelet would see.
func TestRPCRefusals(t *testing.T) {
	h := newHub(t)
	// With a streaming server, so Exec, Attach and PortForward look at
	// their requests (without one they are Unimplemented).
	h.opts.StreamAddress = "127.0.0.1:0"
	h.start(t, true)
	ctx := t.Context()
	pod := h.runPod(t, "web")
	created := h.create(t, pod, "created")
	running := h.create(t, pod, "running")
	h.startCtr(t, running)
	exited := h.create(t, pod, "exited")
	h.startCtr(t, exited)
	h.rt.exit(exited, 0)
	waitFor(t, "exited container recorded as exited", func() bool {
		st, err := h.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: exited})
		return err == nil && st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED
	})
	stoppedPod := h.runPod(t, "stopped")
	if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: stoppedPod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}

	noMeta := ctrConfig("x")
	noMeta.Metadata = nil
	noImage := ctrConfig("x")
	noImage.Image = nil
	podNoMeta := podConfig("nometa")
	podNoMeta.Metadata = nil

	for _, tc := range []struct {
		name string
		call func(context.Context) error
		want codes.Code
	}{
		// Pods.
		{"RunPodSandbox no config", func(ctx context.Context) error {
			_, err := h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{})
			return err
		}, codes.InvalidArgument},
		{"RunPodSandbox no metadata", func(ctx context.Context) error {
			_, err := h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podNoMeta})
			return err
		}, codes.InvalidArgument},
		{"StopPodSandbox empty", func(ctx context.Context) error {
			_, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{})
			return err
		}, codes.InvalidArgument},
		{"RemovePodSandbox empty", func(ctx context.Context) error {
			_, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{})
			return err
		}, codes.InvalidArgument},
		{"ListPodSandbox unknown id", func(ctx context.Context) error {
			return wantEmpty(h.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: "nope"}}))
		}, codes.OK},
		{"UpdatePodSandboxResources empty", func(ctx context.Context) error {
			_, err := h.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{})
			return err
		}, codes.InvalidArgument},
		{"PortForward empty", func(ctx context.Context) error {
			_, err := h.PortForward(ctx, &runtimeapi.PortForwardRequest{Port: []int32{80}})
			return err
		}, codes.InvalidArgument},
		{"PortForward bad port", func(ctx context.Context) error {
			_, err := h.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: pod, Port: []int32{70000}})
			return err
		}, codes.InvalidArgument},
		{"PortForward stopped pod", func(ctx context.Context) error {
			_, err := h.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: stoppedPod, Port: []int32{80}})
			return err
		}, codes.FailedPrecondition},
		{"ListPodSandboxStats unknown id", func(ctx context.Context) error {
			return wantEmpty(h.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: &runtimeapi.PodSandboxStatsFilter{Id: "nope"}}))
		}, codes.OK},
		{"CheckpointPod unknown", func(ctx context.Context) error {
			_, err := h.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: strings.Repeat("0e", 32), OutputPath: t.TempDir(), ContainerIds: []string{"c"}})
			return err
		}, codes.NotFound},
		{"CheckpointPod relative path", func(ctx context.Context) error {
			_, err := h.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: pod, OutputPath: "x.tar"})
			return err
		}, codes.InvalidArgument},
		{"RestorePod relative path", func(ctx context.Context) error {
			_, err := h.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: "x.tar"})
			return err
		}, codes.InvalidArgument},

		// Containers.
		{"CreateContainer no metadata", func(ctx context.Context) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: noMeta, SandboxConfig: podConfig("web")})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer no image", func(ctx context.Context) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: noImage, SandboxConfig: podConfig("web")})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer empty pod id", func(ctx context.Context) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{Config: ctrConfig("x"), SandboxConfig: podConfig("web")})
			return err
		}, codes.InvalidArgument},
		{"CreateContainer stopped pod", func(ctx context.Context) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: stoppedPod, Config: ctrConfig("late"), SandboxConfig: podConfig("stopped")})
			return err
		}, codes.FailedPrecondition},
		{"StartContainer empty", func(ctx context.Context) error {
			_, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{})
			return err
		}, codes.InvalidArgument},
		{"StartContainer exited", func(ctx context.Context) error {
			_, err := h.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: exited})
			return err
		}, codes.FailedPrecondition},
		{"StopContainer empty", func(ctx context.Context) error {
			_, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{})
			return err
		}, codes.InvalidArgument},
		{"StopContainer exited", func(ctx context.Context) error {
			_, err := h.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: exited})
			return err
		}, codes.OK},
		{"RemoveContainer empty", func(ctx context.Context) error {
			_, err := h.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{})
			return err
		}, codes.InvalidArgument},
		{"ListContainers unknown id", func(ctx context.Context) error {
			return wantEmpty(h.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: "nope"}}))
		}, codes.OK},
		{"ListContainerStats unknown id", func(ctx context.Context) error {
			return wantEmpty(h.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{Id: "nope"}}))
		}, codes.OK},
		{"UpdateContainerResources exited", func(ctx context.Context) error {
			_, err := h.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: exited, Linux: &runtimeapi.LinuxContainerResources{CpuShares: 256}})
			return err
		}, codes.FailedPrecondition},
		{"ReopenContainerLog empty", func(ctx context.Context) error {
			_, err := h.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{})
			return err
		}, codes.InvalidArgument},
		{"ReopenContainerLog exited", func(ctx context.Context) error {
			_, err := h.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: exited})
			return err
		}, codes.FailedPrecondition},
		{"ExecSync exited", func(ctx context.Context) error {
			_, err := h.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: exited, Cmd: []string{"true"}})
			return err
		}, codes.FailedPrecondition},
		{"Exec empty", func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{Cmd: []string{"sh"}, Stdout: true})
			return err
		}, codes.InvalidArgument},
		{"Exec no command", func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Stdout: true})
			return err
		}, codes.InvalidArgument},
		{"Exec no streams", func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Cmd: []string{"sh"}})
			return err
		}, codes.InvalidArgument},
		{"Exec tty and stderr", func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: running, Cmd: []string{"sh"}, Tty: true, Stdout: true, Stderr: true})
			return err
		}, codes.InvalidArgument},
		{"Exec not running", func(ctx context.Context) error {
			_, err := h.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: created, Cmd: []string{"sh"}, Stdout: true})
			return err
		}, codes.FailedPrecondition},
		{"Attach empty", func(ctx context.Context) error {
			_, err := h.Attach(ctx, &runtimeapi.AttachRequest{Stdout: true})
			return err
		}, codes.InvalidArgument},
		{"Attach no streams", func(ctx context.Context) error {
			_, err := h.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: running})
			return err
		}, codes.InvalidArgument},
		{"Attach tty and stderr", func(ctx context.Context) error {
			_, err := h.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: running, Tty: true, Stdout: true, Stderr: true})
			return err
		}, codes.InvalidArgument},
		{"Attach exited", func(ctx context.Context) error {
			_, err := h.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: exited, Stdout: true})
			return err
		}, codes.FailedPrecondition},
		{"CheckpointContainer empty", func(ctx context.Context) error {
			_, err := h.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{Location: "/tmp/x.tar"})
			return err
		}, codes.InvalidArgument},
		{"CheckpointContainer relative path", func(ctx context.Context) error {
			_, err := h.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: running, Location: "x.tar"})
			return err
		}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx)
			got := codes.OK
			if err != nil {
				got = classify(err)
			}
			if got != tc.want {
				t.Errorf("%v (%v), want %v", err, got, tc.want)
			}
		})
	}
}

// errUnexpected is a row's own failure, which no RPC returns: Unknown.
type errUnexpected string

func (e errUnexpected) Error() string { return "unexpected: " + string(e) }

// wantEmpty passes a List response through as an error: nil when it has
// no items.
func wantEmpty[R interface{ String() string }](resp R, err error) error {
	if err != nil {
		return err
	}
	if s := resp.String(); s != "" {
		return errUnexpected("items for an unknown id: " + s)
	}
	return nil
}

// refusingImages is the image service refusing every image with err, as
// the real one does an unknown, malformed or unreachable reference.
type refusingImages struct {
	*fakeImages
	err error
}

func (f refusingImages) Pull(context.Context, string, *image.Auth) (*image.Image, error) {
	return nil, f.err
}
func (f refusingImages) Get(string) (*image.Image, error)     { return nil, f.err }
func (f refusingImages) Remove(context.Context, string) error { return f.err }
func (f refusingImages) FsInfo() (image.FsUsage, error)       { return image.FsUsage{}, f.err }

// TestImageRPCRefusals checks how the image RPCs pass on the image
// service's refusals: an image that is not there is an empty answer to
// ImageStatus and ListImages and a success of RemoveImage (the CRI asks
// for both), a NotFound of PullImage; a bad reference is InvalidArgument
// everywhere; the service's other failures keep their class.
func TestImageRPCRefusals(t *testing.T) {
	errBadRef := fmt.Errorf("reference %q: %w", "Not A Ref", errdefs.ErrInvalidArgument)
	errNoImage := fmt.Errorf("image nope: %w", errdefs.ErrNotFound)
	errDown := fmt.Errorf("registry: %w", errdefs.ErrUnavailable)
	spec := &runtimeapi.ImageSpec{Image: "nope"}
	for _, tc := range []struct {
		name string
		err  error // what the image service says
		// call makes the request, in a hub with the running pod pod.
		call func(ctx context.Context, h *hub, pod string) error
		want codes.Code
	}{
		{"ImageStatus unknown", errNoImage, func(ctx context.Context, h *hub, pod string) error {
			resp, err := h.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
			if err == nil && resp.Image != nil {
				return errUnexpected("an image for an unknown reference")
			}
			return err
		}, codes.OK},
		{"ImageStatus bad reference", errBadRef, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: spec})
			return err
		}, codes.InvalidArgument},
		{"ListImages unknown", errNoImage, func(ctx context.Context, h *hub, pod string) error {
			return wantEmpty(h.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: spec}}))
		}, codes.OK},
		{"ListImages bad reference", errBadRef, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: spec}})
			return err
		}, codes.InvalidArgument},
		{"RemoveImage unknown", errNoImage, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec})
			return err
		}, codes.OK},
		{"RemoveImage bad reference", errBadRef, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: spec})
			return err
		}, codes.InvalidArgument},
		{"PullImage unknown", errNoImage, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
			return err
		}, codes.NotFound},
		{"PullImage bad reference", errBadRef, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
			return err
		}, codes.InvalidArgument},
		{"PullImage registry down", errDown, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.PullImage(ctx, &runtimeapi.PullImageRequest{Image: spec})
			return err
		}, codes.Unavailable},
		{"ImageFsInfo store unreadable", errDown, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		}, codes.Unavailable},
		{"CreateContainer unknown image", errNoImage, func(ctx context.Context, h *hub, pod string) error {
			_, err := h.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: ctrConfig("x"), SandboxConfig: podConfig("web")})
			return err
		}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			h.opts.Images = refusingImages{fakeImages: h.images, err: tc.err}
			h.start(t, false)
			pod := h.runPod(t, "web")
			err := tc.call(t.Context(), h, pod)
			got := codes.OK
			if err != nil {
				got = classify(err)
			}
			if got != tc.want {
				t.Errorf("%v (%v), want %v", err, got, tc.want)
			}
		})
	}
}

// brokenNetwork is pod networking whose every call fails with err, as CNI
// does with no config or a bad pod CIDR.
type brokenNetwork struct {
	fakeNetwork
	err error
}

func (n brokenNetwork) Status() error           { return n.err }
func (n brokenNetwork) SetPodCIDR(string) error { return n.err }

// TestRuntimeRPCRefusals checks the RPCs about the runtime as a whole
// when pod networking fails: Status answers with NetworkReady false and
// the reason (kubelet reads the condition, not an error),
// and UpdateRuntimeConfig passes on the network's refusal of the pod CIDR.
// (A pod whose network cannot be set up is not here: its own network
// namespace makes the hub mount its netns dir, which needs root.)
func TestRuntimeRPCRefusals(t *testing.T) {
	h := newHub(t)
	h.opts.Network = brokenNetwork{err: fmt.Errorf("no CNI config: %w", errdefs.ErrFailedPrecondition)}
	h.start(t, false)
	ctx := t.Context()

	st, err := h.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status with the network down: %v, want an answer", err)
	}
	var net *runtimeapi.RuntimeCondition
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady {
			net = c
		}
	}
	if net == nil || net.Status || net.Reason == "" || !strings.Contains(net.Message, "no CNI config") {
		t.Errorf("NetworkReady condition %v, want false with the reason and the network's message", net)
	}

	_, err = h.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.1.0.0/16"},
	}})
	if got := classify(err); got != codes.FailedPrecondition {
		t.Errorf("UpdateRuntimeConfig: %v (%v), want FailedPrecondition", err, got)
	}
}
