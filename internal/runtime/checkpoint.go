package runtime

import "context"

// CheckpointRequest says where a checkpoint goes.
type CheckpointRequest struct {
	// ImagePath receives CRIU's images of the container's processes (the
	// archive's checkpoint dir); WorkPath CRIU's log and statistics
	// (dump.log, stats-dump). Both are made when missing.
	ImagePath, WorkPath string
	// WhilePaused, when set, runs after the dump while the container is
	// still frozen, so that what it copies (the rootfs diff) is what the
	// dumped processes saw. Its error fails the checkpoint.
	WhilePaused func(ctx context.Context) error
	// Frozen says the caller froze the container with Freeze and thaws it
	// itself (a pod's containers are all frozen before any is dumped):
	// Checkpoint then neither freezes nor thaws it.
	Frozen bool
}

// Checkpointer is the optional capability of dumping a running
// container's processes with CRIU, through the OCI runtime, leaving them
// running. It is found by type assertion on a Runtime.
type Checkpointer interface {
	// Checkpoint freezes the container, dumps it (runc's and crun's
	// "checkpoint --leave-running"), runs req.WhilePaused and thaws it.
	// The container runs on whatever happens. One that is not running is
	// errdefs.ErrFailedPrecondition.
	Checkpoint(ctx context.Context, id string, req CheckpointRequest) error
	// Freeze pauses a running container for a Checkpoint with Frozen
	// set; Thaw resumes it.
	Freeze(ctx context.Context, id string) error
	// Engine names the program that dumps and restores ("runc", "crun"):
	// a checkpoint is restored by the engine that wrote it.
	Engine() string
	// Thaw resumes a container a checkpoint left frozen (crind died in
	// it); one that is not frozen is left as it is.
	Thaw(ctx context.Context, id string) error
}
