package podenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/store"
)

// NewNetNS creates the network namespace of pod id, without any process
// in it, pinned at NetNSPath(id). An existing pin is
// errdefs.ErrAlreadyExists. On error nothing is left.
func (e *Env) NewNetNS(id string) error {
	if _, err := e.c.Pinner.NewNetNS(e.c.NetNSDir, id); err != nil {
		return fmt.Errorf("create network namespace: %w", err)
	}
	return nil
}

// RemoveNetNS unpins the network namespace pinned at path and removes the
// file; a missing one is fine.
func (e *Env) RemoveNetNS(path string) error { return e.c.Pinner.RemoveNetNS(path) }

// PinPodNamespaces pins the infra process's (rec.Pid) IPC and UTS
// namespaces, and its PID namespace when the pod shares one, unless the
// pod uses the host's, and records their paths in rec: containers join
// by those paths only. The network namespace is pinned before the infra
// starts (NewNetNS).
func (e *Env) PinPodNamespaces(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) error {
	kinds := podNamespaceKinds(cfg)
	if len(kinds) == 0 {
		return nil
	}
	paths, err := e.c.Pinner.Pin(e.NSDir(rec.ID), rec.Pid, kinds)
	if err != nil {
		return fmt.Errorf("pin pod namespaces: %w", err)
	}
	rec.IPCNS, rec.UTSNS, rec.PIDNS = paths["ipc"], paths["uts"], paths["pid"]
	return nil
}

// podNamespaceKinds are the namespaces of pod cfg that crind pins besides
// the network one: UTS with a pod network (Kubernetes ties the two), IPC
// unless the pod uses the node's, PID when the pod shares one.
func podNamespaceKinds(cfg *runtimeapi.PodSandboxConfig) []string {
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	var kinds []string
	if ns.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		kinds = append(kinds, "uts")
	}
	if ns.GetIpc() != runtimeapi.NamespaceMode_NODE {
		kinds = append(kinds, "ipc")
	}
	if ns.GetPid() == runtimeapi.NamespaceMode_POD {
		kinds = append(kinds, "pid")
	}
	return kinds
}

// NewPodNamespaces makes the IPC and UTS namespaces of a pod without an
// infra process (the UTS one with the pod's hostname) and pins them, and
// records their paths in rec. The pins keep them alive: no process need
// be in them until the first container joins.
func (e *Env) NewPodNamespaces(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) error {
	kinds := podNamespaceKinds(cfg)
	if len(kinds) == 0 {
		return nil
	}
	paths, err := e.c.Pinner.New(e.NSDir(rec.ID), kinds, cfg.GetHostname())
	if err != nil {
		return fmt.Errorf("make pod namespaces: %w", err)
	}
	rec.IPCNS, rec.UTSNS = paths["ipc"], paths["uts"]
	return nil
}

// UnpinPodNamespaces removes the pins of pod id but its network
// namespace's; already gone is fine. The paths stay in the pod's record:
// they tell what the pod had.
func (e *Env) UnpinPodNamespaces(id string) error {
	return e.c.Pinner.Unpin(e.NSDir(id))
}

// LostPin is the first of pod rec's namespace pins that is no longer a
// namespace (the node rebooted, the state dir was a tmpfs), or "".
func (e *Env) LostPin(rec *store.Sandbox) string {
	for _, p := range []string{rec.NetNS, rec.IPCNS, rec.UTSNS} {
		if p != "" && !e.c.Pinner.Pinned(p) {
			return p
		}
	}
	return ""
}

// SweepPins removes the namespace pins of pods that podKnown does not
// know, and the network namespace pins no pod or container known knows.
// Failures are logged.
func (e *Env) SweepPins(ctx context.Context, podKnown, known func(id string) bool) {
	if ents, err := os.ReadDir(e.c.NSDir); err == nil {
		for _, ent := range ents {
			if !podKnown(ent.Name()) {
				if err := e.c.Pinner.Unpin(filepath.Join(e.c.NSDir, ent.Name())); err != nil {
					e.log.WarnContext(ctx, "remove orphaned namespace pins", "pod_id", ent.Name(), "error", err)
				}
			}
		}
	}
	if ents, err := os.ReadDir(e.c.NetNSDir); err == nil {
		for _, ent := range ents {
			if !known(ent.Name()) {
				if err := e.c.Pinner.RemoveNetNS(filepath.Join(e.c.NetNSDir, ent.Name())); err != nil {
					e.log.WarnContext(ctx, "remove orphaned netns", "netns", ent.Name(), "error", err)
				}
			}
		}
	}
}

