package nri

import (
	"github.com/containerd/nri/pkg/api"
)

// CreateResult is what plugins made of a container being created.
type CreateResult struct {
	// Adjust is the merged adjustment; never nil.
	Adjust *api.ContainerAdjustment
	// Update holds the merged updates to other containers.
	Update []*api.ContainerUpdate
	// Owners tells which plugin set which field of Adjust (and of Update);
	// never nil.
	Owners *api.OwningPlugins
}

// OwnersTable flattens the owners of container id's fields into a readable
// map: "memory limit" -> "10-resources", "env \"FOO\"" -> "20-env". It is
// what crinctl shows and what the engine records.
func OwnersTable(o *api.OwningPlugins, id string) map[string]string {
	fo := o.GetOwners()[id]
	if fo == nil {
		return nil
	}
	out := make(map[string]string)
	for f, plugin := range fo.GetSimple() {
		out[mergeFieldName(api.Field(f))] = plugin
	}
	for f, c := range fo.GetCompound() {
		name := mergeFieldName(api.Field(f))
		for key, plugin := range c.GetOwners() {
			out[name+" "+quoteKey(key)] = plugin
		}
	}
	return out
}

func quoteKey(k string) string { return `"` + k + `"` }
