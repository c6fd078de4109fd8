package cri

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sweep removes, on start-up and after the records are recovered, what
// no record owns and a killed OCI runtime or a crind killed mid-cleanup
// left behind (docs/recovery.md, "The sweep"): crin-shim processes (and
// their runc init children) of containers nobody knows, mounts under
// crind's dirs naming such a container or pod (a rootfs through the
// image store), pod cgroups under
// crind's cgroup parent, id-mapped mounts of pods and containers that are
// gone (internal/podenv), IP reservations of pods that are gone, and the
// dirs and rootfs of pods and containers that are gone (sweepDirs), and
// checkpoints a crind that died left unfinished, their containers thawed
// (checkpoint.Manager.Sweep). Then it
// starts the loop that retries recorded cleanup steps. Failures are
// logged: the sweep never stops crind from starting.
func (r *recovery) sweep(ctx context.Context) {
	r.sweepShims(ctx)
	r.env.SweepMounts(ctx, r.hub.knownID, func(ctx context.Context, id string) error {
		return r.images.ReleaseRootfs(ctx, id)
	})
	r.env.SweepUserNS(ctx, r.hub.knownID)
	r.env.SweepCgroups(ctx, r.hub.knownID)
	r.sweepIPAM(ctx)
	r.sweepDirs(ctx)
	r.ckpt.Sweep(ctx)
	r.hub.runCleanups()
}

// stateDirLister is a runtime backend that keeps per-container state dirs
// under one directory; its shims name their dir on their command line.
type stateDirLister interface {
	StateDir() string
}

// isID reports whether name has the form of the ids crind hands out.
func isID(name string) bool {
	if len(name) != 64 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}

// sweepShims kills crin-shim processes whose dir is in a runtime's state
// directory and belongs to no known pod or container, with their
// children (a runc init waiting for a start that never comes).
func (r *recovery) sweepShims(ctx context.Context) {
	var dirs []string
	for _, rt := range r.runtimes {
		if l, ok := rt.(stateDirLister); ok && !slices.Contains(dirs, l.StateDir()) {
			dirs = append(dirs, l.StateDir())
		}
	}
	if len(dirs) == 0 {
		return
	}
	procs := readProcs()
	for _, p := range procs {
		if filepath.Base(p.argv0) != "crin-shim" {
			continue
		}
		dir := p.flag("-dir")
		if dir == "" || !slices.Contains(dirs, filepath.Dir(dir)) {
			continue
		}
		// A pod's shim serves from "<state dir>/.pod-<pod id>"; crind
		// starts no other, so any other crin-shim there is an orphan.
		id, isPod := strings.CutPrefix(filepath.Base(dir), ".pod-")
		if isPod && r.hub.knownID(id) {
			continue
		}
		r.log.InfoContext(ctx, "killing orphaned shim", "id", id, "shim_pid", p.pid)
		killTree(procs, p.pid)
		if isPod {
			// A pod shim removes its dir as it exits; killed, it cannot.
			_ = os.RemoveAll(dir)
		}
	}
}

// proc is what the sweep reads of a process.
type proc struct {
	pid, ppid int
	argv0     string
	args      []string
}

func (p proc) flag(name string) string {
	for i, a := range p.args {
		if a == name && i+1 < len(p.args) {
			return p.args[i+1]
		}
	}
	return ""
}

func readProcs() []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		out = append(out, proc{pid: pid, ppid: ppid, argv0: args[0], args: args[1:]})
	}
	return out
}

// killTree SIGKILLs pid's descendants, then pid.
func killTree(procs []proc, pid int) {
	for _, p := range procs {
		if p.ppid == pid && p.pid != pid {
			killTree(procs, p.pid)
		}
	}
	_ = unix.Kill(pid, unix.SIGKILL)
}

// ipamSweeper is a network that can release the IP reservations of pods
// that are gone (cni.Manager).
type ipamSweeper interface {
	SweepIPAM(ctx context.Context, owned func(podID string) bool) (int, error)
}

// sweepIPAM releases the IP reservations of pods no record owns.
func (r *recovery) sweepIPAM(ctx context.Context) {
	sw, ok := r.network.(ipamSweeper)
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n, err := sw.SweepIPAM(sctx, r.hub.knownPod)
	if err != nil {
		r.log.WarnContext(ctx, "sweep ip reservations", "error", err)
	}
	if n > 0 {
		r.log.InfoContext(ctx, "released ip reservations no pod owns", "count", n)
	}
}
