// Package runtime runs OCI containers for crind through one Runtime interface.
// The oci backend drives any OCI runtime CLI (runc, crun) with one crin-shim
// process per pod; the shim owns the stdio of each of the pod's containers,
// writes their CRI logs, reaps them and records how they exited, and
// outlives crind restarts. The shimv2 backend (package shimv2) drives
// containerd shim v2 runtimes; see docs/runtimes.md for both.
//
// # The oci backend
//
// OCI keeps nothing in memory but per-pod locks. Each container has a
// state dir, StateDir/<id>, which is also its bundle (config.json); each
// pod's shim has a dir, StateDir/.pod-<pod id> (the pod is the create
// request's PodID; a container without one gets a shim of its own).
// The container's dir names its shim's dir and pid, and the shim keeps the
// init pid, the runtime's JSON log and, once the container exited, the
// exit record there (see package shim for the files and the control
// protocol). A fresh OCI on the same StateDir therefore sees every
// container a previous crind made: List reads the dirs, Status and Wait
// ask the shim, and fall back to the exit record when the shim is gone,
// and to "<runtime> state" when neither exists (StateUnknown when the
// runtime no longer knows it either; the exit code is then lost).
//
// A shim that died without recording an exit (the container's pid file
// names a process that is gone or is no longer that shim) is never taken
// for a success: the first Status or Wait that finds it, for each of the
// pod's containers, kills what is left of the container, deletes it from
// the runtime and writes the exit record itself with exit code 255 and
// ReasonShimDied. A Wait is a request on the shim's socket, which the
// kernel closes when the shim dies, so a waiter learns of the death at
// once.
//
// Create writes the bundle only. Start asks the pod's shim to create and
// start the container (one request, one "<runtime> run --detach"); when
// the pod has no live shim it starts one first. Until then the container
// is pending: Status says created, Update rewrites the bundle, a SIGKILL
// records it killed, Delete removes the bundle. A failed or cancelled
// Start deletes the container from the runtime and has the shim drop it;
// the container is pending again. Signal asks the shim, which signals the
// init through a pidfd; "all" of a container that shares its PID
// namespace, and a container without a live shim, go to "<runtime> kill".
// Update runs the runtime CLI directly, with its own timeout and with
// --log-format json so errors carry the runtime's messages (see
// RuntimeError).
//
// Exec and ExecStream write the process spec into the container's dir and
// have the pod's shim run it (shim.OpExec, "<runtime> exec --detach"): the
// process is the shim's child, the shim copies its stdio (pipes, or the
// terminal whose master the runtime hands it) over the request's
// connection and reports its real exit status last. When the request's
// ctx ends (Exec's timeout included) or crind dies, the connection closes
// and the shim kills the process, so no exec'd process outlives its
// session; it also kills them when the container's init exits.
//
// Delete kills a live container (SIGKILL to all its processes), waits for
// its exit to be recorded, has the shim drop it (the shim ran "<runtime>
// delete" when it exited; without a live shim Delete runs "<runtime>
// delete --force" itself) and removes the state dir. When it was the
// shim's last container, the shim exits by itself.
//
// Shim sockets are path-based: StateDir/.pod-<pod id>/shim.sock, or a
// derived name in /run/crin-shim when that path would not fit a unix
// socket address.
package runtime

import (
	"context"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Runtime creates, starts, signals and removes OCI containers.
//
// Errors are classified with github.com/containerd/errdefs: an unknown id is
// errdefs.ErrNotFound, an operation that the container's state forbids is
// errdefs.ErrFailedPrecondition.
type Runtime interface {
	// Create writes the bundle for req.Spec and creates the container
	// (under its pod's shim, for the oci backend); the process is not
	// started. On error nothing is left
	// behind (no shim, no runtime state, no bundle).
	Create(ctx context.Context, req CreateRequest) error
	// Start starts a created container and returns its pid.
	Start(ctx context.Context, id string) (int, error)
	// Signal sends sig to the container's init process (all processes when
	// opts.All). Signalling a stopped container is not an error.
	Signal(ctx context.Context, id string, sig syscall.Signal, opts SignalOptions) error
	// Status reports the container's state as its shim last saw it. It works
	// after a crind restart (it reattaches to the live shim, or reads the
	// recorded exit when the shim is gone).
	Status(ctx context.Context, id string) (Status, error)
	// Wait blocks until the container has exited (or ctx ends) and returns
	// its final status.
	Wait(ctx context.Context, id string) (Status, error)
	// Delete removes the container from the OCI runtime, stops its shim and
	// removes its bundle. A running container is killed first. Deleting an
	// unknown id is not an error.
	Delete(ctx context.Context, id string) error
	// Update changes the resources of a created or running container.
	Update(ctx context.Context, id string, res *specs.LinuxResources) error
	// Exec runs a process in the container and waits for it, honouring
	// req.Timeout (the process is killed when it expires and the error wraps
	// context.DeadlineExceeded).
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// ReopenLog makes the shim close and reopen the container's log file.
	ReopenLog(ctx context.Context, id string) error
	// List returns the ids of every container this backend knows of
	// (used on start-up to find containers the store does not know).
	List(ctx context.Context) ([]string, error)
	// Features reports what the OCI runtime supports.
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

var _ PodShims = (*OCI)(nil)

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
	// is opened beneath it, no symbolic link followed (shim.OpenBeneath).
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
