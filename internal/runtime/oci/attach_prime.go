package oci

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// attachPrimer makes the kernel ready for the OCI runtime's next cgroup
// attach, ahead of the runtime.
//
// Moving a process into a cgroup (a write to cgroup.procs) takes the
// kernel's cgroup_threadgroup_rwsem for writing, a per-CPU rwsem. When
// no writer took it within the last RCU grace period, the writer first
// waits for a whole grace period (rcu_sync_enter); once one has, writers
// that follow within a grace period of the last one do not wait. On an
// idle node a grace period lasts milliseconds: here (2 vCPUs, HZ=250) a
// cold write took 8 ms p50 (up to 24), a warm one 0.06 ms. Every runc
// create, run and exec writes there to put its process in the
// container's cgroups, so a runtime started when no attach happened
// lately pays that wait, more than once in a run: `runc run --detach`
// took 28.7 ms p50 cold and 14.6 ms right after an attach elsewhere
// (bench/README.md, "The cgroup attach and RCU").
//
// prime pays the wait where it costs nothing: it moves a process that
// crind started and nobody else moves (the pod's crin-shim) into the
// cgroup it is already in, a migration that changes nothing but takes
// the same lock, on a goroutine, while crind goes on with the request.
// By the time the runtime attaches, the grace period has passed or is
// under way. The process's cgroup is read from /proc/<pid>/cgroup just
// before, so even a stale pid (its process gone, the pid reused) only
// moves some process to where it already is.
type attachPrimer struct {
	log *slog.Logger
	// procs finds the cgroup.procs file of pid's own cgroup; a field so
	// that unit tests need no cgroup file system.
	procs func(pid int) (string, error)

	// mu guards busy, off and closed; wg counts the goroutine in flight.
	mu     sync.Mutex
	busy   bool // a prime is in flight: a second one would wait on it
	off    bool // the cgroup files cannot be written here: never again
	closed bool
	wg     sync.WaitGroup
}

func newAttachPrimer(log *slog.Logger) *attachPrimer {
	return &attachPrimer{log: log, procs: ownCgroupProcs}
}

// prime starts a no-op migration of the process pid returns (nothing
// when it returns 0), unless one is in flight, and returns at once; pid
// runs on the goroutine, off the request's path.
func (p *attachPrimer) prime(pid func() int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.busy || p.off || p.closed {
		p.mu.Unlock()
		return
	}
	p.busy = true
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		off := false
		if n := pid(); n > 0 {
			off = p.migrate(n)
		}
		p.mu.Lock()
		p.busy = false
		p.off = p.off || off
		p.mu.Unlock()
	}()
}

// migrate writes pid to its own cgroup's cgroup.procs. It reports true
// when priming cannot work on this node (no writable cgroup file system),
// so that prime stops trying.
func (p *attachPrimer) migrate(pid int) (off bool) {
	path, err := p.procs(pid)
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			// The write's outcome is not checked: a process that exited
			// meanwhile (ESRCH) only means no prime this time (6.18 looks
			// the process up before it takes the lock).
			_, _ = f.WriteString(strconv.Itoa(pid))
			_ = f.Close()
			return false
		}
	}
	if errors.Is(err, fs.ErrNotExist) && !alive(pid) {
		return false
	}
	p.log.Debug("cgroup attach priming off", "pid", pid, "error", err)
	return true
}

// close waits for a prime in flight and makes later ones do nothing.
func (p *attachPrimer) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// ownCgroupProcs returns the cgroup.procs file of pid's cgroup in one
// hierarchy: the first cgroup v1 controller hierarchy mounted under
// cgroupRoot, else the unified (v2) one. The lock is the same for
// every hierarchy, so any will do.
func ownCgroupProcs(pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	return cgroupProcsIn(cgroupRoot, b)
}

// cgroupProcsIn picks the file from the content of a /proc/<pid>/cgroup
// file, with cgroup file systems mounted under root.
func cgroupProcsIn(root string, procCgroup []byte) (string, error) {
	var unified string
	sc := bufio.NewScanner(bytes.NewReader(procCgroup))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if ctrls == "" {
			unified = filepath.Join(root, path, "cgroup.procs")
			continue
		}
		if strings.HasPrefix(ctrls, "name=") {
			continue
		}
		// A mount named for the whole list (cpu,cpuacct), else for its
		// first controller.
		for _, dir := range []string{ctrls, strings.Split(ctrls, ",")[0]} {
			p := filepath.Join(root, dir, path, "cgroup.procs")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if unified != "" {
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
			return unified, nil
		}
	}
	return "", fs.ErrNotExist
}
