package idmap

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// probeHostID is where the probe maps root; any unprivileged id will do.
const probeHostID = 1 << 20

// Probe checks, in a scratch directory it makes under dir and removes,
// that this kernel can make user namespaces and id-map both a directory
// of dir's filesystem and an overlayfs mount built on it (what container
// rootfs are). An error is errdefs.ErrFailedPrecondition saying what
// failed.
func Probe(helper []string, dir string) (retErr error) {
	scratch, err := os.MkdirTemp(dir, "idmap-probe-")
	if err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	defer func() {
		if err := RemoveAll(scratch); err != nil && retErr == nil {
			retErr = fmt.Errorf("idmap probe: %w", err)
		}
	}()
	userPath := filepath.Join(scratch, "user")
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: probeHostID, Size: 65536}}
	if err := NewUserNS(helper, Pins{User: userPath}, m, m); err != nil {
		return fmt.Errorf("idmap probe: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	defer func() {
		if err := Unpin(userPath); err != nil && retErr == nil {
			retErr = fmt.Errorf("idmap probe: %w", err)
		}
	}()
	f, err := os.Open(userPath)
	if err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	defer f.Close()
	fd := int(f.Fd())

	plain := filepath.Join(scratch, "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	if err := probeOne(fd, plain, filepath.Join(scratch, "plain-mapped")); err != nil {
		return err
	}
	ovl := filepath.Join(scratch, "ovl")
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(ovl, d), 0o755); err != nil {
			return fmt.Errorf("idmap probe: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(ovl, "lower", "f"), nil, 0o644); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", ovl, ovl, ovl)
	if err := unix.Mount("overlay", filepath.Join(ovl, "merged"), "overlay", 0, opts); err != nil {
		return fmt.Errorf("idmap probe: mount overlay: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	merged := filepath.Join(ovl, "merged")
	if err := RemapOverlay(fd, merged, ovl, probeHostID, probeHostID); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(merged, "f"), &st); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	if st.Uid != probeHostID {
		return fmt.Errorf("idmap probe: an overlay on id-mapped layers shows owner %d, not %d: %w", st.Uid, probeHostID, errdefs.ErrFailedPrecondition)
	}
	// overlayfs falls back to read-only when it cannot use its upper dir.
	if err := os.WriteFile(filepath.Join(merged, "probe"), nil, 0o644); err != nil {
		return fmt.Errorf("idmap probe: write to an overlay on id-mapped layers: %w: %w", err, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// probeOne id-maps src at dst and checks that root-owned src looks owned
// by the mapped id through dst.
func probeOne(usernsFd int, src, dst string) error {
	if err := Clone(usernsFd, src, dst, CloneOptions{}); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil {
		return fmt.Errorf("idmap probe: %w", err)
	}
	if st.Uid != probeHostID {
		return fmt.Errorf("idmap probe: %s id-mapped shows owner %d, not %d: %w", src, st.Uid, probeHostID, errdefs.ErrFailedPrecondition)
	}
	return nil
}
