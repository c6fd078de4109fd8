package cri

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
			p := &criuProbe{
				look: func(string) (string, error) { return "/usr/sbin/criu", tc.look },
				run: func(context.Context, string) ([]byte, error) {
					runs++
					return []byte(tc.out), tc.runErr
				},
			}
			for range 2 {
				err := p.check(context.Background())
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

func TestCheckOutputPath(t *testing.T) {
	for p, ok := range map[string]bool{"": false, "rel/x.tar": false, "/abs/x.tar": true, "/a\x00b": false} {
		err := checkOutputPath("location", p)
		if (err == nil) != ok || (err != nil && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "location"))) {
			t.Errorf("checkOutputPath(%q) = %v", p, err)
		}
	}
}
