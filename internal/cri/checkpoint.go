package cri

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/runtime"
)

// Checkpoint and restore need CRIU. crind asks "criu check" whether CRIU
// works on this host before it touches a container, and refuses with
// FailedPrecondition and CRIU's own words when it does not: Debian 12's
// criu 3.17 cannot read the vDSO layout of kernels from 6.13 on, which is
// this project's CI machine. Where CRIU works, CheckpointContainer writes
// an archive (checkpoint_archive.go) CreateContainer restores from
// (checkpoint_restore.go), and CheckpointPod writes a pod's checkpoint
// (checkpoint_pod.go) RestorePod makes a new pod from
// (checkpoint_pod_restore.go). docs/checkpoint.md tells the whole story.

// criuProbeTTL is how long a "criu check" verdict is trusted; installing
// or upgrading criu is seen within it without a crind restart.
const criuProbeTTL = time.Minute

type criuProbe struct {
	mu   sync.Mutex
	at   time.Time
	err  error
	look func(string) (string, error)
	run  func(ctx context.Context, bin string) ([]byte, error)
}

func newCRIUProbe() *criuProbe {
	return &criuProbe{
		look: exec.LookPath,
		run: func(ctx context.Context, bin string) ([]byte, error) {
			return exec.CommandContext(ctx, bin, "check").CombinedOutput()
		},
	}
}

// check returns nil when CRIU is installed and "criu check" passes, else
// a FailedPrecondition error saying why.
func (p *criuProbe) check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < criuProbeTTL {
		return p.err
	}
	p.err = p.probe(ctx)
	p.at = time.Now()
	return p.err
}

func (p *criuProbe) probe(ctx context.Context) error {
	bin, err := p.look("criu")
	if err != nil {
		return fmt.Errorf("checkpoint needs CRIU, and criu is not installed: %w", errdefs.ErrFailedPrecondition)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := p.run(cctx, bin)
	if err != nil {
		return fmt.Errorf("checkpoint needs CRIU, and %q does not work on this host: %s: %w",
			bin+" check", criuSummary(out, err), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// criuSummary keeps CRIU's error lines (it prints many), at most 1 KiB.
func criuSummary(out []byte, err error) string {
	var lines []string
	for _, l := range bytes.Split(out, []byte("\n")) {
		if s := strings.TrimSpace(string(l)); strings.HasPrefix(s, "Error") {
			lines = append(lines, s)
		}
	}
	s := strings.Join(lines, "; ")
	if s == "" {
		s = strings.TrimSpace(string(out))
	}
	if s == "" {
		s = err.Error()
	}
	if len(s) > 1024 {
		s = s[:1024] + "..."
	}
	return s
}

// CheckpointContainer writes a checkpoint archive of a running container
// to location and leaves the container running (checkpoint_archive.go).
// Bad requests are refused before CRIU is asked; a container whose
// handler cannot checkpoint, or on a terminal, is FailedPrecondition.
func (s *Service) CheckpointContainer(ctx context.Context, r *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	if err := checkOutputPath("location", r.GetLocation()); err != nil {
		return nil, err
	}
	if err := checkLocationDir("location", r.GetLocation()); err != nil {
		return nil, err
	}
	if r.GetTimeout() < 0 {
		return nil, fmt.Errorf("timeout %d: must not be negative: %w", r.GetTimeout(), errdefs.ErrInvalidArgument)
	}
	c, err := s.getContainerExact(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	ref, rt, err := s.running(c)
	if err != nil {
		return nil, err
	}
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("checkpoint container %s: its runtime handler cannot checkpoint (only handlers of type oci can): %w", ref.ID, errdefs.ErrFailedPrecondition)
	}
	if ref.TTY {
		return nil, fmt.Errorf("checkpoint container %s: it runs on a terminal, which crind does not checkpoint: %w", ref.ID, errdefs.ErrFailedPrecondition)
	}
	if err := s.criu.check(ctx); err != nil {
		return nil, fmt.Errorf("checkpoint container %s: %w", ref.ID, err)
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	release, err := s.dumping.claim(ref.ID)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.checkpointContainer(ctx, c, cp, r.GetLocation()); err != nil {
		return nil, fmt.Errorf("checkpoint container %s: %w", ref.ID, err)
	}
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// checkOutputPath requires an absolute, clean-able path.
func checkOutputPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s: must not be empty: %w", field, errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%s %q: must be an absolute path: %w", field, p, errdefs.ErrInvalidArgument)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%s %q: contains a NUL byte: %w", field, p, errdefs.ErrInvalidArgument)
	}
	return nil
}

// busySet is a set of ids, each claimed by one operation at a time.
type busySet struct {
	mu  sync.Mutex
	ids map[string]bool
}

// claim adds ids to the set, all or none: one already there is
// FailedPrecondition (another checkpoint would freeze and thaw the
// container under this one). release takes them out again.
func (b *busySet) claim(ids ...string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if b.ids[id] {
			return nil, fmt.Errorf("container %s: another checkpoint of it is in progress: %w", id, errdefs.ErrFailedPrecondition)
		}
	}
	if b.ids == nil {
		b.ids = map[string]bool{}
	}
	for _, id := range ids {
		b.ids[id] = true
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, id := range ids {
			delete(b.ids, id)
		}
	}, nil
}
