package podenv

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
	"github.com/opencontainers/runtime-spec/specs-go/features"
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
// user namespaces; the result is what UserNSUsable says.
func (e *Env) probeUserNS(ctx context.Context) {
	switch {
	case e.c.UserNSDir == "":
		e.usernsErr = errors.New("no user namespace directory is configured")
	case e.c.PauseBinary == "":
		e.usernsErr = errors.New("no helper binary (crin-pause) is configured")
	default:
		e.usernsErr = e.prepareUserNSDir()
		if e.usernsErr == nil {
			e.usernsErr = idmap.Probe([]string{e.c.PauseBinary}, e.probeDir())
		}
	}
	if e.usernsErr != nil {
		e.log.InfoContext(ctx, "user namespaces are not offered", "reason", e.usernsErr)
	}
}

// probeDir is where the probe id-maps: the root dir, whose filesystem
// holds the image layers that container rootfs are made of.
func (e *Env) probeDir() string {
	if e.c.RootDir != "" {
		return e.c.RootDir
	}
	return e.c.UserNSDir
}

// prepareUserNSDir makes the user namespace dir 0711 and checks that its
// parents let every id through: the runtime resolves the rootfs and the
// mount sources as the container's mapped root.
func (e *Env) prepareUserNSDir() error {
	dir := filepath.Clean(e.c.UserNSDir)
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

// UserNSUsable says why runtime handler, whose runtime has features f
// (nil: unknown), cannot run a pod in a user namespace
// (errdefs.ErrFailedPrecondition), or nil.
func (e *Env) UserNSUsable(handler string, f *features.Features) error {
	if e.usernsErr != nil {
		return fmt.Errorf("linux.security_context.namespace_options.userns_options: user namespaces are not available on this node: %w: %w", e.usernsErr, errdefs.ErrFailedPrecondition)
	}
	if f == nil || f.Annotations[usernsRuntimeAnnotation] == "" || f.Linux == nil || !slices.Contains(f.Linux.Namespaces, string(specs.UserNamespace)) {
		return fmt.Errorf("linux.security_context.namespace_options.userns_options: runtime handler %q: user namespaces are offered with runc only: %w", handler, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// UserNSPodDir holds the id-mapped mounts of pod id's infra container
// and, under c/<container id>, those of its containers (UserNSCtrDir).
// Both are "" when no UserNSDir is configured.
func (e *Env) UserNSPodDir(id string) string {
	if e.c.UserNSDir == "" {
		return ""
	}
	return filepath.Join(e.c.UserNSDir, id)
}

// UserNSCtrDir holds the id-mapped mounts of container id of pod podID.
func (e *Env) UserNSCtrDir(podID, id string) string {
	if e.c.UserNSDir == "" {
		return ""
	}
	return filepath.Join(e.UserNSPodDir(podID), "c", id)
}

// UserNSPin is where pod id's user namespace is pinned.
func (e *Env) UserNSPin(id string) string { return filepath.Join(e.NSDir(id), "user") }

// NewPodUserNS creates the user namespace of pod rec and the network
// namespace it owns, pinned at the user pin and rec.NetNS, with loopback
// up; for a pod without an infra process also the IPC and UTS namespaces
// it owns (the UTS one with hostname), pinned and recorded as for any pod.
func (e *Env) NewPodUserNS(rec *store.Sandbox, u *oci.UserNS, hostname string) (retErr error) {
	id, netns := rec.ID, rec.NetNS
	if err := os.MkdirAll(e.NSDir(id), 0o700); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(netns), 0o711); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	pins := idmap.Pins{User: e.UserNSPin(id), Net: netns}
	if rec.NoInfra {
		pins.IPC, pins.UTS = filepath.Join(e.NSDir(id), "ipc"), filepath.Join(e.NSDir(id), "uts")
	}
	if err := idmap.NewUserNS([]string{e.c.PauseBinary}, pins, u.UIDs, u.GIDs); err != nil {
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

// RemovePodUserNS unpins the user namespace NewPodUserNS made for pod id;
// a missing pin is fine.
func (e *Env) RemovePodUserNS(id string) error { return idmap.Unpin(e.UserNSPin(id)) }

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

// IDMapOptions say what IDMapSpec does with a spec's rootfs.
type IDMapOptions struct {
	// Overlay: the rootfs is a container's overlay of image layers, which
	// is mounted again on id-mapped layers; otherwise it is a plain
	// directory (the pause rootfs) that is cloned id-mapped.
	Overlay bool
}

// IDMapSpec points spec's rootfs and bind mount sources at id-mapped
// clones in dir (the pod's user namespace dir or one below it), made with
// pod podID's pinned user namespace. On error what it made is left for
// RemoveUserNSDir(dir).
func (e *Env) IDMapSpec(spec *specs.Spec, u *oci.UserNS, podID, dir string, o IDMapOptions) error {
	f, err := os.Open(e.UserNSPin(podID))
	if err != nil {
		return fmt.Errorf("id-map mounts: the pod's user namespace: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// The clones show host root's files as the pod's: only the pod's
	// mapped root (which the runtime sets the container up as) and host
	// root may reach them, never another host user.
	podDir := e.UserNSPodDir(podID)
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
		if o.Overlay {
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

// RemoveUserNSDir unmounts every id-mapped mount in dir and removes it;
// a missing dir (or "") is fine.
func RemoveUserNSDir(dir string) error {
	if dir == "" {
		return nil
	}
	return idmap.RemoveAll(dir)
}

// ReleaseUserNSDir removes dir, the id-mapped mounts of pod or container
// id; a failure is returned and handed to Config.Defer
// (store.CleanupIDMapped).
func (e *Env) ReleaseUserNSDir(ctx context.Context, id, dir string) error {
	err := RemoveUserNSDir(dir)
	if err != nil {
		e.deferCleanup(ctx, store.Cleanup{Kind: store.CleanupIDMapped, ID: id, Path: dir}, err)
	}
	return err
}

// RetryUserNSDir is the cleanup loop's ReleaseUserNSDir. A recorded path
// outside the user namespace dir is not crind's to remove: dropped
// (logged, nil).
func (e *Env) RetryUserNSDir(ctx context.Context, dir string) error {
	if e.c.UserNSDir == "" || !strings.HasPrefix(filepath.Clean(dir), filepath.Clean(e.c.UserNSDir)+"/") {
		e.log.WarnContext(ctx, "pending id-mapped mount cleanup outside the user namespace dir dropped", "dir", dir)
		return nil
	}
	return RemoveUserNSDir(dir)
}

// SweepUserNS removes the id-mapped mounts of pods and containers no
// record owns (known reports those one does), and what an interrupted
// start-up probe left. Failures are logged.
func (e *Env) SweepUserNS(ctx context.Context, known func(id string) bool) {
	if e.c.UserNSDir == "" {
		return
	}
	if e.probeDir() != e.c.UserNSDir {
		left, _ := filepath.Glob(filepath.Join(e.probeDir(), "idmap-probe-*"))
		for _, p := range left {
			e.sweepUserNSDir(ctx, p)
		}
	}
	ents, _ := os.ReadDir(e.c.UserNSDir)
	for _, ent := range ents {
		name := ent.Name()
		p := filepath.Join(e.c.UserNSDir, name)
		switch {
		case strings.HasPrefix(name, "idmap-probe-"):
		case isID(name) && known(name):
			ctrs, _ := os.ReadDir(filepath.Join(p, "c"))
			for _, c := range ctrs {
				if !known(c.Name()) {
					e.sweepUserNSDir(ctx, filepath.Join(p, "c", c.Name()))
				}
			}
			continue
		case !isID(name):
			continue
		}
		e.sweepUserNSDir(ctx, p)
	}
}

// sweepUserNSDir removes dir, id-mapped mounts no record owns, logging
// what it does.
func (e *Env) sweepUserNSDir(ctx context.Context, dir string) {
	if err := RemoveUserNSDir(dir); err != nil {
		e.log.WarnContext(ctx, "remove orphaned id-mapped mounts", "dir", dir, "error", err)
		return
	}
	e.log.InfoContext(ctx, "removed id-mapped mounts no record owns", "dir", dir)
}
