// Package podenv builds and tears down a pod's host environment: its
// directory and the files its containers mount (hostname, hosts,
// resolv.conf, /dev/shm), its namespaces pinned as files, its user
// namespace and the id-mapped mounts made with it (docs/userns.md), and
// the removal of its cgroup with whatever is left inside. It also sweeps,
// on start-up, what of these no record owns (docs/recovery.md).
//
// The hub (internal/cri) decides when; an Env does the work. An Env keeps
// no per-pod state: what it made is named by the pod's record
// (store.Sandbox) and by paths derived from the pod's id.
package podenv

import (
	"context"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/crin-dev/crin/internal/cgroup"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/topdir"
)

// Config configures an Env.
type Config struct {
	// RootDir holds per-pod files (hostname, hosts, resolv.conf, shm) in
	// RootDir/pods/<pod id>.
	RootDir string
	// NetNSDir is where pod network namespaces are pinned.
	NetNSDir string
	// NSDir is where a pod's other namespaces are pinned, in NSDir/<pod
	// id>/{ipc,uts,pid,user}; empty means "ns" beside NetNSDir.
	NSDir string
	// Pinner pins them; nil means bind mounts (tests give a fake).
	Pinner Pinner
	// UserNSDir holds the id-mapped mounts of pods in user namespaces
	// (docs/userns.md); New makes it 0711, and every directory above it
	// must let any id through. Empty: user namespaces are not offered.
	UserNSDir string
	// PauseBinary is crin-pause, which makes user namespaces.
	PauseBinary string
	// CgroupParent is used for pods that name none: a path with the
	// cgroupfs driver, a slice with systemd.
	CgroupParent string
	// CgroupDriver is how pod and container cgroups are named and made
	// (internal/cgroup); empty means cgroupfs.
	CgroupDriver cgroup.Driver
	// Units stops systemd units: the pod slices crind made and leftover
	// scopes, with the systemd driver. Nil with cgroupfs.
	Units UnitStopper
	// CgroupFS is where the cgroup hierarchies are mounted; empty means
	// /sys/fs/cgroup.
	CgroupFS string
	// Defer, if set, records a cleanup step that failed with cause, so
	// that the hub's cleanup loop retries it (the removal of a pod cgroup
	// or of id-mapped mounts).
	Defer func(ctx context.Context, c store.Cleanup, cause error)
	// Logger logs what the sweeps remove and the probe's finding; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Env makes and removes the host environment of pods.
type Env struct {
	c   Config
	log *slog.Logger
	// usernsErr is why pods cannot have user namespaces on this host
	// (the start-up probe's finding), or nil. Written only in New.
	usernsErr error
}

// New returns an Env for c. It makes the parents of the per-pod dirs and
// marks them for the ext4 allocator (package topdir), and probes once
// whether this host can run pods in user namespaces (UserNSUsable). Both
// only log what fails: crind runs without them.
func New(ctx context.Context, c Config) *Env {
	if c.NSDir == "" {
		c.NSDir = filepath.Join(filepath.Dir(c.NetNSDir), "ns")
	}
	if c.Pinner == nil {
		c.Pinner = bindPinner{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	e := &Env{c: c, log: c.Logger}
	e.markTopDirs(ctx)
	e.probeUserNS(ctx)
	return e
}

// PodDir is the directory of pod id's files.
func (e *Env) PodDir(id string) string { return filepath.Join(e.c.RootDir, "pods", id) }

// NetNSPath is where pod id's network namespace is pinned.
func (e *Env) NetNSPath(id string) string { return filepath.Join(e.c.NetNSDir, id) }

// NSDir is where the other namespaces of pod id are pinned.
func (e *Env) NSDir(id string) string { return filepath.Join(e.c.NSDir, id) }

// markTopDirs makes the parents of the per-pod dirs (the pod dirs under
// RootDir/pods, the namespace pins under NSDir) and marks them for the
// ext4 allocator (package topdir). It only costs speed when it fails, so
// that is logged, not returned.
func (e *Env) markTopDirs(ctx context.Context) {
	dirs := map[string]os.FileMode{e.c.NSDir: 0o700} // as pinFiles makes it
	if e.c.RootDir != "" {
		dirs[filepath.Join(e.c.RootDir, "pods")] = 0o711 // as PreparePodDir makes it
	}
	for d, perm := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		err := os.MkdirAll(d, perm)
		if err == nil {
			err = topdir.Mark(d)
		}
		if err != nil {
			e.log.WarnContext(ctx, "mark top dir", "dir", d, "error", err)
		}
	}
}

// deferCleanup hands a failed cleanup step to Config.Defer, if set.
func (e *Env) deferCleanup(ctx context.Context, c store.Cleanup, cause error) {
	if e.c.Defer != nil {
		e.c.Defer(ctx, c, cause)
	}
}

// isID reports whether name has the form of the ids crind hands out (64
// hex digits): the sweeps leave alone what is named otherwise.
func isID(name string) bool {
	if len(name) != 64 {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}
