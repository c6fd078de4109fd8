package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// Checkpoint and restore need CRIU. A Manager asks "criu check" whether
// CRIU works on this host before it touches a container, and refuses with
// FailedPrecondition and CRIU's own words when it does not: Debian 12's
// criu 3.17 cannot read the vDSO layout of kernels from 6.13 on, which is
// this project's CI machine.

// criuProbeTTL is how long a "criu check" verdict is trusted; installing
// or upgrading criu is seen within it without a crind restart.
const criuProbeTTL = time.Minute

// CRIU runs "criu check" and keeps its verdict for a minute.
type CRIU struct {
	// mu guards at and err, and makes concurrent checks wait for one run.
	mu   sync.Mutex
	at   time.Time
	err  error
	look func(string) (string, error)
	run  func(ctx context.Context, bin string) ([]byte, error)
}

var _ CRIUChecker = (*CRIU)(nil)

// NewCRIU returns a CRIU that finds criu in $PATH.
func NewCRIU() *CRIU {
	return &CRIU{
		look: exec.LookPath,
		run: func(ctx context.Context, bin string) ([]byte, error) {
			return exec.CommandContext(ctx, bin, "check").CombinedOutput()
		},
	}
}

// Check returns nil when CRIU is installed and "criu check" passes, else
// an errdefs.ErrFailedPrecondition error saying why (CRIU's error lines).
func (p *CRIU) Check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < criuProbeTTL {
		return p.err
	}
	p.err = p.probe(ctx)
	p.at = time.Now()
	return p.err
}

func (p *CRIU) probe(ctx context.Context) error {
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
