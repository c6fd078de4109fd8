package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// AttachRequest says where a container's output goes while attached, and
// what feeds its stdin.
type AttachRequest struct {
	// Stdin, when set, feeds the container's stdin if it was created with
	// one (CreateRequest.Stdin) that is still open; with StdinOnce only
	// the first attach that brings stdin gets it, and the end of its
	// stdin (or of its attach) closes the container's.
	Stdin io.Reader
	// Stdout and Stderr receive the container's output from the moment of
	// attaching; nil discards a stream. A container on a terminal has
	// only stdout.
	Stdout, Stderr io.Writer
	// Resize delivers terminal sizes for a container on a terminal; nil
	// means none.
	Resize <-chan TerminalSize
}

// Attacher is the optional capability of attaching to a container's
// stdio. It is found by type assertion on a Runtime.
type Attacher interface {
	// Attach copies the container's output to req's writers, and
	// req.Stdin to the container, until the container has exited and its
	// output drained (nil), or ctx ends (ctx's error); a request with no
	// output writer also ends when its stdin ends. An unknown container is errdefs.ErrNotFound, one that
	// has exited or has no live shim errdefs.ErrFailedPrecondition.
	Attach(ctx context.Context, id string, req AttachRequest) error
}

var _ Attacher = (*OCI)(nil)

// Attach asks the container's shim for its stdio (shim.OpAttach): the shim
// holds the container's stdin and terminal, so an attach works the same
// after crind restarted. A client too slow for the output is cut off
// (shim.ErrAttachLagged).
func (o *OCI) Attach(ctx context.Context, id string, req AttachRequest) error {
	dir, err := o.known(id)
	if err != nil {
		return err
	}
	err = shim.Attach(ctx, shim.SocketPath(shimDirFor(dir)), id, shim.AttachStreams{
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Resize: req.Resize,
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shim.ErrShimGone):
		return fmt.Errorf("attach to container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("attach to container %s: %w", id, err)
}
