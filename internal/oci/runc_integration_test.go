//go:build integration

package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
`

// TestRuncAcceptsSpecs runs a pod's infra container and a busybox
// container in it with runc, from the specs this package writes.
func TestRuncAcceptsSpecs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel) // registered first, so it runs after the other cleanups

	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")

	// A static pause binary.
	src := filepath.Join(dir, "pause.go")
	writeFile(t, src, pauseSource)
	pause := filepath.Join(dir, "pause-bin")
	build := exec.CommandContext(ctx, "go", "build", "-o", pause, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, out)
	}

	var f features.Features
	out, err := exec.CommandContext(ctx, runc, "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatal(err)
	}

	pod := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"},
		Hostname: "crin-pod",
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "80", "kernel.shmmni": "1000"},
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
				Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			},
		},
	}
	oomMin := ownOOMScoreAdj(t)
	t.Cleanup(func() {
		// runc removes the containers' cgroups, not their parent.
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/crin-oci-test")
		for _, d := range dirs {
			os.Remove(d)
		}
		os.Remove("/sys/fs/cgroup/crin-oci-test")
	})
	pauseRoot := filepath.Join(dir, "pauseroot")
	if err := PreparePauseRoot(pauseRoot); err != nil {
		t.Fatal(err)
	}
	sbID := "crin-oci-test-sb-" + strconv.Itoa(os.Getpid())
	sb, err := SandboxSpec(SandboxOptions{
		ID: sbID, Config: pod, Rootfs: pauseRoot, PauseBinary: pause,
		CgroupsPath: "/crin-oci-test/" + sbID, OOMScoreAdjMin: oomMin,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Fit(sb, &f); err != nil {
		t.Fatal(err)
	}
	sbBundle := writeBundle(t, dir, "sb", sb)
	runcCmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, runc, append([]string{"--root", state}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, &runcError{err: err, stderr: stderr.String()}
		}
		return out, nil
	}
	// The detached infra process inherits runc's stdio: give it files, not
	// pipes this test would wait on.
	logPath := filepath.Join(dir, "sandbox.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	run := exec.CommandContext(ctx, runc, "--root", state, "run", "--detach", "--bundle", sbBundle, sbID)
	run.Stdout, run.Stderr = logFile, logFile
	if err := run.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("runc run sandbox: %v\n%s", err, b)
	}
	t.Cleanup(func() { runcCmd("delete", "--force", sbID) })
	st, err := runcCmd("state", sbID)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.State
	if err := json.Unmarshal(st, &s); err != nil {
		t.Fatal(err)
	}
	if s.Status != specs.StateRunning || s.Pid <= 0 {
		t.Fatalf("sandbox state = %+v, want running", s)
	}

	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("no /bin/busybox")
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(rootfs, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(rootfs, "etc/passwd"), "root:x:0:0::/:/bin/sh\napp:x:1000:1000::/:/bin/sh\n")
	writeFile(t, filepath.Join(rootfs, "etc/group"), "root:x:0:\napp:x:1000:\nextra:x:1500:app\n")
	hostsFile := filepath.Join(dir, "hosts")
	writeFile(t, hostsFile, "127.0.0.1 localhost crin-test-hosts\n")

	script := strings.Join([]string{
		"echo host=$(/bin/busybox hostname)",
		"echo id=$(/bin/busybox id -u):$(/bin/busybox id -g):$(/bin/busybox id -G)",
		"echo cwd=$(/bin/busybox pwd)",
		"echo env=$FOO",
		"/bin/busybox grep -q crin-test-hosts /etc/hosts && echo hosts=ok",
		"/bin/busybox unshare -U /bin/busybox true 2>/dev/null && echo userns=allowed || echo userns=denied",
		"echo sysctl=$(/bin/busybox cat /proc/sys/net/ipv4/ip_unprivileged_port_start)",
		"echo pid1=$(/bin/busybox cat /proc/1/cmdline)",
	}, "; ")
	// runContainer runs one container in the pod with the given runtime
	// binary and returns its output.
	runContainer := func(t *testing.T, bin, id string, f *features.Features, privileged bool, script string) []byte {
		t.Helper()
		podCfg := pod
		if privileged {
			podCfg = proto.Clone(pod).(*runtimeapi.PodSandboxConfig)
			podCfg.Linux.SecurityContext.Privileged = true
		}
		c, err := ContainerSpec(ContainerOptions{
			ID:      id,
			Sandbox: podCfg,
			Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
				Command:  []string{"/bin/sh", "-c", script},
				Envs:     []*runtimeapi.KeyValue{{Key: "FOO", Value: []byte("bar")}},
				Linux: &runtimeapi.LinuxContainerConfig{
					Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 64 << 20, CpuShares: 512},
					SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
						NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_POD},
						Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
						ReadonlyRootfs:   true,
						Privileged:       privileged,
					},
				},
			},
			Image:          ImageConfig{User: "app", WorkingDir: "/tmp"},
			Rootfs:         rootfs,
			CgroupsPath:    "/crin-oci-test/" + id,
			NetNSPath:      fmt.Sprintf("/proc/%d/ns/net", s.Pid),
			IPCNSPath:      fmt.Sprintf("/proc/%d/ns/ipc", s.Pid),
			UTSNSPath:      fmt.Sprintf("/proc/%d/ns/uts", s.Pid),
			PIDNSPath:      fmt.Sprintf("/proc/%d/ns/pid", s.Pid),
			SandboxID:      sbID,
			HostsPath:      hostsFile,
			OOMScoreAdjMin: oomMin,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := Fit(c, f); err != nil {
			t.Fatal(err)
		}
		bundle := writeBundle(t, dir, id, c)
		state := filepath.Join(dir, "state-"+filepath.Base(bin))
		cmd := exec.CommandContext(ctx, bin, "--root", state, "run", "--bundle", bundle, id)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		exec.CommandContext(ctx, bin, "--root", state, "delete", "--force", id).Run()
		t.Logf("%s output:\n%s", filepath.Base(bin), got)
		if err != nil {
			t.Fatalf("%s run container: %v: %s\noutput:\n%s", bin, err, stderr.String(), got)
		}
		return got
	}
	expect := func(t *testing.T, got []byte, wants ...string) {
		t.Helper()
		for _, want := range wants {
			if !bytes.Contains(got, []byte(want+"\n")) {
				t.Errorf("container output lacks %q", want)
			}
		}
	}
	common := []string{"host=crin-pod", "id=1000:1000:1000 1500", "cwd=/tmp", "env=bar", "hosts=ok", "sysctl=80", "pid1=/pause"}

	t.Run("runc", func(t *testing.T) {
		got := runContainer(t, runc, "crin-oci-test-c-"+strconv.Itoa(os.Getpid()), &f, false, script)
		expect(t, got, append(common, "userns=denied")...)
	})
	t.Run("crun", func(t *testing.T) {
		crun, err := exec.LookPath("crun")
		if err != nil {
			t.Skip("crun not on PATH")
		}
		if cgroups.Mode() == cgroups.Hybrid {
			t.Skip("crun does not support hybrid cgroup hosts")
		}
		// crun 1.8 has no features command: crin assumes OCI 1.0.0.
		got := runContainer(t, crun, "crin-oci-test-crun-"+strconv.Itoa(os.Getpid()), &features.Features{OCIVersionMin: "1.0.0", OCIVersionMax: "1.0.0"}, false, script)
		expect(t, got, append(common, "userns=denied")...)
	})
	t.Run("runc privileged", func(t *testing.T) {
		got := runContainer(t, runc, "crin-oci-test-priv-"+strconv.Itoa(os.Getpid()), &f, true,
			script+"; [ -c /dev/null ] && [ -c /dev/kmsg ] && echo devices=host")
		// Privileged containers run without a seccomp filter.
		expect(t, got, append(common, "devices=host", "userns=allowed")...)
	})
}

type runcError struct {
	err    error
	stderr string
}

func (e *runcError) Error() string { return e.err.Error() + ": " + e.stderr }

func writeBundle(t *testing.T, dir, name string, s *specs.Spec) string {
	t.Helper()
	b := filepath.Join(dir, name)
	if err := os.MkdirAll(b, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func ownOOMScoreAdj(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
