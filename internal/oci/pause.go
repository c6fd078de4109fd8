package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// preparePauseRoot makes dir with the mountpoints an infra container needs:
// the kernel filesystems' directories and an empty file for /pause. What
// exists already is checked, not replaced.
func preparePauseRoot(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create pause rootfs %s: %w", dir, err)
	}
	for _, d := range []string{"proc", "dev", "sys", "etc"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create pause rootfs %s: %w", p, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("check pause rootfs %s: %w", p, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("pause rootfs %s: not a directory: %w", p, fs.ErrExist)
		}
	}
	p := filepath.Join(dir, "pause")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW, 0o755)
	if err != nil {
		return fmt.Errorf("create pause mountpoint %s: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("check pause mountpoint %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("pause mountpoint %s: not a regular file: %w", p, fs.ErrExist)
	}
	return nil
}
