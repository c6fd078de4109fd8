// Package admin holds the wire types of crind's admin API, served by crind
// on its admin socket and read by crinctl: plain HTTP with JSON bodies.
//
//	GET /v1/nri/plugins                  [Plugin, ...] in invocation order
//	GET /v1/containers/{id}/nri-owners   {"field": "NN-plugin", ...}
//
// Errors are an Error body with 404 (unknown container), 503 (NRI
// disabled), 501 (not supported) or 500.
package admin

import "net/url"

// PluginsPath lists the NRI plugins.
const PluginsPath = "/v1/nri/plugins"

// OwnersPath is where the owners of container id's adjusted fields are.
func OwnersPath(id string) string { return "/v1/containers/" + url.PathEscape(id) + "/nri-owners" }

// Plugin is one NRI plugin on the wire. Durations are Go duration strings
// ("2s", "1.5ms").
type Plugin struct {
	Index          string        `json:"index"`
	Name           string        `json:"name"`
	Kind           string        `json:"kind"`
	Events         []string      `json:"events"`
	State          string        `json:"state"`
	FailurePolicy  FailurePolicy `json:"failure_policy"`
	Required       bool          `json:"required"`
	RequestTimeout string        `json:"request_timeout"`
	Calls          uint64        `json:"calls"`
	Failures       uint64        `json:"failures"`
	MeanLatency    string        `json:"mean_latency"`
	// Restarts counts launches of a pre-installed plugin after a failure
	// (to start, to synchronize, or later); LastError is the latest one.
	Restarts  uint64 `json:"restarts,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Backoff and NextAttempt (RFC 3339, UTC) are set while State is
	// "backoff": the plugin failed and waits to be launched again.
	Backoff     string `json:"backoff,omitempty"`
	NextAttempt string `json:"next_attempt,omitempty"`
}

// FailurePolicy is a plugin's failure policy on the wire.
type FailurePolicy struct {
	FailRequest   bool `json:"fail_request"`
	KeepConnected bool `json:"keep_connected"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}
