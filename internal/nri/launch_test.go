package nri

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/poll"
)

// daemonEnv names the variable that turns the test binary into a stand-in
// for crind (see runTestDaemon).
const daemonEnv = "CRIN_NRI_TEST_DAEMON"

// runTestDaemon starts an adaptation with the plugins and configs in
// dir/plugins and dir/conf, prints "ready" and runs until killed.
func runTestDaemon(dir string) int {
	cfg := DefaultConfig()
	cfg.PluginPath = filepath.Join(dir, "plugins")
	cfg.PluginConfigPath = filepath.Join(dir, "conf")
	cfg.DisableConnections = true
	cfg.DefaultValidator.Enable = false
	a, err := New(cfg, &fakeEngine{}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := a.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	for {
		time.Sleep(time.Hour)
	}
}

// pluginPID returns the pid a test plugin configured with pid=1 recorded.
func pluginPID(t *testing.T, out string) int {
	t.Helper()
	for _, l := range waitLines(t, out, "Synchronized") {
		if v, ok := strings.CutPrefix(l, "pid "); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			// Whatever the test finds, the plugin must not outlive it.
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			return pid
		}
	}
	t.Fatalf("plugin recorded no pid in %s", out)
	return 0
}

// alive reports whether pid runs; a zombie (killed, not reaped yet by
// whoever inherited it) does not.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func waitDead(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	poll.Until(t, within, fmt.Sprintf("plugin process %d gone", pid), func() (bool, string) {
		return !alive(pid), "it still runs"
	})
}

func TestStopKillsPluginIgnoringSIGTERM(t *testing.T) {
	e := newEnv(t, nil)
	out := e.outFile("stubborn")
	e.install(pluginBin, "10-stubborn", "out="+out+"\npid=1\nignore-term=1")
	const grace = 700 * time.Millisecond
	e.start(WithShutdownGrace(grace))
	waitPlugin(t, e.a, "10-stubborn", StateReady)
	pid := pluginPID(t, out)

	start := time.Now()
	e.stop()
	took := time.Since(start)
	if alive(pid) {
		t.Fatalf("plugin process %d outlived Stop", pid)
	}
	// It was told to shut down, lingered past SIGTERM and was killed only
	// once the grace period ran out.
	waitLines(t, out, "Shutdown")
	if took < grace {
		t.Errorf("Stop took %s, less than the %s grace period the plugin should have had", took, grace)
	}
}

func TestLaunchedPluginDiesWithDaemon(t *testing.T) {
	e := newEnv(t, nil) // for its directories only
	out := e.outFile("orphan")
	e.install(pluginBin, "10-orphan", "out="+out+"\npid=1\nlinger=1")

	daemon := exec.Command(os.Args[0], "-test.run=^$")
	daemon.Env = append(os.Environ(), daemonEnv+"="+e.dir)
	stdout, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	daemon.Stderr = &stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("daemon said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("test daemon: %v\n%s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("test daemon not ready")
	}
	pid := pluginPID(t, out)

	// A crash of crind: no Stop, no SIGTERM to the plugin, its connection
	// just goes away, which a lingering plugin ignores.
	if err := daemon.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := daemon.Wait(); err == nil || !errors.As(err, new(*exec.ExitError)) {
		t.Fatalf("daemon exit: %v", err)
	}
	waitDead(t, pid, 30*time.Second)
}

// A plugin installed as a symlink to its binary is found; an entry that
// cannot run is skipped, a dangling link included.
func TestDiscoverFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "real-plugin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(dir, "plugins")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"10-linked": bin, "20-dangling": filepath.Join(dir, "nope")} {
		if err := os.Symlink(target, filepath.Join(plugins, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(plugins, "30-noexec"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(plugins, "40-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.PluginPath = plugins
	a, err := New(cfg, &fakeEngine{}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].id() != "10-linked" {
		t.Errorf("discovered %v, want only 10-linked", got)
	}
}
