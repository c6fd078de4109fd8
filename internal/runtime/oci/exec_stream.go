package oci

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

var _ runtime.StreamExecer = (*Runtime)(nil)

// ExecStream has the container's shim run the process (see execInShim)
// with the caller's streams: pipes the shim holds, or, with TTY, the
// terminal the runtime made for the process, whose master the shim holds
// (input is typed into it, its output is all stdout, resizes are applied
// to it). When ctx ends, the shim kills the process.
func (o *Runtime) ExecStream(ctx context.Context, id string, req runtime.StreamExecRequest) (int32, error) {
	if len(req.Args) == 0 {
		return 0, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	streams := shim.ExecStreams{Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Resize: req.Resize}
	if req.TTY {
		streams.Stderr = nil
	}
	return o.execInShim(ctx, id, req.Args, req.TTY, streams)
}
