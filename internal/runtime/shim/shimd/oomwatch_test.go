package shimd

import (
	"log/slog"
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

// The systemd driver's cgroupsPath names the scope runc and crun make;
// its counter can be read before the start.
func TestSystemdScopeDir(t *testing.T) {
	for in, want := range map[string]string{
		"kubepods-burstable-pod12.slice:crin:abc": "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12.slice/crin-abc.scope",
		"system.slice:crin:abc":                   "system.slice/crin-abc.scope",
		"-.slice::abc":                            "abc.scope",
		":crin:abc":                               "",
		"kubepods.slice:crin:x.slice":             "",
		"kubepods.slice:crin:":                    "",
		"kube--pods.slice:crin:abc":               "",
		"kubepods:crin:abc":                       "",
		"/kubepods/abc":                           "",
		"a/b.slice:crin:abc":                      "",
	} {
		if got := systemdScopeDir(in); got != want {
			t.Errorf("systemdScopeDir(%q) = %q, want %q", in, got, want)
		}
	}
}

// A watch prepared before the start reads a cgroup that does not exist
// yet as 0, so a kill right after the start counts.
func TestOOMWatchPreparedBeforeStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctr")
	w := prepareOOMWatch(slog.New(slog.DiscardHandler), filepath.Join(dir, "memory.events"))
	if w.file == "" || w.base != 0 {
		t.Fatalf("prepared watch %+v, want the file with base 0", w)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.events"), []byte("oom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w = w.orPid(slog.New(slog.DiscardHandler), os.Getpid()); !w.killed(true) {
		t.Error("a kill counted between the start and the watch's use is not seen")
	}
}
