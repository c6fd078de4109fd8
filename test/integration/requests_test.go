//go:build integration

package integration

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestNameConflicts checks that pod and container names are reserved and
// the conflict names the holder.
func TestNameConflicts(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("dup")
	pod := d.runPod(t, podCfg)
	_, err := d.rs.RunPodSandbox(ctxT(t), &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if code(err) != "AlreadyExists" || !strings.Contains(err.Error(), pod) {
		t.Errorf("second pod with the same metadata: %v, want AlreadyExists naming %s", err, pod)
	}
	cfg := containerConfig("c", ref, "sleep", "1000")
	id := d.createContainer(t, pod, podCfg, cfg)
	_, err = d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if code(err) != "AlreadyExists" || !strings.Contains(err.Error(), id) {
		t.Errorf("second container with the same metadata: %v, want AlreadyExists naming %s", err, id)
	}
	// After removal the name is free again.
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	d.createContainer(t, pod, podCfg, cfg)
}

// TestIdempotentStopRemove checks that stopping and removing unknown or
// already removed pods and containers succeeds, as the CRI contract says.
func TestIdempotentStopRemove(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("idem")
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("c", ref, "sleep", "1000"))
	for range 2 {
		if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
			t.Errorf("StopContainer: %v", err)
		}
	}
	if st := d.status(t, id); st.ExitCode != 137 {
		t.Errorf("killed with timeout 0: exit %d, want 137", st.ExitCode)
	}
	for range 2 {
		if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Errorf("RemoveContainer: %v", err)
		}
		if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
	}
	for range 2 {
		if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	}
	unknown := strings.Repeat("ab", 32)
	if _, err := d.rs.StopContainer(ctxT(t), &runtimeapi.StopContainerRequest{ContainerId: unknown}); err != nil {
		t.Errorf("StopContainer unknown: %v", err)
	}
	if _, err := d.rs.RemoveContainer(ctxT(t), &runtimeapi.RemoveContainerRequest{ContainerId: unknown}); err != nil {
		t.Errorf("RemoveContainer unknown: %v", err)
	}
	if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("StopPodSandbox unknown: %v", err)
	}
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("RemovePodSandbox unknown: %v", err)
	}
	// A pod removed with a running container takes the container with it.
	podCfg2 := podConfig("idem2")
	pod2 := d.runPod(t, podCfg2)
	c2 := d.runContainer(t, pod2, podCfg2, containerConfig("c", ref, "sleep", "1000"))
	if _, err := d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod2}); err != nil {
		t.Fatalf("RemovePodSandbox with a running container: %v", err)
	}
	if _, err := d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: c2}); code(err) != "NotFound" {
		t.Errorf("container of a removed pod: %v, want NotFound", err)
	}
}

