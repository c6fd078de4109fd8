package shimv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/shimv2/logger"
)

// loggerPid is the pid of the live logger of the container in dir; 0
// when it is gone. A pid is taken for the logger only while its command
// line holds "-dir <dir>".
func loggerPid(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, logger.PidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil || pid <= 0 {
		return 0
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !containsArgs(cmd, logger.DirFlag, dir) {
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
		// Lstat: a link planted in its place is not the log (the logger
		// refuses to open it and keeps writing the old file).
		if st, err := os.Lstat(path); err == nil {
			if !st.Mode().IsRegular() {
				return fmt.Errorf("log %s is not a regular file: the logger did not reopen it: %w", path, crilog.ErrLogPath)
			}
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("log %s was not reopened", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var errLoggerGone = errors.New("the container's logger is gone")
