// Package headroom keeps disk space allocated past the end of a bbolt
// database file, so that the database can still commit when the
// filesystem under it is full.
//
// bbolt writes each commit's pages into pages freed by earlier commits
// or past its high-water mark, growing the file with ftruncate, which
// allocates nothing: on a full filesystem the first write past the
// blocks the file has fails ENOSPC. That is when kubelet evicts pods to
// free space, and the removals it asks for must be recorded. A Room
// allocates (fallocate, FALLOC_FL_KEEP_SIZE) every hole of the file and
// a number of bytes past its end without changing its size, so bbolt's
// growth lands on blocks that are already the file's. When the
// filesystem has no room for more, the blocks kept so far are used up
// first, and the next Keep with room takes them again.
package headroom

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultRoom is the space a Room keeps past its file's end unless told
// otherwise: two thousand bbolt pages, hundreds of pod removals.
const DefaultRoom = 8 << 20

// Room keeps space allocated past the end of one file.
type Room struct {
	path string
	size int64
	log  *slog.Logger

	mu sync.Mutex // guards covered, failing and unsupported
	// covered is the end of the range the last allocation that worked
	// covered; 0 until one did.
	covered int64
	// failing is set while allocations fail, so that Keep logs a
	// failure once and the recovery once.
	failing bool
	// unsupported is set once the filesystem refused fallocate.
	unsupported bool
}

// NewRoom returns a Room for the file at path that keeps size bytes
// allocated past its end (size <= 0: DefaultRoom), logging to log (nil:
// nowhere). It allocates nothing until Keep.
func NewRoom(path string, size int64, log *slog.Logger) *Room {
	if size <= 0 {
		size = DefaultRoom
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Room{path: path, size: size, log: log}
}

// Keep allocates the file's holes and the Room's size past its end,
// unless its last allocation already covers them. When it cannot (the
// filesystem is full) it logs that, once until it can again: the blocks
// allocated before stay the file's, and the database goes on with them.
func (r *Room) Keep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsupported {
		return
	}
	err := r.keepLocked()
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		// The filesystem cannot allocate ahead (some FUSE and network
		// filesystems): say so once and stop asking.
		r.unsupported = true
		r.log.Warn("the filesystem cannot keep disk space for the database's growth; on a full disk its commits fail", "path", r.path, "error", err)
	case err != nil && !r.failing:
		r.log.Warn("cannot keep disk space for the database's growth; it uses what was kept before", "path", r.path, "error", err)
	case err == nil && r.failing:
		r.log.Info("disk space for the database's growth kept again", "path", r.path, "bytes", r.size)
	}
	r.failing = err != nil
}

func (r *Room) keepLocked() error {
	fi, err := os.Stat(r.path)
	if err != nil {
		return fmt.Errorf("keep room for %s: %w", r.path, err)
	}
	end := fi.Size() + r.size
	if end <= r.covered {
		return nil
	}
	f, err := os.OpenFile(r.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("keep room for %s: %w", r.path, err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, end); err != nil {
		return fmt.Errorf("allocate %d bytes past the end of %s: %w", r.size, r.path, err)
	}
	r.covered = end
	return nil
}
