package main

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/internal/config"
	"github.com/crin-dev/crin/internal/nri"
)

// nopEngine is an nri.Engine that has nothing.
type nopEngine struct{}

func (nopEngine) Snapshot(context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	return nil, nil, nil
}

func (nopEngine) UpdateContainers(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (nopEngine) EvictContainer(context.Context, string, string) error { return nil }

// TestNRIDefaultsMatchAdaptation keeps internal/config's [nri] defaults
// (what `crind config default` prints) equal to nri.DefaultConfig.
func TestNRIDefaultsMatchAdaptation(t *testing.T) {
	got := nriConfig(config.Default().NRI, "v1.2.3")
	want := nri.DefaultConfig()
	want.RuntimeVersion = "v1.2.3"
	// An empty override map and a nil one mean the same.
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults differ from nri.DefaultConfig (-want +got):\n%s", diff)
	}
	if got.RuntimeName != "crin" {
		t.Errorf("RuntimeName = %q", got.RuntimeName)
	}
}

func TestNRIConfigFromTOML(t *testing.T) {
	const full = `
[nri]
enable = true
disable_connections = true
plugin_path = "/srv/nri/plugins"
plugin_config_path = "/srv/nri/conf.d"
socket_path = "/tmp/n/nri.sock"
plugin_registration_timeout = "1s"
plugin_request_timeout = "250ms"
plugin_sync_timeout = "1m"
[nri.default_failure_policy]
fail_request = true
[nri.plugins."10-resources"]
request_timeout = "5s"
required = true
[nri.plugins."10-resources".failure_policy]
fail_request = true
keep_connected = true
[nri.plugins.logger]
request_timeout = "100ms"
[nri.default_validator]
enable = true
reject_oci_hook_adjustment = false
reject_runtime_default_seccomp_adjustment = true
reject_unconfined_seccomp_adjustment = true
reject_custom_seccomp_adjustment = true
reject_namespace_adjustment = true
reject_sysctl_adjustment = true
required_plugins = ["resources", "20-topology"]
tolerate_missing_plugins_annotation = "example.com/tolerate-missing"
`
	c := config.Default()
	if err := config.Parse([]byte(full), c); err != nil {
		t.Fatal(err)
	}
	got := nriConfig(c.NRI, "dev")
	want := nri.Config{
		Enable:               true,
		DisableConnections:   true,
		PluginPath:           "/srv/nri/plugins",
		PluginConfigPath:     "/srv/nri/conf.d",
		SocketPath:           "/tmp/n/nri.sock",
		RegistrationTimeout:  time.Second,
		RequestTimeout:       250 * time.Millisecond,
		SyncTimeout:          time.Minute,
		StartupWait:          nri.DefaultStartupWait,
		DefaultFailurePolicy: nri.FailurePolicy{FailRequest: true},
		PluginOverrides: map[string]nri.PluginConfig{
			"10-resources": {RequestTimeout: 5 * time.Second, Required: true, FailurePolicy: &nri.FailurePolicy{FailRequest: true, KeepConnected: true}},
			"logger":       {RequestTimeout: 100 * time.Millisecond},
		},
		DefaultValidator: nri.DefaultValidatorConfig{
			Enable:                                true,
			RejectRuntimeDefaultSeccompAdjustment: true,
			RejectUnconfinedSeccompAdjustment:     true,
			RejectCustomSeccompAdjustment:         true,
			RejectNamespaceAdjustment:             true,
			RejectSysctlAdjustment:                true,
			RequiredPlugins:                       []string{"resources", "20-topology"},
			TolerateMissingAnnotation:             "example.com/tolerate-missing",
		},
		RuntimeName:    "crin",
		RuntimeVersion: "dev",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nriConfig (-want +got):\n%s", diff)
	}
	// The adaptation accepts what the config package accepted.
	if _, err := nri.New(got, nopEngine{}); err != nil {
		t.Errorf("nri.New refused a valid config: %v", err)
	}
}
