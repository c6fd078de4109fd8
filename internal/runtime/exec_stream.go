package runtime

import (
	"context"
	"io"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// TerminalSize is a terminal's size in character cells.
type TerminalSize = shim.TerminalSize

// StreamExecRequest is an interactive process to run in a container. Like
// ExecRequest, the process inherits the container's process spec with Args
// replaced.
type StreamExecRequest struct {
	Args []string
	// Stdin feeds the process; nil gives it /dev/null. Its end (EOF) closes
	// the process's stdin (without TTY; a terminal has no end of input).
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With TTY the
	// terminal carries both and Stderr is not used.
	Stdout, Stderr io.Writer
	// TTY runs the process on a new pseudo-terminal.
	TTY bool
	// Resize delivers terminal sizes (TTY only); nil means none.
	Resize <-chan TerminalSize
}

// StreamExecer is the optional capability of running interactive processes
// in a container. It is found by type assertion on a Runtime.
type StreamExecer interface {
	// ExecStream runs req in the running container id, copying its streams,
	// and returns its exit code once it exited and its output was copied.
	// A process that ran and failed is not an error. When ctx ends the
	// process is killed and the error wraps ctx.Err(). An unknown container
	// is errdefs.ErrNotFound, one that is not running
	// errdefs.ErrFailedPrecondition.
	ExecStream(ctx context.Context, id string, req StreamExecRequest) (int32, error)
}
