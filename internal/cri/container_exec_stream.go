package cri

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// Exec prepares an interactive exec in a running container and returns the
// streaming server URL the client connects to; the command runs when it
// does. An unknown container is NotFound, one that is not running
// FailedPrecondition; a request with no stream, or with both tty and
// stderr (a terminal merges the two), is InvalidArgument.
func (s *Service) Exec(ctx context.Context, r *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if err := s.streamingEnabled(); err != nil {
		return nil, err
	}
	if err := checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr()); err != nil {
		return nil, err
	}
	if len(r.GetCmd()) == 0 {
		return nil, fmt.Errorf("cmd: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	ref, rt, err := s.runningContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if _, ok := rt.(runtime.StreamExecer); !ok {
		return nil, fmt.Errorf("exec in %s: runtime cannot stream: %w", ref.ID, errdefs.ErrNotImplemented)
	}
	req := &runtimeapi.ExecRequest{
		ContainerId: ref.ID, Cmd: r.GetCmd(), Tty: r.GetTty(),
		Stdin: r.GetStdin(), Stdout: r.GetStdout(), Stderr: r.GetStderr(),
	}
	return s.stream.GetExec(req)
}

// Attach prepares an attachment to a running container's stdio and
// returns the streaming server URL. The container's shim holds its stdin
// (when the config asked for stdin) and its terminal (tty), so the client's
// input reaches the container and a terminal follows the client's size; a
// request for stdin to a container created without it is
// FailedPrecondition. Other errors are as for Exec.
func (s *Service) Attach(ctx context.Context, r *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if err := s.streamingEnabled(); err != nil {
		return nil, err
	}
	if err := checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr()); err != nil {
		return nil, err
	}
	ref, rt, err := s.runningContainer(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if r.GetStdin() && !ref.Stdin {
		return nil, fmt.Errorf("stdin: container %s was created without stdin: %w", ref.ID, errdefs.ErrFailedPrecondition)
	}
	if _, ok := rt.(runtime.Attacher); !ok {
		return nil, fmt.Errorf("attach to %s: runtime cannot attach: %w", ref.ID, errdefs.ErrNotImplemented)
	}
	req := &runtimeapi.AttachRequest{
		ContainerId: ref.ID, Tty: r.GetTty(), Stdin: r.GetStdin(),
		Stdout: r.GetStdout(), Stderr: r.GetStderr(),
	}
	return s.stream.GetAttach(req)
}

// checkStreams applies the CRI rules on the requested streams.
func checkStreams(tty, stdin, stdout, stderr bool) error {
	if !stdin && !stdout && !stderr {
		return fmt.Errorf("stdin, stdout, stderr: at least one must be requested: %w", errdefs.ErrInvalidArgument)
	}
	if tty && stderr {
		return fmt.Errorf("stderr: must not be requested with tty (a terminal carries both outputs): %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// streamingEnabled reports whether crind serves streams.
func (s *Service) streamingEnabled() error {
	if s.stream == nil {
		return fmt.Errorf("streaming is disabled (cri.stream_address is empty): %w", errdefs.ErrNotImplemented)
	}
	return nil
}
