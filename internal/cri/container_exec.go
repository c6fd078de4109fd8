package cri

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// execOutputLimit caps what ExecSync keeps of each stream (kubelet's probe
// limit is far below this).
const execOutputLimit = 16 << 20

// ExecSync runs a command in a running container and returns its output and
// exit code. A timeout that expires is DeadlineExceeded.
func (s *Service) ExecSync(ctx context.Context, r *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := s.getContainerExact(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if len(r.GetCmd()) == 0 {
		return nil, fmt.Errorf("cmd: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	if r.GetTimeout() < 0 {
		return nil, fmt.Errorf("timeout %d: must not be negative: %w", r.GetTimeout(), errdefs.ErrInvalidArgument)
	}
	rec, rt, err := s.running(c)
	if err != nil {
		return nil, err
	}
	res, err := rt.Exec(ctx, rec.ID, runtime.ExecRequest{
		Args:      r.GetCmd(),
		Timeout:   seconds(r.GetTimeout()),
		MaxOutput: execOutputLimit,
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("exec in %s: command timed out after %ds: %w", rec.ID, r.GetTimeout(), context.DeadlineExceeded)
	}
	if err != nil {
		return nil, fmt.Errorf("exec in %s: %w", rec.ID, err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, nil
}
