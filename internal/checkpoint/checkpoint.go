// Package checkpoint reads and writes container checkpoint archives.
//
// A checkpoint archive is the uncompressed tar kubelet asks for in
// CheckpointContainer. Its layout is shared by CRI-O, containerd and Podman
// and read by checkpointctl: a few JSON files at the top level (ConfigDump,
// SpecDump, StatusDump), CRIU's image files under ImagesDir, CRIU's own
// artefacts of its work dir (StatsDump, DumpLog) and the container's
// writable layer as an OCI layer tar (RootfsDiff). checkpointctl refuses an
// archive without a directory entry for ImagesDir, so WriteArchive writes a
// header for every directory.
//
// The package knows nothing of CRIU or of the OCI runtime: it turns a
// staging directory into an archive (WriteArchive), an archive back into a
// directory (Extract), and reads or writes the JSON files in such a
// directory.
package checkpoint

// Names of the entries of a checkpoint archive, relative to its root.
const (
	// ConfigDump is the JSON of ContainerConfig.
	ConfigDump = "config.dump"
	// SpecDump is the container's OCI runtime spec (its config.json).
	SpecDump = "spec.dump"
	// ImagesDir is the directory of CRIU's image files, the --image-path
	// of the OCI runtime's checkpoint and restore.
	ImagesDir = "checkpoint"
	// RootfsDiff is the container's writable layer as an uncompressed OCI
	// layer tar (whiteouts for deleted files).
	RootfsDiff = "rootfs-diff.tar"
	// StatsDump is CRIU's statistics image of the dump, written into its
	// work dir; checkpointctl inspect --stats reads it.
	StatsDump = "stats-dump"
	// DumpLog is CRIU's log of the dump, written into its work dir.
	DumpLog = "dump.log"
	// StatusDump is the JSON of the CRI ContainerStatus at checkpoint.
	StatusDump = "status.dump"
	// StatsRestore and RestoreLog are what CRIU writes into its work dir
	// on restore; they are never part of an archive crin writes.
	StatsRestore = "stats-restore"
	// RestoreLog is CRIU's log of a restore.
	RestoreLog = "restore.log"
)

// Names of files inside ImagesDir that crin reads or checks for.
const (
	// Inventory is CRIU's first image; every dump writes it.
	Inventory = "inventory.img"
	// Descriptors is runc's and crun's JSON list of what fds 0-2 of the
	// container's init were, used to rewire them on restore.
	Descriptors = "descriptors.json"
)
