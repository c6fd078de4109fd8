package logger

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crin-dev/crin/test/poll"
)

// TestMain runs Run when the test binary is started as the logger (the
// way a shim starts crin-logger), so Run is tested in its own process
// with its real fds.
func TestMain(m *testing.M) {
	if dir := os.Getenv("CRIN_LOGGER_TEST_DIR"); dir != "" {
		if err := Run(dir); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestURI(t *testing.T) {
	u, err := url.Parse(URI("/usr/bin/crin-logger", "/run/crin/shimv2/runc v2/abc"))
	if err != nil {
		t.Fatal(err)
	}
	// The shim runs Path with each query key and its first value as
	// arguments.
	if u.Scheme != "binary" || u.Path != "/usr/bin/crin-logger" || u.Query().Get(DirFlag) != "/run/crin/shimv2/runc v2/abc" || len(u.Query()) != 1 {
		t.Errorf("URI parses as %+v, query %v", u, u.Query())
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "ctr.log")
	meta, _ := json.Marshal(map[string]string{"log_path": logPath, "address": "unix:///x"})
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o600); err != nil {
		t.Fatal(err)
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	readyR, readyW, _ := os.Pipe()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CRIN_LOGGER_TEST_DIR="+dir)
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outR.Close()
	errR.Close()
	readyW.Close()
	// Ready: the logger closes fd 5 (the read sees EOF) after writing its
	// pid file.
	if _, err := io.ReadAll(readyR); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, PidFile)); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Fatalf("pid file after ready: %q, %v", b, err)
	}

	io.WriteString(outW, "one\n")
	io.WriteString(errW, "oops\n")
	waitFor(t, logPath, "stderr F oops\n")
	// Rotation: rename, SIGUSR1, the next line goes to a new file.
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, logPath, "")
	io.WriteString(outW, "two\nno newline")
	outW.Close()
	errW.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("logger: %v: %s", err, stderr.String())
	}
	old, _ := os.ReadFile(logPath + ".1")
	cur, _ := os.ReadFile(logPath)
	if !strings.Contains(string(old), " stdout F one\n") || strings.Contains(string(old), "two") {
		t.Errorf("rotated log:\n%s", old)
	}
	if !strings.HasSuffix(string(cur), " stdout P no newline\n") || !strings.Contains(string(cur), " stdout F two\n") {
		t.Errorf("log after reopen:\n%s", cur)
	}
}

// TestRunStopsOnSIGTERM: a background process may hold the output open
// forever; the shim's SIGTERM at the task's delete must end the logger.
func TestRunStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	meta, _ := json.Marshal(map[string]string{"log_path": ""})
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), meta, 0o600); err != nil {
		t.Fatal(err)
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	defer outW.Close()
	defer errW.Close()
	readyR, readyW, _ := os.Pipe()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CRIN_LOGGER_TEST_DIR="+dir)
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outR.Close()
	errR.Close()
	readyW.Close()
	_, _ = io.ReadAll(readyR)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("logger after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("logger did not stop after SIGTERM while its pipes stayed open")
	}
}

func waitFor(t *testing.T, path, want string) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("%s holds %q", path, want), func() (bool, string) {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), want), fmt.Sprintf("%q, %v", b, err)
	})
}
