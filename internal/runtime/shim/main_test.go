package shim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestConfigArgsRoundTrip(t *testing.T) {
	adj := 250
	tests := []struct {
		name string
		cfg  Config
	}{
		{"full", Config{ID: "abc", Dir: "/run/crin/s/abc", Runtime: "/usr/sbin/runc", RuntimeRoot: "/run/crin/runc", LogPath: "/var/log/pods/x/0.log", OOMScoreAdj: &adj}},
		{"no log, inherited oom score", Config{ID: "abc", Dir: "/d", Runtime: "crun", RuntimeRoot: "/r"}},
		{"stdin once on a terminal", Config{ID: "abc", Dir: "/d", Runtime: "runc", RuntimeRoot: "/r", Stdin: true, StdinOnce: true, TTY: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, detached, err := parseArgs(append([]string{"-detached"}, tc.cfg.Args()...))
			if err != nil {
				t.Fatal(err)
			}
			if !detached {
				t.Error("-detached not seen")
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
		{"missing id", []string{"-dir", "/d", "-runtime", "runc", "-root", "/r"}},
		{"missing root", []string{"-id", "x", "-dir", "/d", "-runtime", "runc"}},
		{"bad oom score", []string{"-id", "x", "-dir", "/d", "-runtime", "runc", "-root", "/r", "-oom-score-adj", "lots"}},
		{"unknown flag", []string{"-id", "x", "-bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := parseArgs(tc.args); err == nil {
				t.Errorf("parseArgs(%q) succeeded", tc.args)
			}
		})
	}
}
