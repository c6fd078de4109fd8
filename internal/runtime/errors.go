package runtime

import "fmt"

// RuntimeError is a failed OCI runtime command. Msg is what the runtime
// itself reported (its JSON log and stderr).
type RuntimeError struct {
	Runtime string   // handler name
	Args    []string // the command after the global flags
	Msg     string
	Err     error // the exec error (exit status, timeout)
}

func (e *RuntimeError) Error() string {
	cmd := ""
	if len(e.Args) > 0 {
		cmd = e.Args[0]
	}
	if e.Msg == "" {
		return fmt.Sprintf("%s %s: %v", e.Runtime, cmd, e.Err)
	}
	return fmt.Sprintf("%s %s: %s (%v)", e.Runtime, cmd, e.Msg, e.Err)
}

func (e *RuntimeError) Unwrap() error { return e.Err }
