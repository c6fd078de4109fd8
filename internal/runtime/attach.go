package runtime

import (
	"context"
	"io"
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
