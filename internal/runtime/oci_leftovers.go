package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// removeRuntimeLeftovers removes what a runtime command killed half-way
// left of container id in the runtime's root, once no command for it
// runs and the container is gone: runc 1.1 bind-mounts a read-only view
// of its own binary there (runc.XXXXXX) for the length of each command,
// and keeps its state dir until a `runc delete` finishes. Where the
// runtime removed the dir, as it does when nothing was killed, there is
// nothing to do.
func (o *OCI) removeRuntimeLeftovers(ctx context.Context, id string) {
	dir := filepath.Join(o.cfg.Root, id)
	if _, err := os.Lstat(dir); err != nil {
		return
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		o.log.WarnContext(ctx, "runtime leftovers: read mounts", "container_id", id, "error", err)
		return
	}
	// Deepest first.
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	for _, m := range mounts {
		if m.Mountpoint == dir {
			continue
		}
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			o.log.WarnContext(ctx, "runtime leftovers: unmount", "container_id", id, "mount", m.Mountpoint, "error", err)
			return
		}
		o.log.InfoContext(ctx, "unmounted what a killed runtime command left", "container_id", id, "mount", m.Mountpoint)
	}
	if err := os.RemoveAll(dir); err != nil {
		o.log.WarnContext(ctx, "runtime leftovers: remove state", "container_id", id, "error", err)
	}
}