// TestBadRequests checks codes and messages of invalid requests, and that
// they leave nothing behind.
func TestBadRequests(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	good := podConfig("good")
	pod := d.runPod(t, good)

	noMeta := podConfig("x")
	noMeta.Metadata = nil
	noName := podConfig("x")
	noName.Metadata.Name = ""
	badSysctl := podConfig("sysctl")
	badSysctl.Linux.Sysctls = map[string]string{"kernel.panic": "1"}
	spoof := podConfig("spoof")
	spoof.Annotations["io.crin.sandbox-id"] = "someone-else"
	ports := func(pm *runtimeapi.PortMapping) *runtimeapi.PodSandboxConfig {
		c := podConfig("ports")
		c.PortMappings = []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080}, pm}
		return c
	}
	for _, tc := range []struct {
		name    string
		req     *runtimeapi.RunPodSandboxRequest
		code    string
		mention string
	}{
		{"missing metadata", &runtimeapi.RunPodSandboxRequest{Config: noMeta}, "InvalidArgument", "metadata"},
		{"missing name", &runtimeapi.RunPodSandboxRequest{Config: noName}, "InvalidArgument", "metadata.name"},
		{"invalid sysctl", &runtimeapi.RunPodSandboxRequest{Config: badSysctl}, "InvalidArgument", "kernel.panic"},
		{"unknown runtime handler", &runtimeapi.RunPodSandboxRequest{Config: podConfig("h"), RuntimeHandler: "nope"}, "InvalidArgument", "runc"},
		{"crin's own annotation", &runtimeapi.RunPodSandboxRequest{Config: spoof}, "InvalidArgument", `config.annotations["io.crin.sandbox-id"]`},
		{"negative host port", &runtimeapi.RunPodSandboxRequest{Config: ports(&runtimeapi.PortMapping{ContainerPort: 80, HostPort: -1})}, "InvalidArgument", "config.port_mappings[1].host_port -1"},
		{"host port too big", &runtimeapi.RunPodSandboxRequest{Config: ports(&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 65536})}, "InvalidArgument", "config.port_mappings[1].host_port 65536"},
		{"container port 0", &runtimeapi.RunPodSandboxRequest{Config: ports(&runtimeapi.PortMapping{HostPort: 8081})}, "InvalidArgument", "config.port_mappings[1].container_port 0"},
		{"container port too big", &runtimeapi.RunPodSandboxRequest{Config: ports(&runtimeapi.PortMapping{ContainerPort: 65536, HostPort: 8081})}, "InvalidArgument", "config.port_mappings[1].container_port 65536"},
		{"bad protocol", &runtimeapi.RunPodSandboxRequest{Config: ports(&runtimeapi.PortMapping{ContainerPort: 80, HostPort: 8081, Protocol: 9})}, "InvalidArgument", "config.port_mappings[1].protocol 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.rs.RunPodSandbox(ctxT(t), tc.req)
			if code(err) != tc.code || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("RunPodSandbox: %v, want %s mentioning %q", err, tc.code, tc.mention)
			}
		})
	}
	ctr := func(mut func(*runtimeapi.ContainerConfig)) *runtimeapi.ContainerConfig {
		c := containerConfig("c", ref, "true")
		mut(c)
		return c
	}
	for _, tc := range []struct {
		name    string
		pod     string
		cfg     *runtimeapi.ContainerConfig
		code    string
		mention string
	}{
		{"unknown pod", strings.Repeat("cd", 32), ctr(func(*runtimeapi.ContainerConfig) {}), "NotFound", "cdcd"},
		{"missing metadata", pod, ctr(func(c *runtimeapi.ContainerConfig) { c.Metadata = nil }), "InvalidArgument", "metadata"},
		{"missing image", pod, ctr(func(c *runtimeapi.ContainerConfig) { c.Image = nil }), "InvalidArgument", "image"},
		{"image not pulled", pod, ctr(func(c *runtimeapi.ContainerConfig) { c.Image.Image = "127.0.0.1:1/none:latest" }), "NotFound", "none"},
		{"bad mount", pod, ctr(func(c *runtimeapi.ContainerConfig) {
			c.Mounts = []*runtimeapi.Mount{{HostPath: "/tmp", ContainerPath: "relative"}}
		}), "InvalidArgument", "relative"},
		{"escaping log path", pod, ctr(func(c *runtimeapi.ContainerConfig) { c.LogPath = "../../etc/x" }), "InvalidArgument", "log_path"},
		{"log file name of 300 bytes", pod, ctr(func(c *runtimeapi.ContainerConfig) { c.LogPath = strings.Repeat("l", 300) }), "InvalidArgument", "config.log_path"},
		{"crin's own annotation", pod, ctr(func(c *runtimeapi.ContainerConfig) {
			c.Annotations = map[string]string{"io.crin.container-type": "sandbox"}
		}), "InvalidArgument", `config.annotations["io.crin.container-type"]`},
		{"one-character pod id", pod[:1], ctr(func(*runtimeapi.ContainerConfig) {}), "InvalidArgument", "pod_sandbox_id"},
	} {
		t.Run("container "+tc.name, func(t *testing.T) {
			_, err := d.rs.CreateContainer(ctxT(t), &runtimeapi.CreateContainerRequest{PodSandboxId: tc.pod, Config: tc.cfg, SandboxConfig: good})
			if code(err) != tc.code || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("CreateContainer: %v, want %s mentioning %q", err, tc.code, tc.mention)
			}
		})
	}
	for _, tc := range []struct {
		name    string
		err     error
		code    string
		mention string
	}{
		{"status of unknown container", errOf(d.rs.ContainerStatus(ctxT(t), &runtimeapi.ContainerStatusRequest{ContainerId: "feedbeef"})), "NotFound", ""},
		{"status of unknown pod", errOf(d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "feedbeef"})), "NotFound", ""},
		{"start unknown", errOf(d.rs.StartContainer(ctxT(t), &runtimeapi.StartContainerRequest{ContainerId: strings.Repeat("fe", 32)})), "NotFound", ""},
		{"exec unknown", errOf(d.rs.ExecSync(ctxT(t), &runtimeapi.ExecSyncRequest{ContainerId: strings.Repeat("fe", 32), Cmd: []string{"true"}})), "NotFound", ""},
		{"bad image ref", errOf(d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "Bad Ref!!"}})), "InvalidArgument", ""},
		{"empty image ref", errOf(d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{}})), "InvalidArgument", ""},
		{"registry port out of range", errOf(d.is.PullImage(ctxT(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "127.0.0.1:99999/x:1"}})), "InvalidArgument", "127.0.0.1:99999/x:1"},
		{"stop pod by one-character prefix", errOf(d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod[:1]})), "InvalidArgument", "pod_sandbox_id"},
		{"remove pod by one-character prefix", errOf(d.rs.RemovePodSandbox(ctxT(t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod[:1]})), "InvalidArgument", "pod_sandbox_id"},
		{"list with 65 selector labels", errOf(d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: labels(65)}})), "InvalidArgument", "filter.label_selector"},
	} {
		if code(tc.err) != tc.code || !strings.Contains(errText(tc.err), tc.mention) {
			t.Errorf("%s: %v, want %s mentioning %q", tc.name, tc.err, tc.code, tc.mention)
		}
	}
	// None of it left a pod or container behind.
	pods, _ := d.rs.ListPodSandbox(ctxT(t), &runtimeapi.ListPodSandboxRequest{})
	ctrs, _ := d.rs.ListContainers(ctxT(t), &runtimeapi.ListContainersRequest{})
	if len(pods.Items) != 1 || len(ctrs.Containers) != 0 {
		t.Errorf("after bad requests: %d pods, %d containers; want 1, 0", len(pods.Items), len(ctrs.Containers))
	}
}

func errOf[T any](_ T, err error) error { return err }

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// labels is a label selector of n entries.
func labels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[strings.Repeat("k", i+1)] = "v"
	}
	return m
}
