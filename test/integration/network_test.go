//go:build integration

package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/test/poll"
)

// TestPodNetwork checks that a pod gets an IP from CNI, shown by
// PodSandboxStatus, and that a server in the pod is reachable from the host.
func TestPodNetwork(t *testing.T) {
	runsOn(t, oci, shimv2, lxc, gvisor)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	st, err := d.rs.Status(ctxT(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Status.Conditions {
		// A handler's own condition (crun on a hybrid cgroup host) is
		// TestCrunReadiness's business.
		if !c.Status && (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) {
			t.Errorf("condition %s false: %s", c.Type, c.Message)
		}
	}
	podCfg := podConfig("web")
	pod := d.runPod(t, podCfg)
	ps, err := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP(ps.Status.GetNetwork().GetIp())
	if ip == nil || !d.net.Subnet.Contains(ip) {
		t.Fatalf("pod IP %q not in the test network %s", ps.Status.GetNetwork().GetIp(), d.net.Subnet)
	}
	id := d.runContainer(t, pod, podCfg, containerConfig("httpd", ref, "sh", "-c",
		"mkdir -p /tmp/www && echo hello-from-pod > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"))
	if got := d.execOut(t, id, "sh", "-c", "ip -4 addr show eth0 | grep -o 'inet [0-9.]*'"); got != "inet "+ip.String() {
		t.Errorf("eth0 in the pod: %q, want inet %s", got, ip)
	}
	// No default route off the machine from inside the pod.
	if routes := d.execOut(t, id, "ip", "route"); strings.Contains(routes, "default") {
		t.Errorf("pod has a default route:\n%s", routes)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	poll.Until(t, time.Minute, fmt.Sprintf("pod at %s reachable from the host", ip), func() (bool, string) {
		resp, err := client.Get("http://" + net.JoinHostPort(ip.String(), "8080") + "/index.html")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return true, ""
	})
	if strings.TrimSpace(body) != "hello-from-pod" {
		t.Errorf("GET from pod = %q", body)
	}
	// Stop tears the network down; a second stop is fine.
	for range 2 {
		if _, err := d.rs.StopPodSandbox(ctxT(t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod}); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), "8080"), time.Second); err == nil {
		c.Close()
		t.Errorf("pod still reachable after StopPodSandbox")
	}
}

// TestHostNetwork runs a host-network pod: no netns, the host's interfaces.
func TestHostNetwork(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("hostnet")
	podCfg.Hostname = ""
	podCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
	}
	pod := d.runPod(t, podCfg)
	id := d.runContainer(t, pod, podCfg, containerConfig("c", ref, "sleep", "1000"))
	hostNS, _ := os.Readlink("/proc/self/ns/net")
	pid := d.execOut(t, id, "readlink", "/proc/self/ns/net")
	if pid != hostNS {
		t.Errorf("container netns %q, want the host's %q", pid, hostNS)
	}
	hn, _ := os.Hostname()
	if got := d.execOut(t, id, "hostname"); got != hn {
		t.Errorf("hostname %q, want the host's %q", got, hn)
	}
	ps, _ := d.rs.PodSandboxStatus(ctxT(t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
	if ps.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		t.Errorf("status namespaces: %v", ps.GetStatus().GetLinux())
	}
}

// TestNetworkNotReady checks the network condition while no CNI config is
// loaded.
func TestNetworkNotReady(t *testing.T) {
	runsOn(t, oci)
	d := startDaemon(t, daemonOptions{noCNI: true})
	st, err := d.rs.Status(ctxT(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.NetworkReady && (c.Status || c.Message == "") {
			t.Errorf("NetworkReady = %v (%q) with no CNI config", c.Status, c.Message)
		}
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			t.Errorf("RuntimeReady false: %s", c.Message)
		}
	}
	rc, err := d.rs.RuntimeConfig(ctxT(t), &runtimeapi.RuntimeConfigRequest{})
	if err != nil || rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig: %v %v", rc, err)
	}
	if _, err := d.rs.UpdateRuntimeConfig(ctxT(t), &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.99.0.0/24"}},
	}); err != nil {
		t.Errorf("UpdateRuntimeConfig: %v", err)
	}
	if _, err := d.rs.UpdateRuntimeConfig(ctxT(t), &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.99.0.0/99"}},
	}); code(err) != "InvalidArgument" {
		t.Errorf("UpdateRuntimeConfig with a bad CIDR: %v, want InvalidArgument", err)
	}
}
