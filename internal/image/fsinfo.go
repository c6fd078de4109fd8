package image

import (
	"sync"
	"time"
)

// fsCache remembers the usage of what under Root changes rarely, so that
// FsInfo costs a few directory reads instead of a walk of the whole store:
// content blobs are immutable by name, a committed layer dir never changes,
// and a container's writable layer is measured by WritableLayerUsage (a
// sampler calls it periodically) and reused until measured again.
type fsCache struct {
	// mu guards the fields below; never held across a walk.
	mu         sync.Mutex
	mountpoint string
	blobs      map[string]usage      // blob file name -> its usage
	layers     map[dirKey]usage      // committed layer dir -> its usage
	uppers     map[string]LayerUsage // container id -> last measure of its upper dir
	// total is the last FsInfo figure, good while gen is totalGen and it
	// is younger than fsInfoMaxAge; gen counts changes to the store.
	total    FsUsage
	totalAt  time.Time
	totalGen uint64
	gen      uint64
}

// fsInfoMaxAge bounds how old an FsInfo figure may be when nothing crind
// did changed the store meanwhile (what it cannot see: downloads growing,
// a container's writes since its layer was last measured).
const fsInfoMaxAge = 10 * time.Second

// changed records that the store changed, so the next FsInfo measures.
func (c *fsCache) changed() {
	c.mu.Lock()
	c.gen++
	c.mu.Unlock()
}

// dirKey names a layer dir by name and inode, so a dir name reused after
// garbage collection is measured again.
type dirKey struct {
	name string
	ino  uint64
}

type usage struct{ bytes, inodes uint64 }

// LayerUsage is the measured usage of a container's writable layer.
type LayerUsage struct {
	// Mountpoint is the mountpoint of the filesystem holding the layer.
	Mountpoint string
	// UsedBytes counts allocated blocks (st_blocks * 512) of every file,
	// directory and link in the layer, each inode once: what du(1) says,
	// and what the layer costs the disk (a sparse file counts its blocks,
	// not its size).
	UsedBytes uint64
	// InodesUsed counts the distinct inodes in the layer, not the layer
	// root itself.
	InodesUsed uint64
	// Time is when the layer was measured.
	Time time.Time
}
