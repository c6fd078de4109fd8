//go:build integration

package integration

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image/imagetest"
)

// TestSupplementalGroupsPolicy checks what `id -G` says in a container
// under each supplemental groups policy, and that ContainerStatus.user
// says the same: Merge adds the groups the image's /etc/group gives the
// user, Strict only the requested ones.
func TestSupplementalGroupsPolicy(t *testing.T) {
	runsOn(t, oci, lxc)
	d := startDaemon(t, daemonOptions{})
	host := imagetest.StartRegistry(t)
	img, err := mutate.AppendLayers(imagetest.Busybox(t), imagetest.Layer(t,
		imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", 0o644),
		imagetest.File("etc/group", "root:x:0:\napp:x:1000:\nextra:x:5000:app\nother:x:6000:root\n", 0o644)))
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/library/groups:latest"
	imagetest.Push(t, host, "library/groups:latest", img)
	d.pull(t, ref)
	podCfg := podConfig("groups")
	pod := d.runPod(t, podCfg)

	for _, tc := range []struct {
		name   string
		policy runtimeapi.SupplementalGroupsPolicy
		want   string
	}{
		{"merge", runtimeapi.SupplementalGroupsPolicy_Merge, "3000 4000 5000"},
		{"strict", runtimeapi.SupplementalGroupsPolicy_Strict, "3000 4000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := containerConfig(tc.name, ref, "sleep", "600")
			cfg.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser:                &runtimeapi.Int64Value{Value: 1000},
				RunAsGroup:               &runtimeapi.Int64Value{Value: 3000},
				SupplementalGroups:       []int64{4000},
				SupplementalGroupsPolicy: tc.policy,
			}
			id := d.runContainer(t, pod, podCfg, cfg)
			if got := d.execOut(t, id, "id", "-G"); got != tc.want {
				t.Errorf("id -G under %v: %q, want %q", tc.policy, got, tc.want)
			}
			u := d.status(t, id).GetUser().GetLinux()
			groups := slices.Clone(u.GetSupplementalGroups())
			slices.Sort(groups)
			var names []string
			for _, g := range groups {
				names = append(names, strconv.FormatInt(g, 10))
			}
			if u.GetUid() != 1000 || u.GetGid() != 3000 || strings.Join(names, " ") != tc.want {
				t.Errorf("ContainerStatus.user %v, want uid 1000 gid 3000 groups %s", u, tc.want)
			}
		})
	}
}
