package main

import (
	"slices"
	"time"

	"github.com/crin-dev/crin/internal/config"
	"github.com/crin-dev/crin/internal/nri"
)

// nriConfig maps the [nri] section of crind's configuration file to the
// adaptation's configuration; runtimeVersion is sent to plugins in
// Configure. The TOML shape belongs to internal/config and the adaptation
// knows only nri.Config, so this is the one place the two meet.
func nriConfig(n config.NRI, runtimeVersion string) nri.Config {
	v := n.DefaultValidator
	c := nri.Config{
		Enable:               n.Enable,
		DisableConnections:   n.DisableConnections,
		PluginPath:           n.PluginPath,
		PluginConfigPath:     n.PluginConfigPath,
		SocketPath:           n.SocketPath,
		RegistrationTimeout:  time.Duration(n.PluginRegistrationTimeout),
		RequestTimeout:       time.Duration(n.PluginRequestTimeout),
		SyncTimeout:          time.Duration(n.PluginSyncTimeout),
		StartupWait:          time.Duration(n.PluginStartupWait),
		DefaultFailurePolicy: nri.FailurePolicy(n.DefaultFailurePolicy),
		DefaultValidator: nri.DefaultValidatorConfig{
			Enable:                                v.Enable,
			RejectOCIHookAdjustment:               v.RejectOCIHookAdjustment,
			RejectRuntimeDefaultSeccompAdjustment: v.RejectRuntimeDefaultSeccompAdjustment,
			RejectUnconfinedSeccompAdjustment:     v.RejectUnconfinedSeccompAdjustment,
			RejectCustomSeccompAdjustment:         v.RejectCustomSeccompAdjustment,
			RejectNamespaceAdjustment:             v.RejectNamespaceAdjustment,
			RejectSysctlAdjustment:                v.RejectSysctlAdjustment,
			RequiredPlugins:                       slices.Clone(v.RequiredPlugins),
			TolerateMissingAnnotation:             v.TolerateMissingPluginsAnnotation,
		},
		RuntimeName:    "crin",
		RuntimeVersion: runtimeVersion,
	}
	if len(n.Plugins) > 0 {
		c.PluginOverrides = make(map[string]nri.PluginConfig, len(n.Plugins))
		for name, p := range n.Plugins {
			o := nri.PluginConfig{RequestTimeout: time.Duration(p.RequestTimeout), Required: p.Required}
			if p.FailurePolicy != nil {
				fp := nri.FailurePolicy(*p.FailurePolicy)
				o.FailurePolicy = &fp
			}
			c.PluginOverrides[name] = o
		}
	}
	return c
}
