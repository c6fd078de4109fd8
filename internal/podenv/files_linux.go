package podenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

// podShmSize is the size of a pod's /dev/shm tmpfs.
const podShmSize = 64 << 20

// PreparePodDir makes the directory of pod rec (rec.PodDir) with the
// files its containers mount (hostname, hosts, resolv.conf) and its shm,
// unless it uses the node's IPC namespace. A bad DNS config is
// errdefs.ErrInvalidArgument. On error, what it made is left for
// RemovePodDir.
func (e *Env) PreparePodDir(rec *store.Sandbox, cfg *runtimeapi.PodSandboxConfig) error {
	if err := os.MkdirAll(rec.PodDir, 0o711); err != nil {
		return fmt.Errorf("create pod dir: %w", err)
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if err := writePodFiles(rec.PodDir, cfg, ns.GetNetwork() == runtimeapi.NamespaceMode_NODE); err != nil {
		return err
	}
	if ns.GetIpc() != runtimeapi.NamespaceMode_NODE {
		if err := mountShm(filepath.Join(rec.PodDir, "shm")); err != nil {
			return err
		}
	}
	return nil
}

// RemovePodDir unpins the namespaces of pod rec, removes its id-mapped
// mounts, unmounts its shm and removes its files; what is already gone
// is fine. It is how rollback, removal and recovery dispose of them.
func (e *Env) RemovePodDir(rec *store.Sandbox) error {
	if err := e.UnpinPodNamespaces(rec.ID); err != nil {
		return err
	}
	if err := RemoveUserNSDir(e.UserNSPodDir(rec.ID)); err != nil {
		return err
	}
	if err := unmountAll(filepath.Join(rec.PodDir, "shm")); err != nil {
		return err
	}
	return os.RemoveAll(rec.PodDir)
}

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
			return nil, fmt.Errorf("dns_config.servers[%d] %q: contains whitespace: %w", i, v, errdefs.ErrInvalidArgument)
		}
		fmt.Fprintf(&sb, "nameserver %s\n", v)
	}
	if len(dns.Searches) > 0 {
		for i, v := range dns.Searches {
			if strings.ContainsAny(v, " \t\n") {
				return nil, fmt.Errorf("dns_config.searches[%d] %q: contains whitespace: %w", i, v, errdefs.ErrInvalidArgument)
			}
		}
		fmt.Fprintf(&sb, "search %s\n", strings.Join(dns.Searches, " "))
	}
	if len(dns.Options) > 0 {
		for i, v := range dns.Options {
			if strings.ContainsAny(v, " \t\n") {
				return nil, fmt.Errorf("dns_config.options[%d] %q: contains whitespace: %w", i, v, errdefs.ErrInvalidArgument)
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
