//go:build integration

package integration

import (
	"errors"
	"io"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeletSurface checks what kubelet reads besides the lifecycle: the
// default handler under "", the effective user of a container, the image
// id in the container list, and the streaming list RPCs.
func TestKubeletSurface(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	st, err := d.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range st.RuntimeHandlers {
		names = append(names, h.Name)
	}
	if !slices.Contains(names, "") || !slices.Contains(names, "runc") {
		t.Errorf("runtime handlers %q, want the default under \"\" and runc", names)
	}

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("surface")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("user", ref, "sleep", "600")
	cfg.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
		RunAsUser:          &runtimeapi.Int64Value{Value: 1000},
		RunAsGroup:         &runtimeapi.Int64Value{Value: 2000},
		SupplementalGroups: []int64{3000},
	}}
	id := d.runContainer(t, pod, podCfg, cfg)
	u := d.status(t, id).GetUser().GetLinux()
	if u.GetUid() != 1000 || u.GetGid() != 2000 || !slices.Contains(u.GetSupplementalGroups(), 3000) || !slices.Contains(u.GetSupplementalGroups(), 2000) {
		t.Errorf("ContainerStatus.user = %v, want uid 1000 gid 2000 groups [2000 3000]", u)
	}
	if got := d.execOut(t, id, "id", "-G"); got != "2000 3000" {
		t.Errorf("id -G in the container: %q, want what ContainerStatus.user says", got)
	}

	list, err := d.rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("ListContainers: %v %v", list, err)
	}
	if c := list.Containers[0]; c.Image.GetImage() != c.ImageId || c.ImageId == "" {
		t.Errorf("ListContainers image %q, image id %q: kubelet wants the id", c.Image.GetImage(), c.ImageId)
	}

	cs, err := d.rs.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []string
	for {
		m, err := cs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamContainers: %v", err)
		}
		for _, c := range m.Containers {
			streamed = append(streamed, c.Id)
		}
	}
	if !slices.Equal(streamed, []string{id}) {
		t.Errorf("StreamContainers sent %q, want [%s]", streamed, id)
	}
	ps, err := d.rs.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := ps.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamPodSandboxes: %v", err)
		}
		n += len(m.PodSandboxes)
	}
	if n != 1 {
		t.Errorf("StreamPodSandboxes sent %d pods, want 1", n)
	}
	is, err := d.is.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	imgs := 0
	for {
		m, err := is.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamImages: %v", err)
		}
		imgs += len(m.Images)
	}
	if imgs == 0 {
		t.Error("StreamImages sent no image")
	}
}
