package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// maxSocketPath is the longest unix socket path the kernel accepts
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// NRI configures the Node Resource Interface: the plugins that observe and
// adjust pods and containers.
type NRI struct {
	// Enable turns NRI on.
	Enable bool `toml:"enable" comment:"run NRI plugins"`
	// DisableConnections refuses plugins started outside crind: no socket.
	DisableConnections bool `toml:"disable_connections" comment:"refuse externally started plugins (no socket_path)"`
	// PluginPath holds pre-installed plugins, executables named NN-name.
	PluginPath string `toml:"plugin_path" comment:"pre-installed plugins: executables named NN-name, launched by crind"`
	// PluginConfigPath holds NN-name.conf or name.conf per plugin.
	PluginConfigPath string `toml:"plugin_config_path" comment:"per-plugin configuration: NN-name.conf, else name.conf"`
	// SocketPath is where external plugins connect (its directory is 0700).
	SocketPath string `toml:"socket_path" comment:"unix socket external plugins connect to (directory 0700)"`
	// PluginRegistrationTimeout bounds a plugin's registration and
	// configuration.
	PluginRegistrationTimeout Duration `toml:"plugin_registration_timeout" comment:"bound on a plugin's registration and Configure"`
	// PluginRequestTimeout bounds one plugin's handling of one event.
	PluginRequestTimeout Duration `toml:"plugin_request_timeout" comment:"bound on one plugin's handling of one event"`
	// PluginSyncTimeout bounds a plugin's whole Synchronize.
	PluginSyncTimeout Duration `toml:"plugin_sync_timeout" comment:"bound on a plugin's whole Synchronize (all pods and containers)"`
	// PluginStartupWait bounds how long start-up waits for pre-installed
	// plugins to be ready; later ones get their events queued.
	PluginStartupWait Duration `toml:"plugin_startup_wait" comment:"longest start-up waits for pre-installed plugins to synchronize (no CRI call ever waits for one)"`
	// DefaultFailurePolicy applies to plugins with no policy of their own
	// and no override.
	DefaultFailurePolicy FailurePolicy `toml:"default_failure_policy" comment:"what a plugin's timeout, crash or protocol error does, unless overridden"`
	// Plugins holds per-plugin overrides keyed "name" or "NN-name" (the
	// latter wins).
	Plugins map[string]NRIPlugin `toml:"plugins" comment:"per-plugin overrides: [nri.plugins.\"NN-name\"] or [nri.plugins.name] with request_timeout, failure_policy, required"`
	// DefaultValidator configures the built-in validator, which runs after
	// every mutating plugin.
	DefaultValidator NRIValidator `toml:"default_validator"`
}

// FailurePolicy decides what a plugin's timeout, crash or protocol error
// does. Errors a plugin returns on purpose always fail the request.
type FailurePolicy struct {
	// FailRequest fails the request the plugin did not answer.
	FailRequest bool `toml:"fail_request" comment:"fail the CRI request the plugin did not answer"`
	// KeepConnected keeps a plugin that timed out connected.
	KeepConnected bool `toml:"keep_connected" comment:"keep a plugin that timed out (else it is dropped; a pre-installed one restarts)"`
}

// NRIPlugin overrides the settings of one plugin.
type NRIPlugin struct {
	// RequestTimeout replaces plugin_request_timeout; zero keeps it.
	RequestTimeout Duration `toml:"request_timeout,omitempty"`
	// FailurePolicy replaces the plugin's own and the default policy.
	FailurePolicy *FailurePolicy `toml:"failure_policy,omitempty"`
	// Required: while the plugin is not ready (connecting, synchronizing,
	// backing off), RunPodSandbox, CreateContainer and UpdateContainer fail
	// at once (Unavailable), and so do requests it fails.
	Required bool `toml:"required,omitempty"`
}

