package nri

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"
)

// Defaults for Config.
const (
	DefaultPluginPath          = "/opt/nri/plugins"
	DefaultPluginConfigPath    = "/etc/nri/conf.d"
	DefaultSocketPath          = "/var/run/nri/nri.sock"
	DefaultRegistrationTimeout = 5 * time.Second
	DefaultRequestTimeout      = 2 * time.Second
	DefaultSyncTimeout         = 30 * time.Second
	// DefaultStartupWait is how long Start waits for the pre-installed
	// plugins to be ready before crind serves without them.
	DefaultStartupWait = 5 * time.Second
	// DefaultRestartBackoff and DefaultMaxRestartBackoff bound the delay
	// before a pre-installed plugin that failed (to start, to synchronize,
	// or later) is launched again; it doubles from the first to the second.
	DefaultRestartBackoff    = time.Second
	DefaultMaxRestartBackoff = 5 * time.Minute
	// DefaultShutdownGrace is how long a launched plugin has to exit after
	// SIGTERM before it is killed.
	DefaultShutdownGrace = 2 * time.Second
)

// Config configures the NRI adaptation. The zero value of a duration means
// its default; DefaultConfig returns a Config with every default filled in.
type Config struct {
	// Enable turns NRI on; with it off New still works and every event
	// method is a cheap no-op.
	Enable bool
	// DisableConnections refuses externally started plugins: no socket is
	// created.
	DisableConnections bool
	// PluginPath holds pre-installed plugins, executables named NN-name.
	PluginPath string
	// PluginConfigPath holds NN-name.conf or name.conf per plugin.
	PluginConfigPath string
	// SocketPath is where external plugins connect.
	SocketPath string
	// RegistrationTimeout bounds connect-to-registered and Configure.
	RegistrationTimeout time.Duration
	// RequestTimeout bounds one plugin's handling of one event.
	RequestTimeout time.Duration
	// SyncTimeout bounds the whole Synchronize exchange with one plugin.
	SyncTimeout time.Duration
	// StartupWait bounds how long Start waits for the pre-installed
	// plugins' first registration and Synchronize; one still synchronizing
	// afterwards gets its events queued until it is ready.
	StartupWait time.Duration
	// PluginOverrides holds per-plugin settings, keyed by plugin name
	// ("name") or by index and name ("NN-name"); the latter wins.
	PluginOverrides map[string]PluginConfig
	// DefaultFailurePolicy applies to plugins that declare no policy and
	// have no override.
	DefaultFailurePolicy FailurePolicy
	// DefaultValidator configures the built-in validator.
	DefaultValidator DefaultValidatorConfig
	// RuntimeName and RuntimeVersion are sent to plugins in Configure.
	RuntimeName    string
	RuntimeVersion string
}

// PluginConfig overrides settings for one plugin.
type PluginConfig struct {
	// RequestTimeout replaces Config.RequestTimeout for this plugin.
	RequestTimeout time.Duration
	// FailurePolicy replaces the plugin's own and the default policy.
	FailurePolicy *FailurePolicy
	// Required makes the plugin mandatory: while it is not ready
	// (connecting, synchronizing, backing off after a failure),
	// RunPodSandbox, CreateContainer and UpdateContainer fail at once with
	// ErrRequiredPluginMissing (Unavailable, so kubelet retries), and its
	// failures always fail those requests.
	Required bool
}

// FailurePolicy decides what a plugin's timeout, crash or protocol error
// does. Errors the plugin returns on purpose always fail a request.
type FailurePolicy struct {
	// FailRequest fails the request the plugin did not answer; otherwise
	// the request goes on as if the plugin were not subscribed.
	FailRequest bool
	// KeepConnected keeps a plugin that timed out; otherwise it is
	// disconnected (a pre-installed one is then restarted).
	KeepConnected bool
}

// DefaultConfig returns the configuration used when nothing is configured:
// NRI on, external connections allowed, the default validator on and
// rejecting OCI hook injection. internal/config prints the same values as
// crind's default [nri] section (it does not import this package);
// TestNRIDefaultsMatchAdaptation in cmd/crind keeps the two equal.
func DefaultConfig() Config {
	return Config{
		Enable:              true,
		PluginPath:          DefaultPluginPath,
		PluginConfigPath:    DefaultPluginConfigPath,
		SocketPath:          DefaultSocketPath,
		RegistrationTimeout: DefaultRegistrationTimeout,
		RequestTimeout:      DefaultRequestTimeout,
		SyncTimeout:         DefaultSyncTimeout,
		StartupWait:         DefaultStartupWait,
		DefaultValidator:    defaultValidatorConfig(),
		RuntimeName:         "crin",
		RuntimeVersion:      "unknown",
	}
}

// withDefaults fills unset durations and names and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.RegistrationTimeout == 0 {
		c.RegistrationTimeout = DefaultRegistrationTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.SyncTimeout == 0 {
		c.SyncTimeout = DefaultSyncTimeout
	}
	if c.StartupWait == 0 {
		c.StartupWait = DefaultStartupWait
	}
	if c.SocketPath == "" {
		c.SocketPath = DefaultSocketPath
	}
	if c.RuntimeName == "" {
		c.RuntimeName = "crin"
	}
	for name, d := range map[string]time.Duration{
		"plugin_registration_timeout": c.RegistrationTimeout,
		"plugin_request_timeout":      c.RequestTimeout,
		"plugin_sync_timeout":         c.SyncTimeout,
		"plugin_startup_wait":         c.StartupWait,
	} {
		if d < 0 {
			return c, fmt.Errorf("nri config %s %s: %w", name, d, errdefs.ErrInvalidArgument)
		}
	}
	for name, o := range c.PluginOverrides {
		if o.RequestTimeout < 0 {
			return c, fmt.Errorf("nri config plugins.%s.request_timeout %s: %w", name, o.RequestTimeout, errdefs.ErrInvalidArgument)
		}
	}
	return c, nil
}

// override returns the override for plugin idx-name, if any.
func (c *Config) override(idx, name string) (PluginConfig, bool) {
	if o, ok := c.PluginOverrides[idx+"-"+name]; ok {
		return o, true
	}
	o, ok := c.PluginOverrides[name]
	return o, ok
}
