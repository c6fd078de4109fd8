package shim

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExitRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadExit(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadExit on empty dir = %v, want ErrNotExist", err)
	}
	want := Exit{
		Pid: 42, ExitCode: 137, Signal: 9, OOMKilled: true,
		StartedAt:  time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC),
		FinishedAt: time.Date(2024, 1, 2, 3, 4, 6, 7, time.UTC),
	}
	if err := WriteExit(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadExit(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temp files left behind: %v", ents)
	}
	data, _ := os.ReadFile(filepath.Join(dir, ExitFile))
	for _, key := range []string{`"exit_code":137`, `"oom_killed":true`, `"finished_at"`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("exit file %s lacks %s", data, key)
		}
	}
}

func TestReadExitCorrupt(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ExitFile), []byte("{"), 0o600)
	if _, err := ReadExit(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadExit on corrupt file = %v, want a decode error", err)
	}
}

func TestSocketPath(t *testing.T) {
	short := "/run/crin/s/abc"
	if got := SocketPath(short); got != "/run/crin/s/abc/shim.sock" {
		t.Errorf("SocketPath(%q) = %q", short, got)
	}
	long := "/var/lib/" + strings.Repeat("d", 120)
	got := SocketPath(long)
	if len(got) > socketMaxLen || !strings.HasPrefix(got, ShortSocketDir+"/") {
		t.Errorf("SocketPath(long) = %q, want a short path in %s", got, ShortSocketDir)
	}
	if again := SocketPath(long + "/"); again != got {
		t.Errorf("SocketPath not stable: %q vs %q", got, again)
	}
	if other := SocketPath(long + "x"); other == got {
		t.Errorf("two dirs share socket %q", got)
	}
	if c := ConsoleSocketPath(short); c != "/run/crin/s/abc/console.sock" {
		t.Errorf("ConsoleSocketPath(%q) = %q", short, c)
	}
	if c := ConsoleSocketPath(long); len(c) > socketMaxLen || !strings.HasPrefix(c, ShortSocketDir+"/") || c == got {
		t.Errorf("ConsoleSocketPath(long) = %q, want a short path in %s other than the control socket %q", c, ShortSocketDir, got)
	}
}

func TestParseRuntimeLog(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"runc errors", `{"level":"warning","msg":"ignored","time":"x"}
{"level":"error","msg":"runc create failed: unable to start container process: exec: \"nope\": executable file not found in $PATH","time":"x"}
`, `runc create failed: unable to start container process: exec: "nope": executable file not found in $PATH`},
		{"plain text kept", "container not running\n", "container not running"},
		{"several joined", `{"level":"error","msg":"a"}` + "\n" + `{"level":"fatal","msg":"b"}`, "a; b"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseRuntimeLog([]byte(tc.in)); got != tc.want {
				t.Errorf("ParseRuntimeLog = %q, want %q", got, tc.want)
			}
		})
	}
}
