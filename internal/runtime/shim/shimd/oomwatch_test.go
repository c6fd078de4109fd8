package shimd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOOMWatchScopeGone: with the systemd driver the container's scope
// (and its memory.events) can be gone when the shim reaps the init; the
// pod's counter then tells an OOM kill from any other SIGKILL.
func TestOOMWatchScopeGone(t *testing.T) {
	pod := t.TempDir()
	scope := filepath.Join(pod, "crin-x.scope")
	if err := os.Mkdir(scope, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(dir string, kills int) {
		t.Helper()
		data := "low 0\nhigh 0\nmax 0\noom 0\noom_kill " + string(rune('0'+kills)) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "memory.events"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(pod, 1)
	write(scope, 0)
	w := oomWatch{file: filepath.Join(scope, "memory.events")}
	// crun's scope above its subgroup, gone with it, then the pod.
	w.ancestors = []oomCounter{{file: filepath.Join(pod, "gone.scope", "memory.events")}, {file: filepath.Join(pod, "memory.events"), base: 1}}

	if w.killed(true) {
		t.Error("killed with no kill counted anywhere")
	}
	write(scope, 1)
	write(pod, 2)
	if !w.killed(false) {
		t.Error("not killed with the scope's own counter up")
	}
	if err := os.RemoveAll(scope); err != nil {
		t.Fatal(err)
	}
	if !w.killed(true) {
		t.Error("scope gone, pod's counter up, init SIGKILLed: not taken for an OOM kill")
	}
	if w.killed(false) {
		t.Error("scope gone, init not SIGKILLed: taken for an OOM kill")
	}
	write(pod, 1)
	if w.killed(true) {
		t.Error("scope gone, pod's counter unchanged: taken for an OOM kill")
	}
}
