package shimv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// LoggerCommand is the argument that makes crind run as a container's
// output logger: "crind shimv2-logger <bundle dir>". The shim starts it
// (its "binary" stdio scheme) with the container's stdout and stderr as
// fds 3 and 4 and a readiness pipe as fd 5; it outlives crind, so output
// keeps reaching the CRI log while crind is down, as under crin-shim.
const LoggerCommand = "shimv2-logger"

// loggerPidFile names the logger's pid file in the bundle.
const loggerPidFile = "logger.pid"

// loggerDrainWait is how long the logger keeps reading after the shim
// asked it to stop (SIGTERM at the task's delete): a background process
// of the container may hold the output open forever.
const loggerDrainWait = time.Second

// loggerURI is the stdout URI that has the shim start crind's logger for
// the container in dir (both streams go to it).
func loggerURI(binary, dir string) string {
	u := url.URL{Scheme: "binary", Path: binary, RawQuery: url.Values{LoggerCommand: {dir}}.Encode()}
	return u.String()
}

// RunLogger is the logger's main: it copies fds 3 and 4 into the CRI log
// named in dir's meta.json with crin-shim's writer until both end,
// reopens the log on SIGUSR1 (ReopenLog) and, on SIGTERM, stops after
// loggerDrainWait. It closes fd 5 once it is ready.
func RunLogger(dir string) error {
	m, err := readMeta(dir)
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	lw, err := shim.OpenLog(m.LogPath, shim.LogOptions{})
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer lw.Close()
	var streams []*os.File
	for i, name := range []string{shim.StreamStdout, shim.StreamStderr} {
		fd := 3 + i
		// Non-blocking, so reads go through the poller and can be given
		// a deadline.
		if err := unix.SetNonblock(fd, true); err != nil {
			return fmt.Errorf("logger: %s: %w", name, err)
		}
		streams = append(streams, os.NewFile(uintptr(fd), name))
	}
	if err := os.WriteFile(filepath.Join(dir, loggerPidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGUSR1, unix.SIGTERM)
	if ready := os.NewFile(5, "ready"); ready != nil {
		_ = ready.Close()
	}

	var wg sync.WaitGroup
	for i, f := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = lw.Copy([]string{shim.StreamStdout, shim.StreamStderr}[i], f)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			return nil
		case s := <-sigs:
			if s == unix.SIGUSR1 {
				_ = lw.Reopen()
				continue
			}
			for _, f := range streams {
				_ = f.SetReadDeadline(time.Now().Add(loggerDrainWait))
			}
		}
	}
}

// loggerPid is the pid of the live logger of the container in dir; 0
// when it is gone. A pid is taken for the logger only while its command
// line names LoggerCommand and dir.
func loggerPid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, loggerPidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil || pid <= 0 {
		return 0
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !containsArgs(cmd, LoggerCommand, dir) {
		return 0
	}
	return pid
}

// containsArgs reports whether a /proc cmdline holds the two arguments in
// a row.
func containsArgs(cmdline []byte, a, b string) bool {
	return bytes.Contains(append(cmdline, 0), []byte("\x00"+a+"\x00"+b+"\x00"))
}

// waitLogger waits (at most d) until the logger of the container in dir
// has read all the container wrote, so the CRI log is whole by the time
// the container's exit is reported. The logger itself lives on until the
// task is deleted (the shim keeps the pipes' write ends till then), so
// what is waited for is the pipes being empty.
func waitLogger(ctx context.Context, dir string, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		pid := loggerPid(dir)
		if pid == 0 || pipesDrained(pid) || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pipesDrained reports whether the logger at pid has nothing left to read
// on its stdout and stderr pipes (fds 3 and 4): FIONREAD on the same
// pipes, opened through /proc.
func pipesDrained(pid int) bool {
	for _, fd := range []int{3, 4} {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			continue // gone, or not a pipe we may open: nothing to wait for
		}
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ) // FIONREAD
		f.Close()
		if err == nil && n > 0 {
			return false
		}
	}
	return true
}

// reopenLog has the logger of the container in dir reopen its log, and
// waits until the log file exists again (a rotation renamed it).
func reopenLog(ctx context.Context, dir, path string) error {
	pid := loggerPid(dir)
	if pid == 0 {
		return errLoggerGone
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		return fmt.Errorf("signal logger %d: %w", pid, err)
	}
	if path == "" {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("log %s was not reopened", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var errLoggerGone = errors.New("the container's logger is gone")
