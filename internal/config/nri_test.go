package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDefaultPrintsNRIKeys(t *testing.T) {
	b, err := Default().Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{
		"[nri]", "enable = true", "disable_connections = false", "plugin_path = '/opt/nri/plugins'",
		"plugin_config_path = '/etc/nri/conf.d'", "socket_path = '/var/run/nri/nri.sock'",
		"plugin_registration_timeout = '5s'", "plugin_request_timeout = '2s'", "plugin_sync_timeout = '30s'",
		"[nri.default_failure_policy]", "fail_request = false", "keep_connected = false", "[nri.plugins]",
		"[nri.default_validator]", "reject_oci_hook_adjustment = true",
		"reject_runtime_default_seccomp_adjustment = false", "reject_unconfined_seccomp_adjustment = false",
		"reject_custom_seccomp_adjustment = false", "reject_namespace_adjustment = false",
		"reject_sysctl_adjustment = false", "required_plugins = []", "tolerate_missing_plugins_annotation = ''",
		"admin_socket = ''", "cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']",
		"[cri.blockio_classes]", "[cri.rdt_classes]",
	} {
		if !strings.Contains(string(b), key) {
			t.Errorf("config default lacks %q", key)
		}
	}
	// What is printed must load back unchanged.
	c := Default()
	if err := Parse(b, c); err != nil {
		t.Fatalf("printed default does not parse: %v\n%s", err, b)
	}
	if diff := cmp.Diff(Default().NRI, c.NRI, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip changed [nri] (-want +got):\n%s", diff)
	}
}

func TestNRIDisable(t *testing.T) {
	c := Default()
	if err := Parse([]byte("[nri]\nenable = false\n"), c); err != nil {
		t.Fatal(err)
	}
	if c.NRI.Enable {
		t.Errorf("enable = false not honoured")
	}
	if c.NRI.PluginPath != "/opt/nri/plugins" {
		t.Errorf("other defaults lost: plugin_path = %q", c.NRI.PluginPath)
	}
}

func TestNRIValidationErrors(t *testing.T) {
	long := "/" + strings.Repeat("n", 110)
	for _, tc := range []struct {
		name    string
		toml    string
		wantErr []string
	}{
		{"relative plugin path", "[nri]\nplugin_path = \"plugins\"\n", []string{"nri.plugin_path", `"plugins"`, "absolute"}},
		{"relative config path", "[nri]\nplugin_config_path = \"conf.d\"\n", []string{"nri.plugin_config_path", "conf.d", "absolute"}},
		{"relative socket", "[nri]\nsocket_path = \"nri.sock\"\n", []string{"nri.socket_path", "nri.sock", "absolute"}},
		{"socket too long", "[nri]\nsocket_path = \"" + long + "\"\n", []string{"nri.socket_path", long, "108"}},
		{"zero request timeout", "[nri]\nplugin_request_timeout = \"0s\"\n", []string{"nri.plugin_request_timeout", "0s", "positive"}},
		{"negative sync timeout", "[nri]\nplugin_sync_timeout = \"-1s\"\n", []string{"nri.plugin_sync_timeout", "-1s", "positive"}},
		{"zero registration timeout", "[nri]\nplugin_registration_timeout = \"0s\"\n", []string{"nri.plugin_registration_timeout", "positive"}},
		{"bad duration", "[nri]\nplugin_request_timeout = \"two\"\n", []string{"plugin_request_timeout"}},
		{"bad plugin key", "[nri.plugins.\"bad name\"]\nrequired = true\n", []string{"nri.plugins.bad name", "NN-name"}},
		{"bad plugin index", "[nri.plugins.\"1x-a/b\"]\nrequired = true\n", []string{"nri.plugins.1x-a/b"}},
		{"negative plugin timeout", "[nri.plugins.\"10-a\"]\nrequest_timeout = \"-2s\"\n", []string{"nri.plugins.10-a.request_timeout", "-2s"}},
		{"unknown plugin key", "[nri.plugins.\"10-a\"]\nrequierd = true\n", []string{"nri.plugins.10-a.requierd"}},
		{"unknown policy", "[nri.default_failure_policy]\nretry = true\n", []string{"nri.default_failure_policy.retry"}},
		{"unknown validator key", "[nri.default_validator]\nreject_everything = true\n", []string{"nri.default_validator.reject_everything"}},
		{"bad required plugin", "[nri.default_validator]\nrequired_plugins = [\"ok\", \"no way\"]\n", []string{"nri.default_validator.required_plugins[1]", "no way"}},
		{"bad annotation", "[nri.default_validator]\ntolerate_missing_plugins_annotation = \"not an annotation\"\n", []string{"tolerate_missing_plugins_annotation", "not an annotation"}},
		{"two errors", "[nri]\nplugin_path = \"a\"\nsocket_path = \"b\"\n", []string{"nri.plugin_path", "nri.socket_path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Parse([]byte(tc.toml), Default())
			if err == nil {
				t.Fatalf("accepted; want an error mentioning %v", tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error not InvalidArgument: %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestAdminSocketPath(t *testing.T) {
	for _, tc := range []struct {
		name, toml, want string
		wantErr          []string
	}{
		{name: "derived from state", toml: "state = \"/tmp/st\"\n", want: "/tmp/st/crind-admin.sock"},
		{name: "explicit", toml: "[cri]\nadmin_socket = \"/run/x/admin.sock\"\n", want: "/run/x/admin.sock"},
		{name: "relative", toml: "[cri]\nadmin_socket = \"admin.sock\"\n", wantErr: []string{"cri.admin_socket", "admin.sock", "absolute"}},
		{name: "derived too long", toml: "state = \"/" + strings.Repeat("s", 95) + "\"\n", wantErr: []string{"cri.admin_socket", "crind-admin.sock", "108"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			err := Parse([]byte(tc.toml), c)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := c.AdminSocketPath(); got != tc.want {
					t.Errorf("AdminSocketPath = %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
