// Package logger is the output logger of shimv2 containers: a small
// process a containerd shim v2 runtime starts for each container through
// its "binary" stdio scheme (binary:///path/crin-logger?-dir=<bundle>).
// The shim hands it the container's stdout and stderr pipes as fds 3 and
// 4 and a readiness pipe as fd 5; it writes the CRI log with crin-shim's
// writer. It is the shim's child, not crind's, so a container keeps
// logging while crind is down. For a container with stdin and no
// terminal, whose output the shim copies only into fifos, crind starts it
// the same way on the fifos, in a session of its own.
//
// It imports little on purpose: one runs per container.
package logger

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/runtime/crilog"
)

// DirFlag precedes the bundle dir on the logger's command line.
const DirFlag = "-dir"

// PidFile names the logger's pid file in the bundle.
const PidFile = "logger.pid"

// drainWait is how long the logger keeps reading after the shim asked it
// to stop (SIGTERM at the task's delete): a background process of the
// container may hold the output open forever.
const drainWait = time.Second

// flushDelay is how long a piece of a line waits for its newline before
// it is logged as a partial record: a prompt reaches an attached client
// (which follows the log) after at most this.
const flushDelay = 100 * time.Millisecond

// URI is the stdout (and stderr) URI that has the shim run the logger
// binary for the container whose bundle is dir.
func URI(binary, dir string) string {
	u := url.URL{Scheme: "binary", Path: binary, RawQuery: url.Values{DirFlag: {dir}}.Encode()}
	return u.String()
}

// Run copies fds 3 and 4 into the CRI log named by the bundle's meta.json
// ("log_path", opened beneath "log_root" when set, and kept under
// "log_max" bytes by itself when that is set; empty discards) until
// both end, reopens the log on SIGUSR1 and, on SIGTERM, stops once both
// are drained (at most drainWait later). It writes its pid to PidFile and
// then closes fd 5 to tell the shim it is ready.
func Run(dir string) error {
	var meta struct {
		LogPath string `json:"log_path"`
		LogRoot string `json:"log_root"`
		LogMax  int64  `json:"log_max"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return fmt.Errorf("decode meta: %w", err)
	}
	lw, err := crilog.Open(meta.LogPath, crilog.Options{Root: meta.LogRoot, MaxSize: meta.LogMax})
	if err != nil {
		return err
	}
	defer lw.Close()
	names := []string{crilog.StreamStdout, crilog.StreamStderr}
	var streams []*os.File
	for i, name := range names {
		// Non-blocking, so reads go through the poller and can be given
		// a deadline.
		if err := unix.SetNonblock(3+i, true); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		streams = append(streams, os.NewFile(uintptr(3+i), name))
	}
	if err := os.WriteFile(filepath.Join(dir, PidFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGUSR1, unix.SIGTERM)
	if ready := os.NewFile(5, "ready"); ready != nil {
		_ = ready.Close()
	}

	var wg sync.WaitGroup
	readers := make([]*crilog.FlushReader, len(streams))
	for i, f := range streams {
		readers[i] = crilog.NewFlushReader(f, flushDelay)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = lw.Copy(names[i], readers[i])
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
			stopAfterDrain(streams, readers)
		}
	}
}

// stopAfterDrain ends the copies from streams once nothing is left in
// them to read, or after drainWait. A logger crind started holds its
// fifos open for writing too, so it never reads their end.
func stopAfterDrain(streams []*os.File, readers []*crilog.FlushReader) {
	deadline := time.Now().Add(drainWait)
	for _, x := range readers {
		x.Stop(deadline)
	}
	go func() {
		for time.Now().Before(deadline) {
			if drained(streams) {
				for _, x := range readers {
					x.Stop(time.Now())
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// drained reports whether no stream has bytes waiting (FIONREAD). What a
// copy already read is still written: a deadline ends only later reads.
func drained(streams []*os.File) bool {
	for _, f := range streams {
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		n := 0
		_ = rc.Control(func(fd uintptr) {
			n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
		})
		if err == nil && n > 0 {
			return false
		}
	}
	return true
}
