package shimv2

import (
	"context"
	"fmt"
	"io"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

var _ runtime.Attacher = (*Runtime)(nil)

// Attach copies the container's output, as crind reads it from the fifos,
// to req's writers from now on. A client that falls more than
// attachBacklog chunks behind is cut off (shim.ErrAttachLagged, as with
// crin-shim).
func (r *Runtime) Attach(ctx context.Context, id string, req runtime.AttachRequest) error {
	if _, _, err := r.known(id); err != nil {
		return err
	}
	r.mu.Lock()
	cio := r.ios[id]
	r.mu.Unlock()
	var sub *attachSub
	if cio != nil {
		sub = cio.subscribe()
	}
	if sub == nil {
		return fmt.Errorf("attach to container %s: its output has ended: %w", id, errdefs.ErrFailedPrecondition)
	}
	defer cio.unsubscribe(sub)
	outs := []io.Writer{req.Stdout, req.Stderr}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c, ok := <-sub.ch:
			if !ok {
				if sub.lagged {
					return fmt.Errorf("attach to container %s: %w", id, shim.ErrAttachLagged)
				}
				return nil
			}
			if w := outs[c.stream]; w != nil {
				if _, err := w.Write(c.data); err != nil {
					return fmt.Errorf("attach to container %s: %w", id, err)
				}
			}
		}
	}
}
