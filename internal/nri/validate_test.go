package nri

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

// validTestStep is one plugin's adjustment in a validation test.
type validTestStep struct {
	plugin string // "NN-name"
	adjust func(a *api.ContainerAdjustment)
}

// validTestRequest builds the validation request the dispatcher would: the
// steps run through a merger, every step's plugin (and the extra ones)
// took part.
func validTestRequest(t *testing.T, pod *api.PodSandbox, ctr *api.Container, extra []string, steps ...validTestStep) *api.ValidateContainerAdjustmentRequest {
	t.Helper()
	m := newMerger(pod, ctr)
	req := &api.ValidateContainerAdjustmentRequest{Pod: pod, Container: ctr}
	add := func(id string) {
		idx, name, _ := strings.Cut(id, "-")
		req.AddPlugin(name, idx)
	}
	for _, s := range steps {
		a := &api.ContainerAdjustment{}
		s.adjust(a)
		if err := m.applyCreate(s.plugin, a, nil); err != nil {
			t.Fatalf("merge %s: %v", s.plugin, err)
		}
		add(s.plugin)
	}
	for _, p := range extra {
		add(p)
	}
	req.Adjust = m.adjustment()
	req.Update = m.updates()
	req.Owners = m.owners()
	return req
}

func validTestErrors(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

func TestDefaultValidateRules(t *testing.T) {
	hooks := func(a *api.ContainerAdjustment) {
		a.AddHooks(&api.Hooks{Prestart: []*api.Hook{{Path: "/bin/hook"}}})
	}
	seccomp := func(a *api.ContainerAdjustment) {
		a.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ALLOW"})
	}
	netns := func(a *api.ContainerAdjustment) {
		a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/run/netns/x"})
	}
	noIPC := func(a *api.ContainerAdjustment) { a.RemoveNamespace(&api.LinuxNamespace{Type: "ipc"}) }
	sysctl := func(a *api.ContainerAdjustment) { a.SetLinuxSysctl("net.core.somaxconn", "1024") }
	noSysctl := func(a *api.ContainerAdjustment) { a.SetLinuxSysctl("-kernel.shmmax", "") }
	env := func(a *api.ContainerAdjustment) { a.AddEnv("X", "1") }
	all := DefaultValidatorConfig{
		Enable:                                true,
		RejectOCIHookAdjustment:               true,
		RejectRuntimeDefaultSeccompAdjustment: true,
		RejectUnconfinedSeccompAdjustment:     true,
		RejectCustomSeccompAdjustment:         true,
		RejectNamespaceAdjustment:             true,
		RejectSysctlAdjustment:                true,
	}
	profile := func(p api.SecurityProfile_ProfileType) *api.SecurityProfile {
		return &api.SecurityProfile{ProfileType: p}
	}

	tests := []struct {
		name    string
		cfg     DefaultValidatorConfig
		profile *api.SecurityProfile
		steps   []validTestStep
		want    []string
	}{
		{
			name:  "disabled accepts everything",
			cfg:   DefaultValidatorConfig{RejectOCIHookAdjustment: true, RejectSysctlAdjustment: true, RequiredPlugins: []string{"missing"}},
			steps: []validTestStep{{"10-a", hooks}, {"20-b", sysctl}},
		},
		{
			name:  "hooks rejected naming every contributor",
			cfg:   DefaultValidatorConfig{Enable: true, RejectOCIHookAdjustment: true},
			steps: []validTestStep{{"10-a", hooks}, {"20-b", env}, {"30-c", hooks}},
			want:  []string{`default validator: rule reject_oci_hook_adjustment: OCI hooks added by plugins "10-a", "30-c"`},
		},
		{
			name:  "hooks allowed",
			cfg:   DefaultValidatorConfig{Enable: true, RejectSysctlAdjustment: true},
			steps: []validTestStep{{"10-a", hooks}},
		},
		{
			name:  "no hooks",
			cfg:   DefaultValidatorConfig{Enable: true, RejectOCIHookAdjustment: true},
			steps: []validTestStep{{"10-a", env}},
		},
		{
			name:  "seccomp of container without profile is runtime default",
			cfg:   DefaultValidatorConfig{Enable: true, RejectRuntimeDefaultSeccompAdjustment: true},
			steps: []validTestStep{{"10-a", seccomp}},
			want:  []string{`default validator: rule reject_runtime_default_seccomp_adjustment: seccomp policy of a container with a runtime default profile set by plugin "10-a"`},
		},
		{
			name:    "seccomp runtime default rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectRuntimeDefaultSeccompAdjustment: true},
			profile: profile(api.SecurityProfile_RUNTIME_DEFAULT),
			steps:   []validTestStep{{"10-a", seccomp}},
			want:    []string{`default validator: rule reject_runtime_default_seccomp_adjustment: seccomp policy of a container with a runtime default profile set by plugin "10-a"`},
		},
		{
			name:    "seccomp runtime default allowed when only others rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectUnconfinedSeccompAdjustment: true, RejectCustomSeccompAdjustment: true},
			profile: profile(api.SecurityProfile_RUNTIME_DEFAULT),
			steps:   []validTestStep{{"10-a", seccomp}},
		},
		{
			name:    "seccomp unconfined rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectUnconfinedSeccompAdjustment: true},
			profile: profile(api.SecurityProfile_UNCONFINED),
			steps:   []validTestStep{{"20-b", seccomp}},
			want:    []string{`default validator: rule reject_unconfined_seccomp_adjustment: seccomp policy of a container with an unconfined profile set by plugin "20-b"`},
		},
		{
			name:    "seccomp unconfined allowed when only others rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectRuntimeDefaultSeccompAdjustment: true, RejectCustomSeccompAdjustment: true},
			profile: profile(api.SecurityProfile_UNCONFINED),
			steps:   []validTestStep{{"10-a", seccomp}},
		},
		{
			name:    "seccomp custom rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectCustomSeccompAdjustment: true},
			profile: &api.SecurityProfile{ProfileType: api.SecurityProfile_LOCALHOST, LocalhostRef: "profiles/x.json"},
			steps:   []validTestStep{{"10-a", seccomp}},
			want:    []string{`default validator: rule reject_custom_seccomp_adjustment: seccomp policy of a container with a custom profile set by plugin "10-a"`},
		},
		{
			name:    "seccomp custom allowed when only others rejected",
			cfg:     DefaultValidatorConfig{Enable: true, RejectRuntimeDefaultSeccompAdjustment: true, RejectUnconfinedSeccompAdjustment: true},
			profile: profile(api.SecurityProfile_LOCALHOST),
			steps:   []validTestStep{{"10-a", seccomp}},
		},
		{
			name:  "seccomp not adjusted",
			cfg:   all,
			steps: []validTestStep{{"10-a", env}},
		},
		{
			name:  "namespaces set and removed",
			cfg:   DefaultValidatorConfig{Enable: true, RejectNamespaceAdjustment: true},
			steps: []validTestStep{{"10-a", netns}, {"20-b", noIPC}},
			want: []string{
				`default validator: rule reject_namespace_adjustment: namespace "network" set by plugin "10-a"`,
				`default validator: rule reject_namespace_adjustment: namespace "ipc" removed by plugin "20-b"`,
			},
		},
		{
			name:  "namespaces allowed",
			cfg:   DefaultValidatorConfig{Enable: true, RejectSysctlAdjustment: true},
			steps: []validTestStep{{"10-a", netns}},
		},
		{
			name:  "sysctls set and removed",
			cfg:   DefaultValidatorConfig{Enable: true, RejectSysctlAdjustment: true},
			steps: []validTestStep{{"10-a", sysctl}, {"20-b", noSysctl}},
			want: []string{
				`default validator: rule reject_sysctl_adjustment: sysctl "kernel.shmmax" removed by plugin "20-b"`,
				`default validator: rule reject_sysctl_adjustment: sysctl "net.core.somaxconn" set by plugin "10-a"`,
			},
		},
		{
			name:  "sysctls allowed",
			cfg:   DefaultValidatorConfig{Enable: true, RejectNamespaceAdjustment: true},
			steps: []validTestStep{{"10-a", sysctl}},
		},
		{
			name:  "every rule reports",
			cfg:   all,
			steps: []validTestStep{{"10-a", hooks}, {"20-b", sysctl}},
			want: []string{
				`default validator: rule reject_oci_hook_adjustment: OCI hooks added by plugin "10-a"`,
				`default validator: rule reject_sysctl_adjustment: sysctl "net.core.somaxconn" set by plugin "20-b"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctr := &api.Container{Id: "c1", Name: "app", Linux: &api.LinuxContainer{
				SeccompProfile: tc.profile,
				Namespaces:     []*api.LinuxNamespace{{Type: "ipc"}},
				Sysctl:         map[string]string{"kernel.shmmax": "1"},
			}}
			req := validTestRequest(t, &api.PodSandbox{Id: "p"}, ctr, nil, tc.steps...)
			err := defaultValidate(context.Background(), tc.cfg, req)
			if diff := cmp.Diff(tc.want, validTestErrors(err)); diff != "" {
				t.Fatalf("rejections (-want +got):\n%s", diff)
			}
			if err != nil {
				var ve *validationError
				if !errors.As(err, &ve) || !errdefs.IsPermissionDenied(err) {
					t.Errorf("error %v is not a permission denied validation error", err)
				}
			}
		})
	}
}

func TestDefaultValidateRequiredPlugins(t *testing.T) {
	const tolerate = "example.com/tolerate-missing-plugins"
	tests := []struct {
		name        string
		required    []string
		annotations map[string]string
		want        []string
		wantClass   func(error) bool
	}{
		{name: "none required"},
		{name: "required by name", required: []string{"a", "b"}},
		{name: "required by index and name", required: []string{"10-a", "20-b"}},
		{
			name:      "required missing",
			required:  []string{"a", "c", "30-b", "c"},
			want:      []string{`default validator: rule required_plugins: required plugins "c", "30-b" did not take part in creating container "app"`},
			wantClass: errdefs.IsFailedPrecondition,
		},
		{
			name:        "tolerated",
			required:    []string{"c"},
			annotations: map[string]string{tolerate: "true"},
		},
		{
			name:        "tolerated for this container",
			required:    []string{"c"},
			annotations: map[string]string{tolerate + "/container.app": "true", tolerate: "false"},
		},
		{
			name:        "tolerated for another container",
			required:    []string{"c"},
			annotations: map[string]string{tolerate + "/container.other": "true"},
			want:        []string{`default validator: rule required_plugins: required plugin "c" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
		{
			name:        "not tolerated",
			required:    []string{"c"},
			annotations: map[string]string{tolerate + "/pod": "false"},
			want:        []string{`default validator: rule required_plugins: required plugin "c" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
		{
			name:        "invalid toleration",
			required:    []string{"c"},
			annotations: map[string]string{tolerate: "maybe"},
			want: []string{
				`default validator: rule ` + tolerate + `: annotation "` + tolerate + `": value "maybe" is not a boolean`,
				`default validator: rule required_plugins: required plugin "c" did not take part in creating container "app"`,
			},
			wantClass: errdefs.IsInvalidArgument,
		},
		{
			name:        "annotation JSON list",
			annotations: map[string]string{RequiredPluginsAnnotation: `["a", "d"]`},
			want:        []string{`default validator: rule required-plugins.noderesource.dev: required plugin "d" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
		{
			name:        "annotation YAML list",
			annotations: map[string]string{RequiredPluginsAnnotation + "/pod": "- 20-b\n- 40-d\n"},
			want:        []string{`default validator: rule required-plugins.noderesource.dev/pod: required plugin "40-d" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
		{
			name:        "annotation satisfied",
			annotations: map[string]string{RequiredPluginsAnnotation: `[a, 20-b]`},
		},
		{
			name: "container annotation takes precedence",
			annotations: map[string]string{
				RequiredPluginsAnnotation:                    `[x]`,
				RequiredPluginsAnnotation + "/container.app": `[a]`,
			},
		},
		{
			name: "annotation of another container does not apply",
			annotations: map[string]string{
				RequiredPluginsAnnotation + "/container.sidecar": `[x]`,
			},
		},
		{
			name:        "container annotation missing plugin",
			annotations: map[string]string{RequiredPluginsAnnotation + "/container.app": `[x]`},
			want:        []string{`default validator: rule required-plugins.noderesource.dev/container.app: required plugin "x" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
		{
			name:        "annotation not a list",
			annotations: map[string]string{RequiredPluginsAnnotation: `a`},
			want:        []string{`default validator: rule required-plugins.noderesource.dev: annotation "required-plugins.noderesource.dev": value "a" is not a list of plugin names`},
			wantClass:   errdefs.IsInvalidArgument,
		},
		{
			name:        "toleration does not waive what the pod requires",
			required:    []string{"c"},
			annotations: map[string]string{tolerate: "true", RequiredPluginsAnnotation: `[x]`},
			want:        []string{`default validator: rule required-plugins.noderesource.dev: required plugin "x" did not take part in creating container "app"`},
			wantClass:   errdefs.IsFailedPrecondition,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultValidatorConfig{Enable: true, RequiredPlugins: tc.required, TolerateMissingAnnotation: tolerate}
			pod := &api.PodSandbox{Id: "p", Annotations: tc.annotations}
			// Plugin 20-b took part without adjusting anything.
			req := validTestRequest(t, pod, &api.Container{Id: "c1", Name: "app"}, []string{"20-b"},
				validTestStep{"10-a", func(a *api.ContainerAdjustment) { a.AddEnv("A", "1") }})
			err := defaultValidate(context.Background(), cfg, req)
			if diff := cmp.Diff(tc.want, validTestErrors(err)); diff != "" {
				t.Fatalf("rejections (-want +got):\n%s", diff)
			}
			if tc.wantClass != nil && !tc.wantClass(err) {
				t.Errorf("error %v has the wrong class", err)
			}
		})
	}
}

func TestDefaultValidatorDefaults(t *testing.T) {
	cfg := defaultValidatorConfig()
	want := DefaultValidatorConfig{Enable: true, RejectOCIHookAdjustment: true}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Fatalf("defaults (-want +got):\n%s", diff)
	}
	ctr := &api.Container{Id: "c1", Name: "app"}
	allowed := validTestRequest(t, &api.PodSandbox{}, ctr, nil,
		validTestStep{"10-a", func(a *api.ContainerAdjustment) {
			a.SetLinuxSeccompPolicy(&api.LinuxSeccomp{DefaultAction: "SCMP_ACT_ALLOW"})
			a.SetLinuxSysctl("net.core.somaxconn", "1")
			a.AddOrReplaceNamespace(&api.LinuxNamespace{Type: "network", Path: "/run/netns/x"})
		}})
	if err := defaultValidate(context.Background(), cfg, allowed); err != nil {
		t.Errorf("defaults reject seccomp, sysctl or namespace adjustment: %v", err)
	}
	hooked := validTestRequest(t, &api.PodSandbox{}, ctr, nil,
		validTestStep{"10-a", func(a *api.ContainerAdjustment) {
			a.AddHooks(&api.Hooks{Poststart: []*api.Hook{{Path: "/x"}}})
		}})
	if err := defaultValidate(context.Background(), cfg, hooked); err == nil {
		t.Error("defaults accept an OCI hook adjustment")
	}
	if err := defaultValidate(context.Background(), cfg, nil); err != nil {
		t.Errorf("nil request: %v", err)
	}
}
