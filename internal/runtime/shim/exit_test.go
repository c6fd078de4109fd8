package shim

import (
	"strings"
	"testing"
)

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
