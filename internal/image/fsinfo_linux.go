package image

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FsInfo reports the usage of the image filesystem: the mountpoint holding
// Root, and the bytes (allocated blocks) and inodes used under Root. Rootfs
// mounts under Root are not counted: their upper dirs are.
func (s *Service) FsInfo() (FsUsage, error) {
	mp, err := mountpointOf(s.root)
	if err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	var rootSt unix.Stat_t
	if err := unix.Lstat(s.root, &rootSt); err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var u FsUsage
	u.Mountpoint = mp
	err = filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while we walked
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if st.Dev != rootSt.Dev {
			return fs.SkipDir // a mounted rootfs
		}
		k := inode{st.Dev, st.Ino}
		if seen[k] {
			return nil
		}
		seen[k] = true
		u.InodesUsed++
		u.UsedBytes += uint64(st.Blocks) * 512
		return nil
	})
	if err != nil {
		return FsUsage{}, fmt.Errorf("image fs info: %w", err)
	}
	return u, nil
}

// mountpointOf finds the mountpoint of the filesystem holding p, the
// longest mountpoint in mountinfo that is p or an ancestor of it.
func mountpointOf(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	best := "/"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if (real == mp || strings.HasPrefix(real, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	return best, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, ...) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
