package store

// CleanupKind says what a pending cleanup removes.
type CleanupKind string

// The pending cleanup kinds.
const (
	// CleanupPodCgroup removes a pod cgroup directory crind made (Path,
	// relative to each hierarchy's root) with everything in it.
	CleanupPodCgroup CleanupKind = "pod-cgroup"
	// CleanupRuntimeContainer deletes container ID from runtime Runtime.
	CleanupRuntimeContainer CleanupKind = "runtime-container"
	// CleanupRootfs releases container ID's rootfs (unmount, remove).
	CleanupRootfs CleanupKind = "rootfs"
	// CleanupIDMapped unmounts and removes Path, the id-mapped mounts of
	// pod or container ID in a user namespace.
	CleanupIDMapped CleanupKind = "idmapped-mounts"
)

// Cleanup is a cleanup step that failed (the OCI runtime was killed, a
// cgroup was still busy) and is retried in the background until it works,
// also after a restart. See docs/recovery.md.
type Cleanup struct {
	Kind    CleanupKind `json:"kind"`
	ID      string      `json:"id"`                // pod or container id
	Runtime string      `json:"runtime,omitempty"` // handler, for runtime containers
	Path    string      `json:"path,omitempty"`    // cgroup path, for pod cgroups; dir, for id-mapped mounts
	// Attempts counts the failed tries; LastError is the latest failure.
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
	Since     int64  `json:"since"` // unix nanos of the first failure
}

// Key identifies the cleanup: one per kind and object.
func (c *Cleanup) Key() string { return string(c.Kind) + "/" + c.ID }

// PutCleanup records (creates or replaces) a pending cleanup.
func (s *Store) PutCleanup(c *Cleanup) error { return put(s, bucketCleanups, c.Key(), c) }

// DeleteCleanup forgets a pending cleanup; a missing one is not an error.
func (s *Store) DeleteCleanup(key string) error { return del(s, bucketCleanups, key) }

// Cleanups returns every pending cleanup.
func (s *Store) Cleanups() ([]*Cleanup, error) { return all[Cleanup](s.db, bucketCleanups) }
