package oci

import (
	"context"
	"path/filepath"

	"github.com/crin-dev/crin/internal/idmap"
)

// removeRuntimeLeftovers removes what a runtime command killed half-way
// left of container id in the runtime's root, once no command for it
// runs and the container is gone: runc 1.1 bind-mounts a read-only view
// of its own binary there (runc.XXXXXX) for the length of each command,
// and keeps its state dir until a `runc delete` finishes. Where the
// runtime removed the dir, as it does when nothing was killed, there is
// nothing to do (idmap.RemoveAll only looks at the dir).
func (o *Runtime) removeRuntimeLeftovers(ctx context.Context, id string) {
	if err := idmap.RemoveAll(filepath.Join(o.cfg.Root, id)); err != nil {
		o.log.WarnContext(ctx, "remove what a killed runtime command left", "container_id", id, "error", err)
	}
}
