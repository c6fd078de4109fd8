// Package checkpoint checkpoints and restores containers and pods for the
// CRI hub, and reads and writes what it checkpoints to.
//
// A Manager does the work of the CRI's CheckpointContainer, CheckpointPod
// and RestorePod, and of CreateContainer from a checkpoint
// (docs/checkpoint.md): it checks the request, asks CRIU whether it works
// here (CRIU), freezes and dumps containers through the runtime's
// runtime.Checkpointer, and writes or reads the files below. It sees the
// hub (internal/cri, which it does not import) only through Hub: to look
// up containers and pods, and to make the pod and the containers of a
// restore as RunPodSandbox and CreateContainer make any.
//
// A checkpoint archive is the uncompressed tar kubelet asks for in
// CheckpointContainer. Its layout is shared by CRI-O, containerd and Podman
// and read by checkpointctl: a few JSON files at the top level
// (ConfigDumpFile, SpecDumpFile, StatusDumpFile), CRIU's image files under
// ImagesDir, CRIU's own artefacts of its work dir (StatsDumpFile,
// DumpLogFile) and the container's writable layer as an OCI layer tar
// (RootfsDiffFile). checkpointctl refuses an archive without a directory
// entry for ImagesDir, so WriteArchive writes a header for every directory.
//
// The format functions know nothing of CRIU or of the OCI runtime: they
// turn a staging directory into an archive (WriteArchive), an archive back
// into a directory (Extract), and read or write the JSON files in such a
// directory. A pod checkpoint is a directory of such directories (pod.go).
package checkpoint

// Names of the entries of a checkpoint archive, relative to its root.
const (
	// ConfigDumpFile is the JSON of ContainerConfig.
	ConfigDumpFile = "config.dump"
	// SpecDumpFile is the container's OCI runtime spec (its config.json).
	SpecDumpFile = "spec.dump"
	// ImagesDir is the directory of CRIU's image files, the --image-path
	// of the OCI runtime's checkpoint and restore.
	ImagesDir = "checkpoint"
	// RootfsDiffFile is the container's writable layer as an uncompressed OCI
	// layer tar (whiteouts for deleted files).
	RootfsDiffFile = "rootfs-diff.tar"
	// StatsDumpFile is CRIU's statistics image of the dump, written into its
	// work dir; checkpointctl inspect --stats reads it.
	StatsDumpFile = "stats-dump"
	// DumpLogFile is CRIU's log of the dump, written into its work dir.
	DumpLogFile = "dump.log"
	// StatusDumpFile is the JSON of the CRI ContainerStatus at checkpoint.
	StatusDumpFile = "status.dump"
	// StatsRestoreFile is CRIU's statistics image of a restore. It and
	// RestoreLogFile are written into CRIU's work dir on restore, never
	// into an archive.
	StatsRestoreFile = "stats-restore"
	// RestoreLogFile is CRIU's log of a restore.
	RestoreLogFile = "restore.log"
)

// Names of files inside ImagesDir that crin reads or checks for.
const (
	// InventoryFile is CRIU's first image; every dump writes it.
	InventoryFile = "inventory.img"
	// DescriptorsFile is runc's and crun's JSON list of what fds 0-2 of the
	// container's init were, used to rewire them on restore.
	DescriptorsFile = "descriptors.json"
)
