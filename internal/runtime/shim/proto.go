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
)

// Operations understood by a shim's control socket.
const (
	OpState     = "state"      // report the current state at once
	OpWait      = "wait"       // block until the container has exited
	OpStart     = "start"      // start the created container
	OpReopenLog = "reopen_log" // close and reopen the CRI log file
	OpShutdown  = "shutdown"   // exit the shim; refused while the container lives
	OpAttach    = "attach"     // stream the container's output from now on (see Attach)
)

// Error codes carried in Response.Code so the client can classify errors.
const (
	CodeNotFound           = "not_found"
	CodeFailedPrecondition = "failed_precondition"
	CodeInvalidArgument    = "invalid_argument"
)

// Request is one call on the control socket: a single JSON line.
type Request struct {
	Op string `json:"op"`
	// Stdin asks, with OpAttach, for the session's input to reach the
	// container's stdin.
	Stdin bool `json:"stdin,omitempty"`
}

// Response answers a Request with a single JSON line.
type Response struct {
	State     string    `json:"state,omitempty"` // created, running or stopped
	Pid       int       `json:"pid,omitempty"`   // the container's init pid
	StartedAt time.Time `json:"started_at,omitzero"`
	Exit      *Exit     `json:"exit,omitempty"` // set once the container exited
	// Stdin and TTY answer OpAttach: the session's input reaches the
	// container's stdin; the container runs on a terminal (resize works,
	// and its output all comes as stdout). A shim that predates them
	// leaves them false, so a client sends it nothing.
	Stdin bool   `json:"stdin,omitempty"`
	TTY   bool   `json:"tty,omitempty"`
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Exit is how a container's init process ended. It is kept by the shim and
// written to the exit file, so it survives the shim.
type Exit struct {
	Pid        int       `json:"pid"`
	ExitCode   int32     `json:"exit_code"` // 128+signal when killed by a signal
	Signal     int       `json:"signal,omitempty"`
	OOMKilled  bool      `json:"oom_killed"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at"`
	// Reason and Message are set only when someone other than the shim
	// wrote the record: crind, finding the shim dead (see
	// runtime.ReasonShimDied). A shim's own record leaves them empty.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Handshake is what the shim writes on its handshake pipe once the container
// is created (Pid set) or creating it failed (Error set).
type Handshake struct {
	Pid     int    `json:"pid,omitempty"`
	ShimPid int    `json:"shim_pid,omitempty"`
	Error   string `json:"error,omitempty"`
}

// ErrShimGone reports that no shim answers on the socket (it exited or was
// never started). It is errdefs.ErrUnavailable.
var ErrShimGone = fmt.Errorf("shim not running: %w", errdefs.ErrUnavailable)

// Call sends one request to the shim listening on socket and returns its
// answer. An error reported by the shim is classified with errdefs from its
// code; a shim that cannot be reached is ErrShimGone. ctx bounds the whole
// call, including a blocking OpWait.
func Call(ctx context.Context, socket string, op string) (Response, error) {
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

	if err := json.NewEncoder(conn).Encode(Request{Op: op}); err != nil {
		return Response{}, callError(ctx, op, err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
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
	default:
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, kind)
}

// errorCode maps an error to the code sent to the client.
func errorCode(err error) string {
	switch {
	case errdefs.IsNotFound(err):
		return CodeNotFound
	case errdefs.IsFailedPrecondition(err):
		return CodeFailedPrecondition
	case errdefs.IsInvalidArgument(err):
		return CodeInvalidArgument
	}
	return ""
}
