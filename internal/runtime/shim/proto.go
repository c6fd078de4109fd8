package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/exitrec"
)

// Operations understood by a shim's control socket.
const (
	OpState     = "state"      // report the current state at once
	OpWait      = "wait"       // block until the container has exited
	OpReopenLog = "reopen_log" // close and reopen the CRI log file
	OpShutdown  = "shutdown"   // exit the shim; refused while a container lives
	OpAttach    = "attach"     // stream the container's output from now on (see Attach)
	// OpCreate creates the container Request.Create describes under this
	// shim ("<runtime> create"); the answer carries its init pid.
	OpCreate = "create"
	// OpDelete forgets a stopped container: the shim makes sure the
	// runtime deleted it (it runs "<runtime> delete" itself once the
	// container exits) and drops it. When it was the shim's last
	// container, the shim exits after answering (Response.ShimExiting).
	OpDelete = "delete"
	// OpKill sends Request.Signal to the container's init (to all its
	// processes with Request.All, which the shim does only when the
	// container has a PID namespace of its own: killing its init ends
	// them all; otherwise it answers CodeUnsupported and the client runs
	// "<runtime> kill --all"). A container that exited is not an error.
	OpKill = "kill"
	// OpRelease makes a shim that holds no container exit (its pod was
	// stopped or removed before it got one, see the oci backend's
	// StartPodShim); one that holds a container answers
	// CodeFailedPrecondition and stays.
	OpRelease = "release"
	// OpExec runs a process in a running container under the shim
	// ("<runtime> exec --detach"), so the process is the shim's child:
	// the connection then carries its streams and, last, its exit code,
	// and the shim kills it when the connection closes first (see Exec).
	OpExec = "exec"
)

// States a shim reports.
const (
	StateRunning = "running"
	StateStopped = "stopped"
)

// Error codes carried in Response.Code so the client can classify errors.
const (
	CodeNotFound           = "not_found"
	CodeFailedPrecondition = "failed_precondition"
	CodeInvalidArgument    = "invalid_argument"
	CodeAlreadyExists      = "already_exists"
	// CodeShimExiting refuses an OpCreate on a shim that is exiting (its
	// last container was deleted); the client waits for it to go and
	// starts a new one.
	CodeShimExiting = "shim_exiting"
	// CodeUnsupported refuses an op this shim cannot do itself.
	CodeUnsupported = "unsupported"
)

// Request is one call on the control socket: a single JSON line.
type Request struct {
	Op string `json:"op"`
	// ID names the container the request is about: a shim serves every
	// container of a pod. Every op but OpShutdown and OpRelease needs it.
	ID string `json:"id,omitempty"`
	// Create describes the container to create, with OpCreate.
	Create *CreateOptions `json:"create,omitempty"`
	// Signal and All are OpKill's.
	Signal int  `json:"signal,omitempty"`
	All    bool `json:"all,omitempty"`
	// Stdin asks, with OpAttach, for the session's input to reach the
	// container's stdin.
	Stdin bool `json:"stdin,omitempty"`
	// Exec describes the process to run, with OpExec.
	Exec *ExecOptions `json:"exec,omitempty"`
}

// ExecOptions is a process to run in a container with OpExec. The three
// files are in the container's state dir; the client writes Process and
// the shim removes all three once the process is gone.
type ExecOptions struct {
	// Process is the OCI process spec ("<runtime> exec --process"); the
	// shim hands the path to the runtime and never reads it.
	Process string `json:"process"`
	// PidFile is where the runtime writes the process's pid.
	PidFile string `json:"pid_file"`
	// Log is the runtime's JSON log for this exec.
	Log string `json:"log"`
	// TTY runs the process on a terminal (the spec's terminal must be
	// true): the runtime hands the shim its master through a console
	// socket (ExecConsoleSocketPath), and all output is stdout.
	TTY bool `json:"tty,omitempty"`
	// Stdin gives the process a stdin the client feeds; without it, and
	// without TTY, its stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
}

// CreateOptions is a container to create under a running shim.
type CreateOptions struct {
	// Bundle is the container's state dir and OCI bundle (config.json);
	// the shim keeps the container's files there (see package doc).
	Bundle string `json:"bundle"`
	// LogPath is the CRI log file; empty discards the output.
	LogPath string `json:"log_path,omitempty"`
	// LogRoot is the pod's log directory: the log is opened beneath it
	// with no symbolic link followed (OpenBeneath). Empty opens LogPath
	// as it is.
	LogRoot string `json:"log_root,omitempty"`
	// Stdin keeps the container's stdin open for attach clients (a
	// pipe, or the terminal with TTY); without it stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// StdinOnce closes the container's stdin once the first attach
	// session that brought stdin ends.
	StdinOnce bool `json:"stdin_once,omitempty"`
	// TTY runs the container on a terminal (the bundle's
	// process.terminal must be true): the runtime hands the shim its
	// master through a console socket.
	TTY bool `json:"tty,omitempty"`
	// PrivatePID says the container has a PID namespace of its own
	// (killing its init ends all its processes; see OpKill). Unset, the
	// shim leaves a kill of all processes to the runtime.
	PrivatePID bool `json:"private_pid,omitempty"`
	// Restore is a dir of CRIU images (a checkpoint's
	// "checkpoint" dir): the container's processes are restored from it
	// ("<runtime> restore --detach"), not run afresh. CRIU's log goes to
	// RestoreWorkDir in the bundle.
	Restore string `json:"restore,omitempty"`
}

