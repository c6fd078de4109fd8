package image

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ErrUnsafeEntry is wrapped by the errors of Pull for layer entries that
// would be written outside the layer root: "..", an absolute path, or a path
// through a symlink that leads out. It wraps errdefs.ErrInvalidArgument: an
// image holding such an entry can never be pulled.
var ErrUnsafeEntry error = unsafeEntryError{}

type unsafeEntryError struct{}

func (unsafeEntryError) Error() string { return "layer entry escapes the layer root" }
func (unsafeEntryError) Unwrap() error { return errdefs.ErrInvalidArgument }

// ErrBadEntry is wrapped by the errors of Pull for layer entries no file
// system can hold or no OCI layer may have: an empty name, a NUL in it, a
// name longer than NAME_MAX (255 bytes) or a path longer than PATH_MAX, a
// whiteout that names nothing (".wh.", ".wh..", ".wh..."). It wraps
// errdefs.ErrInvalidArgument: the image can never be pulled, so kubelet
// must not retry it.
var ErrBadEntry error = badEntryError{}

type badEntryError struct{}

func (badEntryError) Error() string { return "layer entry cannot be unpacked" }
func (badEntryError) Unwrap() error { return errdefs.ErrInvalidArgument }

// pullError is what Pull returns: the whole message of the failure, and a
// chain that holds only its class (an errdefs error, a context error,
// ErrUnsafeEntry or ErrBadEntry). The errors of net and of the registry client can hold
// links that error mappers cannot walk (a *net.DNSError's Unwrap returns
// nil, which crashed errgrpc), so none of them is kept in the chain.
type pullError struct {
	msg   string
	class error
}

func (e *pullError) Error() string { return e.msg }
func (e *pullError) Unwrap() error { return e.class }

// settle turns err into a pullError with its class (see classOf).
func settle(err error) error {
	if err == nil {
		return nil
	}
	var pe *pullError
	if errors.As(err, &pe) && err.Error() == pe.msg {
		return pe
	}
	return &pullError{msg: err.Error(), class: classOf(err)}
}

// classOf is the class of a pull failure: an unsafe layer entry, a full
// disk (errdefs.ErrResourceExhausted), the errdefs or context class the
// chain already carries, an unreachable host (errdefs.ErrUnavailable), or
// errdefs.ErrUnknown.
func classOf(err error) error {
	switch {
	case errors.Is(err, ErrUnsafeEntry):
		return ErrUnsafeEntry
	case errors.Is(err, ErrBadEntry):
		return ErrBadEntry
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.ErrResourceExhausted
	}
	if c := errdefs.Resolve(err); !errors.Is(c, errdefs.ErrUnknown) {
		return c
	}
	if unreachable(err) {
		return errdefs.ErrUnavailable
	}
	return errdefs.ErrUnknown
}

// unreachable reports whether err is a failure to reach a host: a name
// that does not resolve, a refused or reset connection, a timeout.
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var netErr net.Error
	return errors.As(err, &dnsErr) || errors.As(err, &opErr) ||
		(errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// classify wraps an error of the registry client with its errdefs class.
// An error that already carries a class (a context error, a body over its
// cap) keeps it. Anything else the client reports is a registry that could
// not serve the request: errdefs.ErrUnavailable.
func classify(err error) error {
	if !errors.Is(errdefs.Resolve(err), errdefs.ErrUnknown) {
		return err
	}
	var te *transport.Error
	if errors.As(err, &te) {
		if c := transportClass(te); c != nil {
			return fmt.Errorf("%w: %w", c, err)
		}
		return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no child with platform"):
		return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
	case isDigestMismatch(msg):
		return fmt.Errorf("%w: %w", errdefs.ErrDataLoss, err)
	}
	return fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
}

// transportClass is the class of a registry's error answer, or nil.
func transportClass(te *transport.Error) error {
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
			return errdefs.ErrNotFound
		case transport.UnauthorizedErrorCode:
			return errdefs.ErrUnauthenticated
		case transport.DeniedErrorCode:
			return errdefs.ErrPermissionDenied
		case transport.TooManyRequestsErrorCode:
			return errdefs.ErrResourceExhausted
		}
	}
	switch te.StatusCode {
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated
	case http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	case http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	}
	return nil
}

// isDigestMismatch recognizes the registry client's verification failures
// (its error types are internal): content whose digest or size is not the
// one its descriptor names.
func isDigestMismatch(msg string) bool {
	return strings.Contains(msg, "error verifying") ||
		strings.Contains(msg, "does not match requested digest") ||
		strings.Contains(msg, "does not match expected size")
}
