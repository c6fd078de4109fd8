package headroom

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestKeepAllocatesPastTheEnd: Keep gives the file blocks for its holes
// and its room without changing its size, and again once it grew.
func TestKeepAllocatesPastTheEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A sparse file, as bbolt's ftruncate grows it.
	if err := f.Truncate(64 << 10); err != nil {
		t.Fatal(err)
	}
	const room = 1 << 20
	r := NewRoom(path, room, nil)
	r.Keep()
	check := func(size int64) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != size {
			t.Errorf("size %d after Keep, want %d (unchanged)", st.Size, size)
		}
		if got := st.Blocks * 512; got < size+room {
			t.Errorf("%d bytes allocated, want at least %d", got, size+room)
		}
	}
	check(64 << 10)
	if err := f.Truncate(3 << 20); err != nil {
		t.Fatal(err)
	}
	r.Keep()
	check(3 << 20)
}