// Pinner pins a pod's namespaces as files, so containers join them by a
// path that can never come to name another pod's (a pid can be reused).
// Config.Pinner is nil in production: the bind-mount pinner below.
type Pinner interface {
	// Pin makes dir/<kind> a pin of each listed namespace ("ipc", "uts",
	// "pid") of the process pid, and returns kind -> path. On error
	// nothing is left.
	Pin(dir string, pid int, kinds []string) (map[string]string, error)
	// New creates a namespace of each listed kind ("ipc", "uts") without
	// any process in it, pins it at dir/<kind> and returns kind -> path;
	// a new UTS namespace gets hostname ("": the node's is kept). On
	// error nothing is left.
	New(dir string, kinds []string, hostname string) (map[string]string, error)
	// Pinned reports whether path is a pinned namespace (it is gone after
	// a reboot, say, while the pod's record is not).
	Pinned(path string) bool
	// Unpin removes every pin in dir and dir itself; a missing dir is fine.
	Unpin(dir string) error
	// NewNetNS creates a network namespace without any process in it,
	// pinned at dir/name, and returns its path; an existing dir/name is
	// errdefs.ErrAlreadyExists. On error nothing is left.
	NewNetNS(dir, name string) (string, error)
	// RemoveNetNS unpins the network namespace at path and removes the
	// file; a missing one is fine.
	RemoveNetNS(path string) error
}

// bindPinner pins a namespace by bind-mounting /proc/<pid>/ns/<kind> on a
// file. A bind-mounted namespace file keeps the namespace alive after its
// last process is gone (for a pid namespace: alive but unjoinable once its
// init died, which is what a dead pod's should be).
type bindPinner struct{}

var _ Pinner = bindPinner{}

func (bindPinner) Pin(dir string, pid int, kinds []string) (map[string]string, error) {
	// The pidfd proves the pid named the same process throughout: if it
	// had exited and the number been reused, the check below fails.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pin namespaces of pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	return pinAt(dir, kinds, func(paths map[string]string) error {
		if err := bindNamespaces(fmt.Sprintf("/proc/%d/ns", pid), kinds, paths); err != nil {
			return err
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err != nil || n > 0 {
			return fmt.Errorf("pin namespaces of pid %d: the process exited meanwhile: %w", pid, errdefs.ErrUnavailable)
		}
		return nil
	})
}

// pinAt is Pin's and New's common frame: it makes the pin files (see
// pinFiles) and has bind mount namespaces on them. If either fails, dir
// is unpinned: nothing is left.
func pinAt(dir string, kinds []string, bind func(paths map[string]string) error) (_ map[string]string, retErr error) {
	defer func() {
		if retErr != nil {
			_ = bindPinner{}.Unpin(dir)
		}
	}()
	paths, err := pinFiles(dir, kinds)
	if err != nil {
		return nil, err
	}
	if err := bind(paths); err != nil {
		return nil, err
	}
	return paths, nil
}

// pinFiles creates dir and in it dir/<kind> for each kind, the files
// namespaces are bind-mounted on, and returns kind -> path.
func pinFiles(dir string, kinds []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pin namespaces: %w", err)
	}
	paths := make(map[string]string, len(kinds))
	for _, kind := range kinds {
		p := filepath.Join(dir, kind)
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return nil, fmt.Errorf("pin %s namespace: %w", kind, err)
		}
		_ = f.Close()
		paths[kind] = p
	}
	return paths, nil
}

// bindNamespaces bind-mounts nsDir/<kind> (a /proc/.../ns directory) on
// paths[kind], for each kind in order.
func bindNamespaces(nsDir string, kinds []string, paths map[string]string) error {
	for _, kind := range kinds {
		src := filepath.Join(nsDir, kind)
		if err := unix.Mount(src, paths[kind], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pin %s namespace: bind mount %s: %w", kind, src, err)
		}
	}
	return nil
}

func (bindPinner) New(dir string, kinds []string, hostname string) (map[string]string, error) {
	var flags int
	for _, kind := range kinds {
		switch kind {
		case "ipc":
			flags |= unix.CLONE_NEWIPC
		case "uts":
			flags |= unix.CLONE_NEWUTS
		default:
			return nil, fmt.Errorf("new %s namespace: crind cannot make one without a process: %w", kind, errdefs.ErrInvalidArgument)
		}
	}
	return pinAt(dir, kinds, func(paths map[string]string) error {
		return cni.OnDisposableThread(func() error {
			if err := unix.Unshare(flags); err != nil {
				return fmt.Errorf("new namespaces: unshare: %w", err)
			}
			if flags&unix.CLONE_NEWUTS != 0 && hostname != "" {
				if err := unix.Sethostname([]byte(hostname)); err != nil {
					return fmt.Errorf("new uts namespace: set hostname %q: %w", hostname, err)
				}
			}
			return bindNamespaces(fmt.Sprintf("/proc/self/task/%d/ns", unix.Gettid()), kinds, paths)
		})
	})
}

func (bindPinner) Pinned(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

func (bindPinner) NewNetNS(dir, name string) (string, error) { return cni.NewNetNS(dir, name) }

func (bindPinner) RemoveNetNS(path string) error { return cni.RemoveNetNS(path) }

func (bindPinner) Unpin(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unpin namespaces: %w", err)
	}
	for _, e := range ents {
		if err := unmountAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("unpin namespaces: %w", err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("unpin namespaces: %w", err)
	}
	return nil
}
