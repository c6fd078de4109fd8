package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestCRIUProbe(t *testing.T) {
	vdso := "(00.005) Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\n(00.005) Error (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed\n"
	for _, tc := range []struct {
		name    string
		look    error
		out     string
		runErr  error
		wantErr string
	}{
		{name: "works", out: "Looks good.\n"},
		{name: "not installed", look: errors.New("not found"), wantErr: "criu is not installed"},
		{name: "broken on this kernel", out: vdso, runErr: errors.New("exit status 1"), wantErr: "Unexpected rt vDSO area bounds"},
		{name: "no output", runErr: errors.New("signal: killed"), wantErr: "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			p := &CRIU{
				look: func(string) (string, error) { return "/usr/sbin/criu", tc.look },
				run: func(context.Context, string) ([]byte, error) {
					runs++
					return []byte(tc.out), tc.runErr
				},
			}
			for range 2 {
				err := p.Check(context.Background())
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("check: %v", err)
					}
					continue
				}
				if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("check: %v; want FailedPrecondition saying %q", err, tc.wantErr)
				}
			}
			if tc.look == nil && runs != 1 {
				t.Errorf("criu check ran %d times for two calls within the TTL", runs)
			}
		})
	}
}

func TestCRIUSummaryIsBounded(t *testing.T) {
	long := strings.Repeat("Error x\n", 500)
	if s := criuSummary([]byte(long), errors.New("exit status 1")); len(s) > 1024+3 || !strings.HasPrefix(s, "Error x; Error x") {
		t.Errorf("criuSummary of 500 error lines: %d bytes, %.40q", len(s), s)
	}
}

// TestStatus: verbose Status lists the ready handlers whose runtime can
// checkpoint, and CRIU's verdict.
func TestStatus(t *testing.T) {
	e := newEnv(t)
	st := e.m.Status(t.Context(), []string{"kata", "nope", "runc"})
	if !st.Available || st.Reason != "" || len(st.Handlers) != 1 || st.Handlers[0] != "runc" || !st.RestoreFromArchives {
		t.Errorf("Status %+v; want available, handlers [runc], restoring from archives", st)
	}
	e.criuErr = errors.New("criu is not installed")
	if st := e.m.Status(t.Context(), nil); st.Available || st.Reason != "criu is not installed" || st.Handlers == nil {
		t.Errorf("Status without CRIU %+v", st)
	}
}
