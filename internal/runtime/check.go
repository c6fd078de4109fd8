package runtime

import "context"

// Checker is implemented by backends that can tell, before any pod uses
// them, that they cannot run containers on this host. crind asks once at
// start-up and reports a handler that fails as not ready, with the reason,
// instead of failing its pods one by one.
type Checker interface {
	// Check returns nil when the runtime can run containers here, else an
	// error (FailedPrecondition) saying why.
	Check(ctx context.Context) error
}
