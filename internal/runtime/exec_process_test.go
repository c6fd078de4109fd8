package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// TestExecProcess: an exec's process is the container's with its args and
// terminal, TERM=xterm added on a terminal unless the container sets TERM.
func TestExecProcess(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		tty  bool
		want []string
	}{
		{"no terminal", []string{"A=1"}, false, []string{"A=1"}},
		{"terminal", []string{"A=1"}, true, []string{"A=1", "TERM=xterm"}},
		{"terminal, TERM set", []string{"TERM=vt100"}, true, []string{"TERM=vt100"}},
		{"TERMINFO is not TERM", []string{"TERMINFO=/x"}, true, []string{"TERMINFO=/x", "TERM=xterm"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			spec := specs.Spec{Process: &specs.Process{Args: []string{"sleep", "1"}, Env: tc.env, Cwd: "/w",
				ConsoleSize: &specs.Box{Height: 1, Width: 1}}}
			data, _ := json.Marshal(&spec)
			if err := os.WriteFile(filepath.Join(dir, shim.ConfigFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := ExecProcess(dir, []string{"ls", "-l"}, tc.tty)
			if err != nil {
				t.Fatal(err)
			}
			var p specs.Process
			if err := json.Unmarshal(out, &p); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Args, []string{"ls", "-l"}) || p.Terminal != tc.tty || p.Cwd != "/w" || p.ConsoleSize != nil || !slices.Equal(p.Env, tc.want) {
				t.Errorf("process %+v; want args [ls -l], terminal %v, cwd /w, no console size, env %v", p, tc.tty, tc.want)
			}
		})
	}
	if _, err := ExecProcess(t.TempDir(), []string{"ls"}, false); err == nil {
		t.Error("a dir without a bundle gave a process")
	}
}