// NRIValidator configures the built-in default validator
// (nri.DefaultValidatorConfig).
type NRIValidator struct {
	Enable                                bool     `toml:"enable" comment:"run the built-in validator after all plugins"`
	RejectOCIHookAdjustment               bool     `toml:"reject_oci_hook_adjustment" comment:"reject plugins adding OCI hooks (host binaries run as root)"`
	RejectRuntimeDefaultSeccompAdjustment bool     `toml:"reject_runtime_default_seccomp_adjustment" comment:"reject seccomp changes to containers with the RuntimeDefault profile"`
	RejectUnconfinedSeccompAdjustment     bool     `toml:"reject_unconfined_seccomp_adjustment" comment:"reject seccomp changes to Unconfined containers"`
	RejectCustomSeccompAdjustment         bool     `toml:"reject_custom_seccomp_adjustment" comment:"reject seccomp changes to containers with a Localhost profile"`
	RejectNamespaceAdjustment             bool     `toml:"reject_namespace_adjustment" comment:"reject adding, replacing or removing Linux namespaces"`
	RejectSysctlAdjustment                bool     `toml:"reject_sysctl_adjustment" comment:"reject setting or removing sysctls"`
	RequiredPlugins                       []string `toml:"required_plugins" comment:"plugins (name or NN-name) that must have taken part in creating every container"`
	TolerateMissingPluginsAnnotation      string   `toml:"tolerate_missing_plugins_annotation" comment:"pod annotation that, set to \"true\", lets a pod run without required_plugins"`
}

// defaultNRI is what crind runs with when [nri] says nothing. It must
// equal nri.DefaultConfig once cmd/crind maps it (TestNRIDefaultsMatchAdaptation
// there checks): the printed default config is the adaptation's default,
// and this package does not import the adaptation to read it.
func defaultNRI() NRI {
	return NRI{
		Enable:                    true,
		PluginPath:                "/opt/nri/plugins",
		PluginConfigPath:          "/etc/nri/conf.d",
		SocketPath:                "/var/run/nri/nri.sock",
		PluginRegistrationTimeout: Duration(5 * time.Second),
		PluginRequestTimeout:      Duration(2 * time.Second),
		PluginSyncTimeout:         Duration(30 * time.Second),
		PluginStartupWait:         Duration(5 * time.Second),
		Plugins:                   map[string]NRIPlugin{},
		DefaultValidator: NRIValidator{
			Enable:                  true,
			RejectOCIHookAdjustment: true,
		},
	}
}

// validate reports every bad [nri] value through bad. The values are
// checked even when NRI is off, so turning it on cannot surface old errors.
func (n *NRI) validate(bad func(key string, val any, why string)) {
	for _, kv := range []struct{ key, val string }{
		{"nri.plugin_path", n.PluginPath},
		{"nri.plugin_config_path", n.PluginConfigPath},
		{"nri.socket_path", n.SocketPath},
	} {
		if !filepath.IsAbs(kv.val) {
			bad(kv.key, kv.val, "must be an absolute path")
		}
	}
	if len(n.SocketPath) > maxSocketPath {
		bad("nri.socket_path", n.SocketPath, "unix socket paths must be shorter than 108 bytes")
	}
	for _, kv := range []struct {
		key string
		val Duration
	}{
		{"nri.plugin_registration_timeout", n.PluginRegistrationTimeout},
		{"nri.plugin_request_timeout", n.PluginRequestTimeout},
		{"nri.plugin_sync_timeout", n.PluginSyncTimeout},
		{"nri.plugin_startup_wait", n.PluginStartupWait},
	} {
		if kv.val <= 0 {
			bad(kv.key, time.Duration(kv.val), "must be positive")
		}
	}
	for _, name := range sortedKeys(n.Plugins) {
		key := "nri.plugins." + name
		if err := checkPluginRef(name); err != nil {
			bad(key, name, err.Error())
		}
		if d := n.Plugins[name].RequestTimeout; d < 0 {
			bad(key+".request_timeout", time.Duration(d), "must not be negative (0 keeps nri.plugin_request_timeout)")
		}
	}
	for i, name := range n.DefaultValidator.RequiredPlugins {
		if err := checkPluginRef(name); err != nil {
			bad(fmt.Sprintf("nri.default_validator.required_plugins[%d]", i), name, err.Error())
		}
	}
	if a := n.DefaultValidator.TolerateMissingPluginsAnnotation; a != "" && !regexp.MustCompile(annotationKeyPattern).MatchString(a) {
		bad("nri.default_validator.tolerate_missing_plugins_annotation", a, "must be an annotation key ([prefix/]name: letters, digits, '-', '_', '.')")
	}
}

// checkPluginRef checks a plugin reference: "name" or "NN-name".
func checkPluginRef(ref string) error {
	if idx, name, ok := strings.Cut(ref, "-"); ok && api.CheckPluginIndex(idx) == nil {
		ref = name
	}
	if err := api.CheckPluginName(ref); err != nil {
		return fmt.Errorf("want name or NN-name with letters, digits, '_', '.', '+', '-' (%v)", err)
	}
	return nil
}
