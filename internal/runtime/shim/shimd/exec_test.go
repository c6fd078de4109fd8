package shimd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/shim"
	"github.com/crin-dev/crin/test/poll"
)

// fakeRuntime is an OCI runtime's "exec --detach" for unit tests: it runs
// the process file (read before it returns, as a runtime does) as a shell script in the background, with the
// runtime's own stdio (stdin too: a shell would give it /dev/null), writes its pid and exits; a process file that
// starts with FAIL makes it fail the way runc does, with a JSON log.
const fakeRuntime = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	--process) proc=$2; shift;;
	--pid-file) pidf=$2; shift;;
	--log) log=$2; shift;;
	esac
	shift
done
if [ "$(head -c 4 "$proc")" = FAIL ]; then
	echo '{"level":"error","msg":"exec failed: no such binary"}' >>"$log"
	exit 1
fi
script=$(cat "$proc")
exec 3<&0
sh -c "$script" <&3 3<&- &
echo $! >"$pidf"
`

// execShim serves one running container whose exec sessions use
// fakeRuntime, with the test process as the subreaper of the processes
// they start. It returns the container, its dir and the socket.
func execShim(t *testing.T) (*ctr, string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte(fakeRuntime), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	rp := newReaper()
	rp.run()
	t.Cleanup(func() {
		rp.stop()
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	})
	l, sock := listenTemp(t)
	logw, _ := crilog.Open("", crilog.Options{})
	c := newCtr(slog.New(slog.DiscardHandler), testID, 1, time.Now(), logw, nil)
	c.state = shim.StateRunning
	c.cfg = ctrConfig{ID: testID, Dir: dir, Runtime: bin, RuntimeRoot: dir}
	c.rp = rp
	servePod(t, l, nil, c)
	return c, dir, sock
}

// execFilesIn writes script as an exec's process file in dir.
func execFilesIn(t *testing.T, dir, script string) shim.ExecOptions {
	t.Helper()
	f, err := os.CreateTemp(dir, execFilePrefix+"*.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(script); err != nil {
		t.Fatal(err)
	}
	f.Close()
	base := strings.TrimSuffix(f.Name(), ".json")
	return shim.ExecOptions{Process: f.Name(), PidFile: base + ".pid", Log: base + ".log"}
}

// TestExecSession runs processes through shim.OpExec: their output comes
// back apart, their input arrives, their exit code is the last word, and
// the shim removes the exec's files once the process is gone.
func TestExecSession(t *testing.T) {
	_, dir, sock := execShim(t)
	tests := []struct {
		name           string
		script, stdin  string
		stdout, stderr string
		code           int32
	}{
		{name: "output and exit code", script: "echo out; echo err >&2; exit 5", stdout: "out\n", stderr: "err\n", code: 5},
		{name: "stdin", script: "read x; echo got $x", stdin: "hi\n", stdout: "got hi\n"},
		{name: "killed", script: "kill -9 $$", code: 137},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := execFilesIn(t, dir, tc.script)
			stdout, stderr := &syncBuffer{}, &syncBuffer{}
			streams := shim.ExecStreams{Stdout: stdout, Stderr: stderr}
			if tc.stdin != "" {
				streams.Stdin = strings.NewReader(tc.stdin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code, err := shim.Exec(ctx, sock, testID, o, streams)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if code != tc.code || stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("Exec = %d, stdout %q, stderr %q; want %d, %q, %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			for _, f := range []string{o.Process, o.PidFile, o.Log} {
				if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("exec file %s left: %v", f, err)
				}
			}
		})
	}
}

// TestExecSessionEnds: the process dies with its session when the client
// gives up (its output so far still arrives), and with its container.
func TestExecSessionEnds(t *testing.T) {
	c, dir, sock := execShim(t)
	t.Run("client gives up", func(t *testing.T) {
		out := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := shim.Exec(ctx, sock, testID, execFilesIn(t, dir, "echo $$; exec sleep 1000"), shim.ExecStreams{Stdout: out})
			res <- err
		}()
		var pid int
		poll.Until(t, time.Minute, "the process reports its pid", func() (bool, string) {
			pid, _ = strconv.Atoi(strings.TrimSpace(out.String()))
			return pid > 0, out.String()
		})
		cancel()
		select {
		case err := <-res:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Exec after cancel = %v, want context.Canceled", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("Exec did not return after its ctx ended")
		}
		poll.Until(t, time.Minute, "the process is killed and reaped", func() (bool, string) {
			err := unix.Kill(pid, 0)
			return errors.Is(err, unix.ESRCH), ""
		})
		poll.Until(t, time.Minute, "the session ends", func() (bool, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.execs) == 0, ""
		})
	})
	t.Run("client gives up while its input waits", func(t *testing.T) {
		// The process reads no input: the shim's write of it blocks
		// once the pipe is full, and the client leaving must still be
		// noticed.
		out := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := shim.Exec(ctx, sock, testID, execFilesIn(t, dir, "echo $$; exec sleep 1000"),
				shim.ExecStreams{Stdin: bytes.NewReader(make([]byte, 4<<20)), Stdout: out})
			res <- err
		}()
		var pid int
		poll.Until(t, time.Minute, "the process reports its pid", func() (bool, string) {
			pid, _ = strconv.Atoi(strings.TrimSpace(out.String()))
			return pid > 0, out.String()
		})
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Errorf("Exec after cancel = %v, want context.Canceled", err)
		}
		poll.Until(t, time.Minute, "the process is killed and reaped", func() (bool, string) {
			err := unix.Kill(pid, 0)
			return errors.Is(err, unix.ESRCH), ""
		})
		poll.Until(t, time.Minute, "the session ends", func() (bool, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.execs) == 0, ""
		})
	})
	t.Run("container exits", func(t *testing.T) {
		res := make(chan int32, 1)
		go func() {
			code, err := shim.Exec(context.Background(), sock, testID, execFilesIn(t, dir, "exec sleep 1000"), shim.ExecStreams{})
			if err != nil {
				t.Error(err)
			}
			res <- code
		}()
		poll.Until(t, time.Minute, "the exec runs", func() (bool, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.execs) == 1, ""
		})
		// As the init's exit does; a kill that comes before the
		// process started is kept for it.
		c.killExecs()
		select {
		case code := <-res:
			if code != 137 {
				t.Errorf("exit code %d, want 137 (SIGKILL)", code)
			}
		case <-time.After(time.Minute):
			t.Fatal("the exec outlived its container")
		}
		if _, err := shim.Exec(context.Background(), sock, testID, execFilesIn(t, dir, "true"), shim.ExecStreams{}); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("exec in an exiting container = %v, want FailedPrecondition", err)
		}
	})
}

// TestExecRefused: requests the shim refuses before running anything, and
// a runtime that fails to start the process.
func TestExecRefused(t *testing.T) {
	c, dir, sock := execShim(t)
	ctx := context.Background()
	good := execFilesIn(t, dir, "true")
	outside := good
	outside.PidFile = filepath.Join(os.TempDir(), filepath.Base(good.PidFile))
	tests := []struct {
		name string
		id   string
		o    shim.ExecOptions
		is   func(error) bool
	}{
		{"unknown container", "zz", good, errdefs.IsNotFound},
		{"file outside the container", testID, outside, errdefs.IsInvalidArgument},
		{"relative file", testID, shim.ExecOptions{Process: "p.json", PidFile: good.PidFile, Log: good.Log}, errdefs.IsInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := shim.Exec(ctx, sock, tc.id, tc.o, shim.ExecStreams{}); !tc.is(err) {
				t.Errorf("Exec = %v, want another class", err)
			}
		})
	}
	if _, err := shim.Do(ctx, sock, shim.Request{Op: shim.OpExec, ID: testID}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("exec without options = %v, want InvalidArgument", err)
	}

	code, err := shim.Exec(ctx, sock, testID, execFilesIn(t, dir, "FAIL"), shim.ExecStreams{})
	if err == nil || !strings.Contains(err.Error(), "no such binary") || errdefs.IsFailedPrecondition(err) {
		t.Errorf("Exec with a failing runtime = %d, %v; want the runtime's message", code, err)
	}

	c.mu.Lock()
	c.state = shim.StateStopped
	c.mu.Unlock()
	if _, err := shim.Exec(ctx, sock, testID, good, shim.ExecStreams{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("exec in a stopped container = %v, want FailedPrecondition", err)
	}
}

// TestWatchSince: a status the reaper kept for a pid nobody watched goes
// to a watcher of a process started before it was reaped, never to one of
// a later process with the same pid.
func TestWatchSince(t *testing.T) {
	tests := []struct {
		name    string
		started time.Duration // when the watched process started, from the reap
		want    bool          // the kept status is its
	}{
		{"started before the reap", -time.Second, true},
		{"started after the reap", time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &reaper{waiters: map[int]func(unix.WaitStatus){}, unclaimed: map[int]reaped{}}
			r.keepUnclaimed(42, unix.WaitStatus(7<<8))
			got := false
			r.watch(42, r.unclaimed[42].at.Add(tc.started), func(unix.WaitStatus) { got = true })
			if got != tc.want {
				t.Errorf("watcher got the kept status: %v, want %v", got, tc.want)
			}
			if _, waiting := r.waiters[42]; waiting == tc.want {
				t.Errorf("watcher registered: %v, want %v", waiting, !tc.want)
			}
		})
	}
}
