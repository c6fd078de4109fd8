package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/idmap"
	"github.com/crin-dev/crin/internal/oci"
	"github.com/crin-dev/crin/internal/store"
)

// User namespaces (docs/userns.md). A pod with userns_options mode POD
// gets a user namespace crind makes and pins (<ns dir>/<pod>/user) with a
// network namespace it owns (the pod's netns pin), so the runtime only
// joins them. runc 1.1 cannot id-map mounts, so crind does: the pod's
// rootfs and every bind mount source are replaced in the spec by
// id-mapped clones under <userns dir>/<pod>/..., a directory every
// mapped id can traverse (crind's root and state dirs are 0700 and the
// runtime sets a container up as its mapped root).

// usernsRuntimeAnnotation marks runc in `runc features`: user namespaces
// are offered only with runtimes tested with crind's id-mapped mounts.
const usernsRuntimeAnnotation = "org.opencontainers.runc.version"

// probeUserNS checks once, at start-up, whether this host can run pods in
// user namespaces; the result decides Status and RunPodSandbox.
func (s *Service) probeUserNS(ctx context.Context) {
	switch {
	case s.opts.UserNSDir == "":
		s.usernsErr = errors.New("no user namespace directory is configured")
	case s.opts.PauseBinary == "":
		s.usernsErr = errors.New("no helper binary (crin-pause) is configured")
	default:
		s.usernsErr = s.prepareUserNSDir()
		if s.usernsErr == nil {
			s.usernsErr = idmap.Probe([]string{s.opts.PauseBinary}, s.probeDir())
		}
	}
	if s.usernsErr != nil {
		s.log.InfoContext(ctx, "user namespaces are not offered", "reason", s.usernsErr)
	}
}

// probeDir is where the probe id-maps: the root dir, whose filesystem
// holds the image layers that container rootfs are made of.
func (s *Service) probeDir() string {
	if s.opts.RootDir != "" {
		return s.opts.RootDir
	}
	return s.opts.UserNSDir
}

// prepareUserNSDir makes the user namespace dir 0711 and checks that its
// parents let every id through: the runtime resolves the rootfs and the
// mount sources as the container's mapped root.
func (s *Service) prepareUserNSDir() error {
	dir := filepath.Clean(s.opts.UserNSDir)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return err
	}
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %o) does not let the mapped ids reach %s", p, st.Mode().Perm(), dir)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// usernsUsable says why handler cannot run a pod in a user namespace
// (errdefs.ErrFailedPrecondition), or nil.
func (s *Service) usernsUsable(handler string) error {
	if s.usernsErr != nil {
		return fmt.Errorf("linux.security_context.namespace_options.userns_options: user namespaces are not available on this node: %w: %w", s.usernsErr, errdefs.ErrFailedPrecondition)
	}
	if f := s.features[handler]; f == nil || f.Annotations[usernsRuntimeAnnotation] == "" || f.Linux == nil || !slices.Contains(f.Linux.Namespaces, string(specs.UserNamespace)) {
		return fmt.Errorf("linux.security_context.namespace_options.userns_options: runtime handler %q: user namespaces are offered with runc only: %w", handler, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// usernsPodDir holds the id-mapped mounts of pod id's infra container
// and, under c/<container id>, those of its containers.
// Both are "" when no UserNSDir is configured.
func (s *Service) usernsPodDir(id string) string {
	if s.opts.UserNSDir == "" {
		return ""
	}
	return filepath.Join(s.opts.UserNSDir, id)
}

func (s *Service) usernsCtrDir(podID, id string) string {
	if s.opts.UserNSDir == "" {
		return ""
	}
	return filepath.Join(s.usernsPodDir(podID), "c", id)
}

// usernsPin is where pod id's user namespace is pinned.
func (s *Service) usernsPin(id string) string { return filepath.Join(s.nsDir(id), "user") }

// newPodUserNS creates the user namespace of pod rec and the network
// namespace it owns, pinned at the user pin and rec.NetNS, with loopback
// up; for a pod without an infra process also the IPC and UTS namespaces
// it owns (the UTS one with hostname), pinned and recorded as for any pod.
func (s *Service) newPodUserNS(rec *store.Sandbox, u *oci.UserNS, hostname string) (retErr error) {
	id, netns := rec.ID, rec.NetNS
	if err := os.MkdirAll(s.nsDir(id), 0o700); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(netns), 0o711); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	pins := idmap.Pins{User: s.usernsPin(id), Net: netns}
	if rec.NoInfra {
		pins.IPC, pins.UTS = filepath.Join(s.nsDir(id), "ipc"), filepath.Join(s.nsDir(id), "uts")
	}
	if err := idmap.NewUserNS([]string{s.opts.PauseBinary}, pins, u.UIDs, u.GIDs); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = cni.RemoveNetNS(netns)
			for _, p := range []string{pins.User, pins.IPC, pins.UTS} {
				_ = idmap.Unpin(p)
			}
		}
	}()
	if err := cni.InNetNS(netns, loopbackUp); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	if pins.UTS != "" && hostname != "" {
		if err := setHostname(pins.UTS, hostname); err != nil {
			return fmt.Errorf("create user namespace: %w", err)
		}
	}
	if rec.NoInfra {
		rec.IPCNS, rec.UTSNS = pins.IPC, pins.UTS
	}
	return nil
}

// setHostname sets hostname in the UTS namespace pinned at pin, from a
// thread that is thrown away afterwards. crind, root in the namespace's
// ancestor user namespace, may enter it and set its name.
func setHostname(pin, hostname string) error {
	return cni.OnDisposableThread(func() error {
		f, err := os.Open(pin)
		if err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWUTS); err != nil {
			return fmt.Errorf("set hostname: enter %s: %w", pin, err)
		}
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("set hostname %q: %w", hostname, err)
		}
		return nil
	})
}