// RestoreWorkDir is the dir, in a restored container's bundle, of CRIU's log and
// statistics of the restore (restore.log, stats-restore).
const RestoreWorkDir = "criu-restore"

// Response answers a Request with a single JSON line.
type Response struct {
	State     string        `json:"state,omitempty"` // created, running or stopped
	Pid       int           `json:"pid,omitempty"`   // the container's init pid
	StartedAt time.Time     `json:"started_at,omitzero"`
	Exit      *exitrec.Exit `json:"exit,omitempty"` // set once the container exited
	// Stdin and TTY answer OpAttach: the session's input reaches the
	// container's stdin; the container runs on a terminal (resize works,
	// and its output all comes as stdout). A shim that predates them
	// leaves them false, so a client sends it nothing.
	Stdin bool `json:"stdin,omitempty"`
	TTY   bool `json:"tty,omitempty"`
	// RuntimeNanos answers OpCreate: how long the runtime command that
	// created (and started) the container took, for the phase trace.
	RuntimeNanos int64 `json:"runtime_nanos,omitempty"`
	// HandleNanos answers OpCreate: how long the shim took to answer,
	// from the request read to the answer written, RuntimeNanos included.
	HandleNanos int64 `json:"handle_nanos,omitempty"`
	// ShimExiting answers OpDelete (and OpShutdown, OpRelease): the shim has no
	// container left and exits once it has answered.
	ShimExiting bool   `json:"shim_exiting,omitempty"`
	Error       string `json:"error,omitempty"`
	Code        string `json:"code,omitempty"`
}

// Handshake is what the shim writes on its handshake pipe once it serves
// its socket (ShimPid set) or could not start (Error set).
type Handshake struct {
	ShimPid int    `json:"shim_pid,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ErrShimGone reports that no shim answers on the socket (it exited or was
// never started). It is errdefs.ErrUnavailable.
var ErrShimGone = fmt.Errorf("shim not running: %w", errdefs.ErrUnavailable)

// ErrUnsupported reports an op the shim left to the client.
var ErrUnsupported = fmt.Errorf("not done by the shim: %w", errdefs.ErrNotImplemented)

// ErrShimExiting reports a create refused by a shim that is exiting.
var ErrShimExiting = fmt.Errorf("shim is exiting: %w", errdefs.ErrUnavailable)

// Call sends one request about container id to the shim listening on
// socket and returns its answer. An error reported by the shim is classified with errdefs from its
// code; a shim that cannot be reached is ErrShimGone. ctx bounds the whole
// call, including a blocking OpWait.
func Call(ctx context.Context, socket, id, op string) (Response, error) {
	return Do(ctx, socket, Request{Op: op, ID: id})
}

// Do is Call with a whole request.
func Do(ctx context.Context, socket string, req Request) (Response, error) {
	op := req.Op
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("dial shim %s: %w", socket, ctx.Err())
		}
		return Response{}, fmt.Errorf("dial shim %s: %w: %w", socket, ErrShimGone, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return Response{}, callError(ctx, op, err)
	}
	// A small buffer: an OpWait keeps it for the container's whole run,
	// and answers are short (longer ones are read in several fills).
	line, err := bufio.NewReaderSize(conn, 256).ReadBytes('\n')
	if err != nil {
		return Response{}, callError(ctx, op, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("shim %s: decode response: %w", op, err)
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("shim %s: %w", op, codeError(resp.Code, resp.Error))
	}
	return resp, nil
}

func callError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("shim %s: %w", op, ctx.Err())
	}
	// The shim closed the connection without answering: it is exiting.
	return fmt.Errorf("shim %s: %w: %w", op, ErrShimGone, err)
}

func codeError(code, msg string) error {
	var kind error
	switch code {
	case CodeNotFound:
		kind = errdefs.ErrNotFound
	case CodeFailedPrecondition:
		kind = errdefs.ErrFailedPrecondition
	case CodeInvalidArgument:
		kind = errdefs.ErrInvalidArgument
	case CodeAlreadyExists:
		kind = errdefs.ErrAlreadyExists
	case CodeShimExiting:
		return fmt.Errorf("%s: %w", msg, ErrShimExiting)
	case CodeUnsupported:
		return fmt.Errorf("%s: %w", msg, ErrUnsupported)
	default:
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, kind)
}

// ErrorCode maps an error to the code a shim sends its client.
func ErrorCode(err error) string {
	switch {
	case errdefs.IsNotFound(err):
		return CodeNotFound
	case errdefs.IsFailedPrecondition(err):
		return CodeFailedPrecondition
	case errdefs.IsInvalidArgument(err):
		return CodeInvalidArgument
	case errdefs.IsAlreadyExists(err):
		return CodeAlreadyExists
	case errors.Is(err, ErrShimExiting):
		return CodeShimExiting
	case errors.Is(err, ErrUnsupported):
		return CodeUnsupported
	}
	return ""
}
