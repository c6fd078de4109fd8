package serving

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error classification: the one place an error becomes a gRPC code (see
// docs/errors.md for the table). It walks the error chain itself instead of
// relying on errors.Is / errgrpc, because a chain may hold members those do
// not survive: an Unwrap that returns nil (*net.DNSError), Unwrap() []error
// with nil members, typed nil pointers whose methods panic, or a cycle. The
// walk is bounded (maxChainNodes, maxChainDepth) and recovers from any
// panic of a member's methods, so classifying never fails.

// maxChainNodes and maxChainDepth bound the walk of one error chain: a
// cycle ends there. Real chains are a few members deep.
const (
	maxChainNodes = 512
	maxChainDepth = 64
)

// MaxStatusMessage caps the message of a gRPC status crind returns: an
// error may quote a client's huge input.
const MaxStatusMessage = 16 << 10

// Status maps err to the gRPC status returned to the client: its code by
// Code, its message err.Error() capped at MaxStatusMessage. It never
// fails: an Error method that panics gives a placeholder message.
func Status(err error) *status.Status {
	return status.New(Code(err), elide(errorText(err), MaxStatusMessage))
}

// Code maps an error chain to a gRPC code, in passes over the whole
// chain, each taking the outermost member it recognises:
//
//  1. an errdefs class (or a member carrying a gRPC status, or one whose
//     Is method names an errdefs sentinel);
//  2. context.DeadlineExceeded / context.Canceled;
//  3. ENOSPC / EDQUOT: ResourceExhausted;
//  4. network failures (DNS, refused or reset connections, unreachable
//     hosts, timeouts): Unavailable.
//
// Anything else, and nil members only, is Unknown. A nil err is OK.
func Code(err error) (c codes.Code) {
	if err == nil {
		return codes.OK
	}
	defer func() {
		if recover() != nil {
			c = codes.Unknown
		}
	}()
	for _, pass := range []func(error) (codes.Code, bool){classOf, contextClass, diskClass, networkClass} {
		if c, ok := firstInChain(err, pass); ok {
			return c
		}
	}
	return codes.Unknown
}

// firstInChain returns the class of the first member of err's chain, depth
// first and outermost first (the order of errors.Is), that match
// recognises.
func firstInChain(err error, match func(error) (codes.Code, bool)) (codes.Code, bool) {
	var found codes.Code
	ok := walkChain(err, func(e error) bool {
		c, hit := safeMatch(match, e)
		if hit {
			found = c
		}
		return hit
	})
	return found, ok
}

// walkChain calls visit on err and on every error it wraps, depth first,
// outermost first, until visit returns true (then it returns true). It
// goes at most maxChainDepth deep and visits at most maxChainNodes members,
// so a cycle ends and does not hide its siblings. nil members are skipped;
// a member whose Unwrap panics is treated as a leaf.
func walkChain(err error, visit func(error) bool) bool {
	type item struct {
		err   error
		depth int
	}
	stack := []item{{err, 0}}
	for n := 0; len(stack) > 0 && n < maxChainNodes; n++ {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if visit(it.err) {
			return true
		}
		if it.depth >= maxChainDepth {
			continue
		}
		kids := unwrapAll(it.err)
		// Pushed in reverse so the first wrapped error is visited next.
		for i := len(kids) - 1; i >= 0; i-- {
			if kids[i] != nil && len(stack) < maxChainNodes {
				stack = append(stack, item{kids[i], it.depth + 1})
			}
		}
	}
	return false
}

// unwrapAll returns what e wraps (nil or empty for a leaf), surviving an
// Unwrap that panics.
func unwrapAll(e error) (kids []error) {
	defer func() {
		if recover() != nil {
			kids = nil
		}
	}()
	switch u := e.(type) { //nolint:errorlint // one chain member; walkChain does the unwrapping
	case interface{ Unwrap() error }:
		if k := u.Unwrap(); k != nil {
			return []error{k}
		}
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	}
	return nil
}

func safeMatch(match func(error) (codes.Code, bool), e error) (c codes.Code, ok bool) {
	defer func() {
		if recover() != nil {
			c, ok = codes.Unknown, false
		}
	}()
	return match(e)
}

// The errdefs classes, recognised by the marker methods errdefs' sentinels
// and compatible error types (Moby's, containerd's) implement.
type (
	unknownClass            interface{ Unknown() }
	invalidArgumentClass    interface{ InvalidParameter() }
	notFoundClass           interface{ NotFound() }
	alreadyExistsClass      interface{ AlreadyExists() }
	permissionDeniedClass   interface{ Forbidden() }
	resourceExhaustedClass  interface{ ResourceExhausted() }
	failedPreconditionClass interface{ FailedPrecondition() }
	conflictClass           interface{ Conflict() }
	notModifiedClass        interface{ NotModified() }
	abortedClass            interface{ Aborted() }
	outOfRangeClass         interface{ OutOfRange() }
	notImplementedClass     interface{ NotImplemented() }
	internalClass           interface{ System() }
	unavailableClass        interface{ Unavailable() }
	dataLossClass           interface{ DataLoss() }
	unauthenticatedClass    interface{ Unauthorized() }
)

// errdefsSentinels are the errdefs sentinels by code, for members that
// claim a class through an Is method instead of a marker.
var errdefsSentinels = []struct {
	target error
	code   codes.Code
}{
	{errdefs.ErrInvalidArgument, codes.InvalidArgument},
	{errdefs.ErrNotFound, codes.NotFound},
	{errdefs.ErrAlreadyExists, codes.AlreadyExists},
	{errdefs.ErrPermissionDenied, codes.PermissionDenied},
	{errdefs.ErrResourceExhausted, codes.ResourceExhausted},
	{errdefs.ErrFailedPrecondition, codes.FailedPrecondition},
	{errdefs.ErrConflict, codes.FailedPrecondition},
	{errdefs.ErrNotModified, codes.FailedPrecondition},
	{errdefs.ErrAborted, codes.Aborted},
	{errdefs.ErrOutOfRange, codes.OutOfRange},
	{errdefs.ErrNotImplemented, codes.Unimplemented},
	{errdefs.ErrInternal, codes.Internal},
	{errdefs.ErrUnavailable, codes.Unavailable},
	{errdefs.ErrDataLoss, codes.DataLoss},
	{errdefs.ErrUnauthenticated, codes.Unauthenticated},
}

// classOf is pass 1: the errdefs class of one chain member.
func classOf(e error) (codes.Code, bool) {
	switch e.(type) { //nolint:errorlint // one chain member; walkChain does the unwrapping
	case invalidArgumentClass:
		return codes.InvalidArgument, true
	case notFoundClass:
		return codes.NotFound, true
	case alreadyExistsClass:
		return codes.AlreadyExists, true
	case permissionDeniedClass:
		return codes.PermissionDenied, true
	case resourceExhaustedClass:
		return codes.ResourceExhausted, true
	case failedPreconditionClass, conflictClass, notModifiedClass:
		return codes.FailedPrecondition, true
	case abortedClass:
		return codes.Aborted, true
	case outOfRangeClass:
		return codes.OutOfRange, true
	case notImplementedClass:
		return codes.Unimplemented, true
	case internalClass:
		return codes.Internal, true
	case unavailableClass:
		return codes.Unavailable, true
	case dataLossClass:
		return codes.DataLoss, true
	case unauthenticatedClass:
		return codes.Unauthenticated, true
	case unknownClass:
		return codes.Unknown, true
	}
	if gs, ok := e.(interface{ GRPCStatus() *status.Status }); ok { //nolint:errorlint // one chain member; walkChain does the unwrapping
		if st := gs.GRPCStatus(); st != nil && st.Code() != codes.OK && st.Code() != codes.Unknown {
			return st.Code(), true
		}
	}
	if is, ok := e.(interface{ Is(error) bool }); ok { //nolint:errorlint // one chain member; walkChain does the unwrapping
		for _, s := range errdefsSentinels {
			if is.Is(s.target) {
				return s.code, true
			}
		}
	}
	return codes.Unknown, false
}

// contextClass is pass 2: a context's end.
func contextClass(e error) (codes.Code, bool) {
	// Identity, not errors.Is: e is one member of a chain walkChain walks
	// with a cycle guard, and errors.Is would loop on a cyclic chain.
	switch e {
	case context.DeadlineExceeded: //nolint:errorlint // see above
		return codes.DeadlineExceeded, true
	case context.Canceled: //nolint:errorlint // see above
		return codes.Canceled, true
	}
	switch e.(type) { //nolint:errorlint // one chain member; walkChain does the unwrapping
	case interface{ DeadlineExceeded() }:
		return codes.DeadlineExceeded, true
	case interface{ Cancelled() }:
		return codes.Canceled, true
	}
	return codes.Unknown, false
}

// diskClass is pass 3: a full disk or an exhausted quota.
func diskClass(e error) (codes.Code, bool) {
	if en, ok := e.(syscall.Errno); ok && (en == syscall.ENOSPC || en == syscall.EDQUOT) { //nolint:errorlint // one chain member; walkChain does the unwrapping
		return codes.ResourceExhausted, true
	}
	return codes.Unknown, false
}

// networkClass is pass 4: a peer that cannot be reached now (a registry,
// a mirror, a CDN host) may be reachable later.
func networkClass(e error) (codes.Code, bool) {
	switch v := e.(type) { //nolint:errorlint // one chain member; walkChain does the unwrapping
	case *net.DNSError:
		return codes.Unavailable, true
	case syscall.Errno:
		switch v {
		case syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
			syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT:
			return codes.Unavailable, true
		}
	case interface{ Timeout() bool }:
		if v.Timeout() {
			return codes.Unavailable, true
		}
	}
	return codes.Unknown, false
}

// errorText is err.Error(), or a placeholder when that panics (a typed
// nil pointer whose Error dereferences it).
func errorText(err error) (s string) {
	if err == nil {
		return ""
	}
	defer func() {
		if p := recover(); p != nil {
			s = fmt.Sprintf("%T (its Error method panicked: %v)", err, p)
		}
	}()
	return err.Error()
}

// elide caps s at about max bytes by cutting out its middle, which keeps
// both the field an error names (its start) and the cause (its end). The
// result is valid UTF-8.
func elide(s string, max int) string {
	if len(s) <= max {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	const mark = " …[%d bytes elided]… "
	head := max * 3 / 4
	tail := max - head
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	t := len(s) - tail
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	out := s[:head] + fmt.Sprintf(mark, t-head) + s[t:]
	return strings.ToValidUTF8(out, "\uFFFD")
}
