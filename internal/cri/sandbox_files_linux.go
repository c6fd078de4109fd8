package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/store"
	"github.com/crin-dev/crin/internal/topdir"
)

// podShmSize is the size of a pod's /dev/shm tmpfs.
const podShmSize = 64 << 20

// writePodFiles writes the pod's hostname, hosts and resolv.conf into dir.
func writePodFiles(dir string, cfg *runtimeapi.PodSandboxConfig, hostNetwork bool) error {
	hostname := cfg.GetHostname()
	if hostNetwork || hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("read hostname: %w", err)
		}
		if hostname == "" {
			hostname = h
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "hostname"), []byte(hostname+"\n"), 0o644); err != nil {
		return err
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if hostNetwork {
		if b, err := os.ReadFile("/etc/hosts"); err == nil {
			hosts = string(b)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	resolv, err := resolvConf(cfg.GetDnsConfig())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), resolv, 0o644)
}

// resolvConf renders the pod's DNS config, or copies the host's when the
// pod gives none.
func resolvConf(dns *runtimeapi.DNSConfig) ([]byte, error) {
	if dns == nil || (len(dns.Servers) == 0 && len(dns.Searches) == 0 && len(dns.Options) == 0) {
		b, err := os.ReadFile("/etc/resolv.conf")
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return b, err
	}
	var sb strings.Builder
	for i, v := range dns.Servers {
		if strings.ContainsAny(v, " \t\n") {
			return nil, fmt.Errorf("dns_config.servers[%d] %q: contains whitespace: %w", i, v, errInvalid)
		}
		fmt.Fprintf(&sb, "nameserver %s\n", v)
	}
	if len(dns.Searches) > 0 {
		for i, v := range dns.Searches {
			if strings.ContainsAny(v, " \t\n") {
				return nil, fmt.Errorf("dns_config.searches[%d] %q: contains whitespace: %w", i, v, errInvalid)
			}
		}
		fmt.Fprintf(&sb, "search %s\n", strings.Join(dns.Searches, " "))
	}
	if len(dns.Options) > 0 {
		for i, v := range dns.Options {
			if strings.ContainsAny(v, " \t\n") {
				return nil, fmt.Errorf("dns_config.options[%d] %q: contains whitespace: %w", i, v, errInvalid)
			}
		}
		fmt.Fprintf(&sb, "options %s\n", strings.Join(dns.Options, " "))
	}
	return []byte(sb.String()), nil
}

// mountShm mounts the pod's /dev/shm tmpfs at path.
func mountShm(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=1777,size=%d", podShmSize)
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount shm at %s: %w", path, err)
	}
	return nil
}

// unmountAll detaches whatever is mounted at path; nothing mounted is fine.
func unmountAll(path string) error {
	for range 8 {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return nil
}

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// removePodCgroup removes the pod-level cgroup crind derived for a pod
// that named no cgroup parent (<cgroup_parent>/<pod id>, or with the
// systemd driver the slice <parent>-pod<id>.slice): runc
// removes each container's own cgroup, not this parent of them. A parent
// kubelet gave belongs to kubelet and is left alone. What is still inside
// (a container cgroup whose runtime delete was killed, a stray runc init)
// is killed and removed too; a removal that fails anyway is retried in the
// background (cleanup.go) and the error returned.
func (s *Service) removePodCgroup(rec *store.Sandbox) error {
	if rec.CgroupParent != s.layout().OwnPodParent(rec.ID) {
		return nil
	}
	return s.removePodCgroupTree(s.ctx, rec.ID, rec.CgroupParent)
}

// NSPinner pins a pod's namespaces as files, so containers join them by a
// path that can never come to name another pod's (a pid can be reused).
// Options.Pinner is nil in production: the bind-mount pinner below.
type NSPinner interface {
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

// markTopDirs makes the parents of the per-pod dirs (the pod dirs under
// RootDir/pods, the namespace pins under NSDir) and marks them for the
// ext4 allocator (package topdir). It only costs speed when it fails, so
// that is logged, not returned.
func (s *Service) markTopDirs(ctx context.Context) {
	dirs := map[string]os.FileMode{s.opts.NSDir: 0o700} // as pinFiles makes it
	if s.opts.RootDir != "" {
		dirs[filepath.Join(s.opts.RootDir, "pods")] = 0o711 // as preparePodDir makes it
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
			s.log.WarnContext(ctx, "mark top dir", "dir", d, "error", err)
		}
	}
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
