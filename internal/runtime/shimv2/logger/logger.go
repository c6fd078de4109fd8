// Package logger is the output logger of shimv2 containers: a small
// process a containerd shim v2 runtime starts for each container through
// its "binary" stdio scheme (binary:///path/crin-logger?-dir=<bundle>).
// The shim hands it the container's stdout and stderr pipes as fds 3 and
// 4 and a readiness pipe as fd 5; it writes the CRI log with crin-shim's
// writer. It is the shim's child, not crind's, so a container keeps
// logging while crind is down.
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

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// DirFlag precedes the bundle dir on the logger's command line.
const DirFlag = "-dir"

// PidFile names the logger's pid file in the bundle.
const PidFile = "logger.pid"

// drainWait is how long the logger keeps reading after the shim asked it
// to stop (SIGTERM at the task's delete): a background process of the
// container may hold the output open forever.
const drainWait = time.Second

// URI is the stdout (and stderr) URI that has the shim run the logger
// binary for the container whose bundle is dir.
func URI(binary, dir string) string {
	u := url.URL{Scheme: "binary", Path: binary, RawQuery: url.Values{DirFlag: {dir}}.Encode()}
	return u.String()
}

// Run copies fds 3 and 4 into the CRI log named by the bundle's meta.json
// ("log_path", opened beneath "log_root" when set; empty discards) until both end, reopens the log on SIGUSR1
// and, on SIGTERM, stops after drainWait. It writes its pid to PidFile and
// then closes fd 5 to tell the shim it is ready.
func Run(dir string) error {
	var meta struct {
		LogPath string `json:"log_path"`
		LogRoot string `json:"log_root"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return fmt.Errorf("decode meta: %w", err)
	}
	lw, err := shim.OpenLog(meta.LogPath, shim.LogOptions{Root: meta.LogRoot})
	if err != nil {
		return err
	}
	defer lw.Close()
	names := []string{shim.StreamStdout, shim.StreamStderr}
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
	for i, f := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = lw.Copy(names[i], f)
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
				_ = f.SetReadDeadline(time.Now().Add(drainWait))
			}
		}
	}
}
