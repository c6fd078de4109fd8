package oci

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// deniedNames lists the syscalls a profile refuses without conditions.
func deniedNames(s *specs.LinuxSeccomp) []string {
	var out []string
	for _, sc := range s.Syscalls {
		if sc.Action != specs.ActAllow && len(sc.Args) == 0 {
			out = append(out, sc.Names...)
		}
	}
	return out
}

func TestDefaultSeccomp(t *testing.T) {
	none := DefaultSeccomp(nil)
	if none.DefaultAction != specs.ActAllow {
		t.Errorf("defaultAction = %s", none.DefaultAction)
	}
	if err := checkSeccomp(none); err != nil {
		t.Fatalf("default profile is invalid: %v", err)
	}
	denied := deniedNames(none)
	for _, n := range []string{"kexec_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "mount",
		"umount2", "pivot_root", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "open_by_handle_at",
		"userfaultfd", "syslog", "acct", "settimeofday", "clock_settime", "quotactl", "lookup_dcookie", "move_pages",
		"nfsservctl", "vm86", "kcmp", "setns", "clone3"} {
		if !slices.Contains(denied, n) {
			t.Errorf("%s allowed without capabilities", n)
		}
	}
	for _, n := range []string{"ptrace", "read", "clone", "unshare"} {
		if slices.Contains(denied, n) {
			t.Errorf("%s denied unconditionally", n)
		}
	}
	var userns int
	for _, sc := range none.Syscalls {
		if len(sc.Args) == 1 && sc.Args[0].Op == specs.OpMaskedEqual && sc.Args[0].Value == cloneNewUser {
			userns++
		}
	}
	if userns != 2 {
		t.Errorf("%d CLONE_NEWUSER rules, want clone and unshare", userns)
	}

	admin := DefaultSeccomp(&specs.LinuxCapabilities{Effective: []string{"CAP_SYS_ADMIN", "CAP_SYS_TIME"}})
	denied = deniedNames(admin)
	for _, n := range []string{"mount", "setns", "clone3", "bpf", "perf_event_open", "clock_settime"} {
		if slices.Contains(denied, n) {
			t.Errorf("%s denied although the capability is held", n)
		}
	}
	for _, n := range []string{"kexec_load", "init_module", "keyctl"} {
		if !slices.Contains(denied, n) {
			t.Errorf("%s allowed with CAP_SYS_ADMIN", n)
		}
	}
}

func TestSeccompProfiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good.json"), `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],
		"syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},
		{"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]}]}`)
	writeFile(t, filepath.Join(dir, "badaction.json"), `{"defaultAction":"SCMP_ACT_MAYBE"}`)
	writeFile(t, filepath.Join(dir, "badop.json"), `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_ABOUT"}]}]}`)
	writeFile(t, filepath.Join(dir, "badarch.json"), `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_Z80"]}`)
	writeFile(t, filepath.Join(dir, "docker.json"), `{"defaultAction":"SCMP_ACT_ALLOW","archMap":[]}`)
	writeFile(t, filepath.Join(dir, "notjson.json"), `defaultAction: allow`)
	good := filepath.Join(dir, "good.json")

	tests := []struct {
		name    string
		profile *runtimeapi.SecurityProfile
		legacy  string
		want    string // "default", "none", "good"
		wantErr string
	}{
		{name: "unset", want: "none"},
		{name: "runtime default", profile: &runtimeapi.SecurityProfile{}, want: "default"},
		{name: "unconfined", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, want: "none"},
		{name: "localhost absolute", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: good}, want: "good"},
		{name: "localhost relative", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "good.json"}, want: "good"},
		{name: "localhost escaping root", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "../good.json"}, wantErr: "leaves the seccomp profile root"},
		{name: "localhost missing", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/nonexistent/p.json"}, wantErr: "does not exist"},
		{name: "localhost empty", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost}, wantErr: "empty"},
		{name: "bad action", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "badaction.json"}, wantErr: "SCMP_ACT_MAYBE"},
		{name: "bad operator", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "badop.json"}, wantErr: "SCMP_CMP_ABOUT"},
		{name: "bad arch", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "badarch.json"}, wantErr: "SCMP_ARCH_Z80"},
		{name: "docker format", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "docker.json"}, wantErr: "archMap"},
		{name: "not json", profile: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "notjson.json"}, wantErr: "not an OCI seccomp profile"},
		{name: "legacy runtime/default", legacy: "runtime/default", want: "default"},
		{name: "legacy unconfined", legacy: "unconfined", want: "none"},
		{name: "legacy localhost", legacy: "localhost/" + good, want: "good"},
		{name: "legacy unknown", legacy: "whatever", wantErr: `seccomp_profile_path "whatever"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Seccomp: tc.profile, SeccompProfilePath: tc.legacy, //nolint:staticcheck // the deprecated field older kubelets send
			}}}
			o := containerOpts(t, podConfig(nil), cfg)
			o.SeccompProfileRoot = dir
			s, err := ContainerSpec(o)
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := s.Linux.Seccomp
			switch tc.want {
			case "none":
				if got != nil {
					t.Errorf("seccomp = %+v, want none", got)
				}
			case "default":
				if got == nil || got.DefaultAction != specs.ActAllow || !slices.Contains(deniedNames(got), "kexec_load") {
					t.Errorf("seccomp = %+v, want crin's default", got)
				}
			case "good":
				if got == nil || got.DefaultAction != specs.ActErrno || len(got.Syscalls) != 2 {
					t.Errorf("seccomp = %+v, want good.json", got)
				}
			}
		})
	}
}

func TestSeccompRelativeWithoutRoot(t *testing.T) {
	_, err := loadSeccompProfile("f", "p.json", "")
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("err = %v", err)
	}
}

func TestSandboxSeccomp(t *testing.T) {
	cfg := podConfig(nil)
	cfg.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	s, err := SandboxSpec(sandboxOpts(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if s.Linux.Seccomp == nil || !slices.Contains(deniedNames(s.Linux.Seccomp), "mount") {
		t.Errorf("sandbox seccomp = %+v, want the default without capabilities", s.Linux.Seccomp)
	}
}

func TestAppArmor(t *testing.T) {
	local := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "my-profile"}
	tests := []struct {
		name    string
		profile *runtimeapi.SecurityProfile
		legacy  string
		host    bool
		want    string
		wantErr string
	}{
		{name: "runtime default without apparmor", profile: &runtimeapi.SecurityProfile{}},
		{name: "unconfined"},
		{name: "localhost without apparmor", profile: local, wantErr: "AppArmor is not enabled"},
		{name: "legacy localhost without apparmor", legacy: "localhost/p", wantErr: "AppArmor is not enabled"},
		{name: "localhost with apparmor", profile: local, host: true, want: "my-profile"},
		{name: "legacy localhost with apparmor", legacy: "localhost/p", host: true, want: "p"},
		{name: "legacy unknown", legacy: "weird", host: true, wantErr: `"weird"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Apparmor: tc.profile, ApparmorProfile: tc.legacy, //nolint:staticcheck // the deprecated field older kubelets send
			}}}
			o := containerOpts(t, podConfig(nil), cfg)
			o.Host = &Host{AppArmor: tc.host}
			s, err := ContainerSpec(o)
			if tc.wantErr != "" {
				wantInvalid(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Errorf("apparmorProfile = %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
		})
	}
}