// loopbackUp sets IFF_UP on "lo" in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// idmapOptions say what idmapSpec does with a spec's rootfs.
type idmapOptions struct {
	// overlay: the rootfs is a container's overlay of image layers, which
	// is mounted again on id-mapped layers; otherwise it is a plain
	// directory (the pause rootfs) that is cloned id-mapped.
	overlay bool
}

// idmapSpec points spec's rootfs and bind mount sources at id-mapped
// clones in dir (the pod's user namespace dir or one below it), made with
// pod podID's pinned user namespace. On error what it made is left for
// removeUserNSDir(dir).
func (s *Service) idmapSpec(spec *specs.Spec, u *oci.UserNS, podID, dir string, o idmapOptions) error {
	f, err := os.Open(s.usernsPin(podID))
	if err != nil {
		return fmt.Errorf("id-map mounts: the pod's user namespace: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// The clones show host root's files as the pod's: only the pod's
	// mapped root (which the runtime sets the container up as) and host
	// root may reach them, never another host user.
	podDir := s.usernsPodDir(podID)
	if err := os.MkdirAll(podDir, 0o700); err != nil {
		return fmt.Errorf("id-map mounts: %w", err)
	}
	if err := os.Chown(podDir, int(u.RootUID()), int(u.RootGID())); err != nil {
		return fmt.Errorf("id-map mounts: %w", err)
	}
	if err := os.Chmod(podDir, 0o700); err != nil {
		return fmt.Errorf("id-map mounts: %w", err)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("id-map mounts: %w", err)
	}
	if spec.Root != nil && spec.Root.Path != "" {
		root := filepath.Join(dir, "rootfs")
		if o.overlay {
			// <image root>/containers/<id>/rootfs: the layers are
			// under the image root.
			layers := filepath.Dir(filepath.Dir(filepath.Dir(spec.Root.Path)))
			if err := idmap.RemapOverlay(fd, spec.Root.Path, layers, u.RootUID(), u.RootGID()); err != nil {
				return fmt.Errorf("id-map rootfs: %w", err)
			}
			// The overlay itself is mapped already: a plain bind
			// makes it reachable by the mapped ids.
			err = idmap.Clone(-1, spec.Root.Path, root, idmap.CloneOptions{})
		} else {
			err = idmap.Clone(fd, spec.Root.Path, root, idmap.CloneOptions{})
		}
		if err != nil {
			return fmt.Errorf("id-map rootfs: %w", err)
		}
		spec.Root.Path = root
	}
	for i, m := range spec.Mounts {
		if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
			continue
		}
		dst := filepath.Join(dir, "m", strconv.Itoa(i))
		if err := idmap.Clone(fd, m.Source, dst, idmap.CloneOptions{Recursive: slices.Contains(m.Options, "rbind")}); err != nil {
			return fmt.Errorf("id-map mounts[%d] (%s): %w", i, m.Destination, err)
		}
		spec.Mounts[i].Source = dst
	}
	return nil
}

// removeUserNSDir unmounts every id-mapped mount in dir and removes it;
// a missing dir (or "") is fine.
func removeUserNSDir(dir string) error {
	if dir == "" {
		return nil
	}
	return idmap.RemoveAll(dir)
}

// releaseUserNSDir removes dir, the id-mapped mounts of pod or container
// id; a failure is returned and recorded for the cleanup loop.
func (s *Service) releaseUserNSDir(ctx context.Context, id, dir string) error {
	err := removeUserNSDir(dir)
	if err != nil {
		s.deferCleanup(ctx, store.Cleanup{Kind: store.CleanupIDMapped, ID: id, Path: dir}, err)
	}
	return err
}

// retryUserNSDir is the cleanup loop's releaseUserNSDir. A recorded path
// outside the user namespace dir is not crind's to remove: dropped.
func (s *Service) retryUserNSDir(ctx context.Context, dir string) error {
	if s.opts.UserNSDir == "" || !strings.HasPrefix(filepath.Clean(dir), filepath.Clean(s.opts.UserNSDir)+"/") {
		s.log.WarnContext(ctx, "pending id-mapped mount cleanup outside the user namespace dir dropped", "dir", dir)
		return nil
	}
	return removeUserNSDir(dir)
}

// sweepUserNS removes the id-mapped mounts of pods and containers no
// record owns, and what an interrupted start-up probe left.
func (s *Service) sweepUserNS(ctx context.Context) {
	if s.opts.UserNSDir == "" {
		return
	}
	if s.probeDir() != s.opts.UserNSDir {
		left, _ := filepath.Glob(filepath.Join(s.probeDir(), "idmap-probe-*"))
		for _, p := range left {
			s.sweepUserNSDir(ctx, p)
		}
	}
	ents, _ := os.ReadDir(s.opts.UserNSDir)
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(s.opts.UserNSDir, name)
		switch {
		case strings.HasPrefix(name, "idmap-probe-"):
		case isID(name) && s.knownID(name):
			ctrs, _ := os.ReadDir(filepath.Join(p, "c"))
			for _, c := range ctrs {
				if !s.knownID(c.Name()) {
					s.sweepUserNSDir(ctx, filepath.Join(p, "c", c.Name()))
				}
			}
			continue
		case !isID(name):
			continue
		}
		s.sweepUserNSDir(ctx, p)
	}
}

func (s *Service) sweepUserNSDir(ctx context.Context, dir string) {
	if err := removeUserNSDir(dir); err != nil {
		s.log.WarnContext(ctx, "remove orphaned id-mapped mounts", "dir", dir, "error", err)
		return
	}
	s.log.InfoContext(ctx, "removed id-mapped mounts no record owns", "dir", dir)
}
