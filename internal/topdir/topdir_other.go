//go:build !linux

package topdir

// Mark does nothing: only Linux filesystems have FS_TOPDIR_FL.
func Mark(dir string) error { return nil }
