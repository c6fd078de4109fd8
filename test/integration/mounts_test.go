//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestMountFeatures checks the mount features Status advertises against
// what a container sees: a recursive read-only mount makes a mount beneath
// the volume read-only too (a plain read-only one does not), bind mount
// options reach the mount, and the combinations the CRI forbids are
// refused naming the field.
func TestMountFeatures(t *testing.T) {
	runsOn(t, oci, shimv2, lxc)
	d := startDaemon(t, daemonOptions{})
	ctx := ctxT(t)
	st, err := d.rs.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetFeatures().GetSupplementalGroupsPolicy() || !st.GetFeatures().GetMountOptions() {
		t.Errorf("Status features %v, want supplemental_groups_policy and mount_options", st.GetFeatures())
	}
	for _, h := range st.RuntimeHandlers {
		if (h.Name == "" || h.Name == "runc") && !h.GetFeatures().GetRecursiveReadOnlyMounts() {
			t.Errorf("handler %q does not advertise recursive read-only mounts; runc lists rro", h.Name)
		}
	}

	// A host dir with a tmpfs mounted beneath it: only rro reaches the
	// tmpfs.
	vol := t.TempDir()
	sub := filepath.Join(vol, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })

	ref, _ := busybox(t)
	d.pull(t, ref)
	podCfg := podConfig("mounts")
	pod := d.runPod(t, podCfg)
	cfg := containerConfig("vols", ref, "sleep", "600")
	private := runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	cfg.Mounts = []*runtimeapi.Mount{
		{ContainerPath: "/ro", HostPath: vol, Readonly: true, Propagation: private},
		{ContainerPath: "/rro", HostPath: vol, Readonly: true, RecursiveReadOnly: true, Propagation: private},
		{ContainerPath: "/noexec", HostPath: vol, MountOptions: []string{"noexec", "nodev"}},
	}
	id := d.runContainer(t, pod, podCfg, cfg)

	try := func(cmd string) error {
		r, err := d.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", cmd}, Timeout: 30})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		if r.ExitCode != 0 {
			return &execError{cmd: cmd, code: r.ExitCode, stderr: string(r.Stderr)}
		}
		return nil
	}
	if err := try("touch /ro/x"); err == nil {
		t.Errorf("a read-only mount is writable")
	}
	if err := try("touch /ro/sub/plain"); err != nil {
		t.Errorf("under a plain read-only mount the submount should stay writable: %v", err)
	}
	if err := try("touch /rro/sub/rec"); err == nil {
		t.Errorf("under a recursive read-only mount the submount is writable")
	}
	mounts := d.execOut(t, id, "cat", "/proc/self/mounts")
	var noexec string
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == "/noexec" {
			noexec = f[3]
		}
	}
	if !strings.Contains(noexec, "noexec") || !strings.Contains(noexec, "nodev") {
		t.Errorf("/noexec mounted with %q, want noexec and nodev", noexec)
	}

	for _, bad := range []struct {
		m    *runtimeapi.Mount
		want string
	}{
		{&runtimeapi.Mount{ContainerPath: "/x", HostPath: vol, RecursiveReadOnly: true, Propagation: private}, "mounts[0].recursive_read_only"},
		{&runtimeapi.Mount{ContainerPath: "/x", HostPath: vol, Readonly: true, RecursiveReadOnly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}, "mounts[0].recursive_read_only"},
		{&runtimeapi.Mount{ContainerPath: "/x", HostPath: vol, MountOptions: []string{"suid"}}, "mounts[0].mount_options[0]"},
	} {
		c := containerConfig("bad", ref, "true")
		c.Mounts = []*runtimeapi.Mount{bad.m}
		_, err := d.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: c, SandboxConfig: podCfg})
		if code(err) != "InvalidArgument" || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("CreateContainer with %v: %v, want InvalidArgument naming %s", bad.m, err, bad.want)
		}
	}
}

type execError struct {
	cmd    string
	code   int32
	stderr string
}

func (e *execError) Error() string { return fmt.Sprintf("%s: exit %d: %s", e.cmd, e.code, e.stderr) }
