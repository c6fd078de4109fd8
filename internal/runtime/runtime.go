// Package runtime is what crind's hub knows of running containers: the
// Runtime interface, its optional capabilities (Attacher, StreamExecer,
// Checkpointer, Checker, PodShims) and their types, and what every
// backend shares: container ids and bundle dirs, an exec's process spec,
// the reading of cgroup statistics (for podstats and the backends' Stats),
// the error of an OCI runtime command, and the rule for the exit nobody
// saw (RecordShimDied). Two leaf subpackages hold what both backends'
// small processes share: exitrec (the exit record) and crilog (the CRI
// log writer). Each backend is a subpackage: oci (an OCI runtime CLI
// under one crin-shim per pod) and shimv2 (containerd shim v2 runtimes);
// crind picks one per runtime handler. See docs/runtimes.md.
package runtime

import (
	"context"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Runtime creates, starts, signals and removes OCI containers. Each
// method's doc says what the two backends do: oci (package oci: an OCI
// runtime CLI under one crin-shim per pod) and shimv2 (package shimv2: a
// containerd shim v2 runtime, over its ttrpc task API).
//
// Errors are classified with github.com/containerd/errdefs: an unknown id is
// errdefs.ErrNotFound, an operation that the container's state forbids is
// errdefs.ErrFailedPrecondition.
type Runtime interface {
	// Create makes the container; its process is not started. Both write
	// the bundle (StateDir/<id>/config.json) first. oci stops there: the
	// container is pending, no runtime command has run and no shim is
	// asked (runc runs at Start). shimv2 starts the pod's shim, or joins
	// the one running, and creates the task in it (the shim runs
	// its runtime's create). On error nothing is left behind (no shim started
	// for it, no runtime state, no bundle).
	Create(ctx context.Context, req CreateRequest) error
	// Start starts a created container and returns its pid. oci asks the
	// pod's crin-shim (starting it when the pod has none) to create and
	// start the container in one "<runtime> run --detach" (restore, with
	// RestoreFrom); a failed Start leaves it pending again. shimv2 starts
	// the task its shim created.
	Start(ctx context.Context, id string) (int, error)
	// Signal sends sig to the container's init process (all processes when
	// opts.All). Signalling a stopped container is not an error. oci asks
	// crin-shim, which signals through a pidfd ("<runtime> kill" for All,
	// and without a live shim); a SIGKILL to a pending container records
	// it killed. shimv2 sends the shim's Kill.
	Signal(ctx context.Context, id string, sig syscall.Signal, opts SignalOptions) error
	// Status reports the container's state as its shim last saw it. It works
	// after a crind restart: both ask the live shim, read the recorded exit
	// when the container's exit was recorded, and, when the shim died
	// before recording one, record the exit nobody saw (ReasonShimDied).
	Status(ctx context.Context, id string) (Status, error)
	// Wait blocks until the container has exited (or ctx ends) and returns
	// its final status. Both wait on a request to the shim (crin-shim's
	// wait op, the task API's Wait), which ends at once when the shim
	// dies; the death is then recorded as in Status.
	Wait(ctx context.Context, id string) (Status, error)
	// Delete removes the container from the OCI runtime, stops its shim when
	// it held no other container and removes its bundle. A running
	// container is killed first. Deleting an unknown id is not an error.
	// oci has crin-shim drop it (the shim ran "<runtime> delete" when it
	// exited); shimv2 deletes the task.
	Delete(ctx context.Context, id string) error
	// Update changes the resources of a created or running container. oci
	// rewrites a pending container's bundle and runs "<runtime> update"
	// on a started one (its errors are *RuntimeError); shimv2 sends the
	// shim's Update.
	Update(ctx context.Context, id string, res *specs.LinuxResources) error
	// Exec runs a process in the container and waits for it, honouring
	// req.Timeout (the process is killed when it expires and the error wraps
	// context.DeadlineExceeded). oci has crin-shim run it ("<runtime> exec
	// --detach"); shimv2 uses the task API's Exec, Start and Wait.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// ReopenLog makes the container's log writer close and reopen its log
	// file: crin-shim for oci, the container's shim logger for shimv2.
	ReopenLog(ctx context.Context, id string) error
	// List returns the ids of every container this backend knows of
	// (used on start-up to find containers the store does not know): the
	// bundles in its state dir, for both.
	List(ctx context.Context) ([]string, error)
	// Features reports what the OCI runtime supports ("<runtime>
	// features"; a shimv2 runtime other than runc's or gVisor's is
	// errdefs.ErrNotImplemented).
	Features(ctx context.Context) (*features.Features, error)
}

// PodShims is the optional capability of a backend that runs one process
// for all of a pod's containers (the oci backend's crin-shim), found by
// type assertion on a Runtime. The backend starts that process itself
// when a container of the pod starts and finds none.
type PodShims interface {
	// StartPodShim starts the pod's shim ahead of its first container.
	// A failure costs only time: the container's start tries again.
	StartPodShim(ctx context.Context, podID string) error
	// ReleasePodShim makes the pod's shim exit, and waits for it, if it
	// holds no container; otherwise it does nothing.
	ReleasePodShim(ctx context.Context, podID string) error
}

// CreateRequest describes a container to create.
type CreateRequest struct {
	ID string
	// PodID is the pod the container belongs to: the oci backend runs one
	// crin-shim for a pod's containers, and the shimv2 backend places the
	// pod's shim by it. Empty gives the container a shim of its own.
	PodID string
	// Spec is written as config.json in the bundle. Spec.Root.Path must be
	// an absolute path to a prepared rootfs.
	Spec *specs.Spec
	// SpecJSON, when set, is Spec already encoded (the caller stored it
	// so): a backend writes it as is instead of encoding Spec again.
	SpecJSON []byte
	// LogPath is the CRI log file the shim writes stdout and stderr to, in
	// the CRI format. Empty means the output is discarded. With a
	// terminal (Spec.Process.Terminal) all output is stdout.
	LogPath string
	// LogRoot is the pod's log directory, which LogPath lies in: the log
	// is opened beneath it, no symbolic link followed (crilog.OpenBeneath).
	// Empty opens LogPath as it is.
	LogRoot string
	// Stdin keeps the container's stdin open for attach (see Attacher);
	// without it the container's stdin is /dev/null.
	Stdin bool
	// StdinOnce closes the container's stdin once the first attach that
	// brought stdin ends.
	StdinOnce bool
	// RestoreFrom, when set, is a dir of CRIU images (a checkpoint's): the
	// container's processes are restored from them at Start instead of
	// run afresh. Only a Checkpointer backend takes it; others refuse it.
	RestoreFrom string
}

// SignalOptions modify Signal.
type SignalOptions struct {
	All bool // signal every process in the container
}

// State is the lifecycle state of a container as the runtime sees it.
type State string

// The states a container goes through.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateStopped State = "stopped"
	StateUnknown State = "unknown"
)

// Status is a container's runtime state.
type Status struct {
	State      State
	Pid        int
	ExitCode   int32
	OOMKilled  bool
	StartedAt  time.Time
	FinishedAt time.Time
	// Reason and Message, when set, say how a stopped container ended
	// when its exit code alone would mislead: ReasonShimDied.
	Reason  string
	Message string
}

// ReasonShimDied is the Status.Reason of a container whose shim died
// before the container exited: the backend killed what was left of it
// and recorded exit code 255 (or, when it could still see it, how the
// process itself ended, e.g. 141 for SIGPIPE: the shim was the reader of
// its output). Never 0: nobody saw the process finish its work.
const ReasonShimDied = "ShimDied"

// ExecRequest is a process to run inside a container. The process inherits
// the container's process spec (env, user, cwd, capabilities) with Args
// replaced.
type ExecRequest struct {
	Args    []string
	Timeout time.Duration // 0 means no timeout beyond ctx
	// MaxOutput caps the bytes kept of each of stdout and stderr.
	MaxOutput int
}

// ExecResult is the outcome of an Exec.
type ExecResult struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int32
}
