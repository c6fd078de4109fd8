// Package nri is crind's NRI adaptation: the side of the Node Resource
// Interface a runtime implements. It launches pre-installed plugins and
// accepts external ones on the NRI socket, speaks ttrpc to each over one
// multiplexed connection (mux.go), synchronizes them with the pods and
// containers that exist, relays every lifecycle event to the plugins that
// subscribed to it in plugin index order, and merges and validates their
// adjustments and updates, naming the plugin that owns each field.
//
// The package knows nothing of CRI or OCI: the hub (internal/cri) calls
// the Adaptation at each hook point and implements Engine, through which
// plugins' unsolicited updates and evictions come back. Events for one pod
// are ordered, events for different pods run in parallel, and no lock is
// held across a plugin call. A plugin that times out or crashes is handled
// by its failure policy; a pre-installed one is restarted with backoff
// (supervise.go). docs/nri.md and docs/nri-engine.md describe the design.
package nri
