package shimd

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

func TestConfigArgsRoundTrip(t *testing.T) {
	adj := 250
	tests := []struct {
		name string
		cfg  shim.Config
	}{
		{"full", shim.Config{Dir: "/run/crin/s/.pod-abc", Runtime: "/usr/sbin/runc", RuntimeRoot: "/run/crin/runc", OOMScoreAdj: &adj}},
		{"inherited oom score", shim.Config{Dir: "/d", Runtime: "crun", RuntimeRoot: "/r"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseArgs(tc.cfg.Args())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.cfg, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseArgsRejects(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"missing dir", []string{"-runtime", "runc", "-root", "/r"}},
		{"missing root", []string{"-dir", "/d", "-runtime", "runc"}},
		{"bad oom score", []string{"-dir", "/d", "-runtime", "runc", "-root", "/r", "-oom-score-adj", "lots"}},
		{"unknown flag", []string{"-dir", "/d", "-bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseArgs(tc.args); err == nil {
				t.Errorf("parseArgs(%q) succeeded", tc.args)
			}
		})
	}
}
