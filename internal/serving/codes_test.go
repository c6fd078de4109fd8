package serving

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nilUnwrap is a chain member whose Unwrap returns nil, like a
// *net.DNSError without UnwrapErr.
type nilUnwrap struct{}

func (nilUnwrap) Error() string { return "nil unwrap" }
func (nilUnwrap) Unwrap() error { return nil }

// cyclic wraps itself (through next), forever.
type cyclic struct{ next error }

func (c *cyclic) Error() string { return "cyclic" }
func (c *cyclic) Unwrap() error { return c.next }

// panicky panics in every method.
type panicky struct{}

func (panicky) Error() string { panic("Error") }
func (panicky) Unwrap() error { panic("Unwrap") }
func (panicky) Timeout() bool { panic("Timeout") }
func (panicky) Is(error) bool { panic("Is") }

// isNotFound claims the errdefs class through an Is method only.
type isNotFound struct{}

func (isNotFound) Error() string        { return "gone" }
func (isNotFound) Is(target error) bool { return target == errdefs.ErrNotFound }
func (isNotFound) Unwrap() []error      { return []error{nil, nil} }

// lookupErr is a real resolver failure for a host that cannot exist.
func lookupErr(t testing.TB) error {
	_, err := net.LookupHost("nosuchhost.invalid")
	var dns *net.DNSError
	if !errors.As(err, &dns) {
		t.Skipf("LookupHost(nosuchhost.invalid) = %v, not a *net.DNSError", err)
	}
	return err
}

func TestClassify(t *testing.T) {
	dns := lookupErr(t)
	urlDNS := &url.Error{Op: "Get", URL: "https://nosuchhost.invalid/v2/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: dns}}
	cyc := &cyclic{}
	cyc.next = cyc
	var nilURL *url.Error
	var nilDNS *net.DNSError
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"plain", errors.New("boom"), codes.Unknown},
		{"errdefs not found", fmt.Errorf("image x: %w", errdefs.ErrNotFound), codes.NotFound},
		{"errdefs with message", errdefs.ErrInvalidArgument.WithMessage("bad"), codes.InvalidArgument},
		{"errdefs conflict", errdefs.ErrConflict, codes.FailedPrecondition},
		{"errdefs internal", errdefs.ErrInternal, codes.Internal},
		{"errdefs unknown", errdefs.ErrUnknown, codes.Unknown},
		{"outermost class wins", fmt.Errorf("a: %w", fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, errdefs.ErrNotFound)), codes.InvalidArgument},
		{"class beats network", fmt.Errorf("pull: %w", errors.Join(urlDNS, fmt.Errorf("tag: %w", errdefs.ErrNotFound))), codes.NotFound},
		{"class through Is", fmt.Errorf("x: %w", isNotFound{}), codes.NotFound},
		{"grpc status", fmt.Errorf("shim: %w", status.Error(codes.AlreadyExists, "dup")), codes.AlreadyExists},
		{"deadline", fmt.Errorf("pull: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"canceled", fmt.Errorf("pull: %w", context.Canceled), codes.Canceled},
		{"class beats context", errors.Join(context.Canceled, errdefs.ErrUnavailable), codes.Unavailable},
		{"enospc", &fs.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, codes.ResourceExhausted},
		{"edquot", fmt.Errorf("unpack: %w", &os.LinkError{Op: "link", Old: "a", New: "b", Err: syscall.EDQUOT}), codes.ResourceExhausted},
		{"real dns error", dns, codes.Unavailable},
		{"url error wrapping real dns error", fmt.Errorf("resolve: %w", urlDNS), codes.Unavailable},
		// The shape that panicked errgrpc.ToGRPC: a join whose second
		// member leads to an Unwrap returning nil.
		{"dns in second joined member", fmt.Errorf("pull: %w", errors.Join(errors.New("mirror: 404"), fmt.Errorf("upstream: %w", urlDNS))), codes.Unavailable},
		{"two %w with dns", fmt.Errorf("%w; %w", errors.New("mirror"), &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}), codes.Unavailable},
		{"connection refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, codes.Unavailable},
		{"i/o timeout", fmt.Errorf("read blob: %w", os.ErrDeadlineExceeded), codes.Unavailable},
		{"nil unwrap only", fmt.Errorf("x: %w", nilUnwrap{}), codes.Unknown},
		{"join of nils", errors.Join(nil, nilUnwrap{}, nil), codes.Unknown},
		{"join with nil members", joined{nil, nil, fmt.Errorf("a: %w", errdefs.ErrNotFound)}, codes.NotFound},
		{"cycle", fmt.Errorf("x: %w", cyc), codes.Unknown},
		{"cycle then class", errors.Join(cyc, errdefs.ErrAborted), codes.Aborted},
		{"typed nil url error", fmt.Errorf("x: %w", nilURL), codes.Unknown},
		{"typed nil dns error", error(nilDNS), codes.Unavailable},
		{"panicking member", fmt.Errorf("x: %w", panicky{}), codes.Unknown},
		{"panicking member then class", errors.Join(panicky{}, errdefs.ErrDataLoss), codes.DataLoss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != tc.want {
				t.Errorf("Code(%s) = %s, want %s", tc.name, got, tc.want)
			}
			if tc.err == nil {
				return
			}
			st := Status(tc.err)
			if st.Code() != tc.want {
				t.Errorf("toStatus code %s, want %s", st.Code(), tc.want)
			}
		})
	}
}

// joined is Unwrap() []error with whatever members it is given.
type joined []error

func (j joined) Error() string   { return "joined" }
func (j joined) Unwrap() []error { return j }

func TestToStatusMessage(t *testing.T) {
	huge := fmt.Errorf("config.metadata.name %q: too long: %w", strings.Repeat("é", 1<<20), errdefs.ErrInvalidArgument)
	st := Status(huge)
	if len(st.Message()) > MaxStatusMessage+64 {
		t.Errorf("message is %d bytes, want at most about %d", len(st.Message()), MaxStatusMessage)
	}
	for _, want := range []string{"config.metadata.name", "too long: invalid argument", "bytes elided"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message lacks %q", want)
		}
	}
	if !strings.HasPrefix(Status(panicky{}).Message(), "serving.panicky") {
		t.Errorf("message of an error whose Error panics: %q", Status(panicky{}).Message())
	}
}

// randomChain builds an error chain of the given size from every shape a
// chain may take, cycles included.
func randomChain(r *rand.Rand, size int) error {
	var nodes []error
	for i := 0; i < size; i++ {
		var kid error
		if len(nodes) > 0 && r.IntN(4) > 0 {
			kid = nodes[r.IntN(len(nodes))]
		}
		var nilURL *url.Error
		var e error
		switch r.IntN(14) {
		case 0:
			e = nil
		case 1:
			e = nilUnwrap{}
		case 2:
			e = fmt.Errorf("wrap: %w", kid)
		case 3:
			members := []error{kid, nil}
			if len(nodes) > 0 {
				members = append(members, nodes[r.IntN(len(nodes))])
			}
			e = errors.Join(members...)
		case 4:
			e = joined{nil, kid, nil}
		case 5:
			c := &cyclic{next: kid}
			if r.IntN(2) == 0 {
				c.next = c
			}
			e = c
		case 6:
			e = panicky{}
		case 7:
			e = nilURL
		case 8:
			e = &url.Error{Op: "Get", URL: "u", Err: kid}
		case 9:
			e = &net.DNSError{Err: "no such host", Name: "h", UnwrapErr: kid}
		case 10:
			e = []error{errdefs.ErrNotFound, errdefs.ErrUnavailable, context.Canceled, syscall.ENOSPC}[r.IntN(4)]
		case 11:
			e = &net.OpError{Op: "dial", Err: kid}
		case 12:
			e = fmt.Errorf("%w and %w", kid, kid)
		default:
			e = isNotFound{}
		}
		nodes = append(nodes, e)
	}
	if len(nodes) == 0 {
		return errors.New("empty")
	}
	return nodes[len(nodes)-1]
}

// TestClassifyNeverPanics feeds thousands of random chains to everything
// the interceptor does with an error.
func TestClassifyNeverPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		err := randomChain(r, 1+r.IntN(12))
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("chain %d (%#v) panicked: %v", i, err, p)
				}
			}()
			_ = Code(err)
			_ = Status(err).Err()
			_ = elide(errorText(err), 64)
		}()
	}
}

// FuzzClassify builds chains from fuzz input.
func FuzzClassify(f *testing.F) {
	f.Add(uint64(1), uint8(3))
	f.Add(uint64(42), uint8(12))
	f.Add(uint64(7), uint8(40))
	f.Fuzz(func(t *testing.T, seed uint64, size uint8) {
		err := randomChain(rand.New(rand.NewPCG(seed, uint64(size))), int(size%64))
		_ = Status(err)
	})
}

func TestElide(t *testing.T) {
	for _, tc := range []struct {
		in  string
		max int
	}{
		{"short", 10},
		{strings.Repeat("a", 100), 20},
		{strings.Repeat("日本", 100), 21},
		{"\xff\xfe bad utf8", 100},
	} {
		out := elide(tc.in, tc.max)
		if len(tc.in) <= tc.max && len(out) != len(strings.ToValidUTF8(tc.in, "\uFFFD")) {
			t.Errorf("elide(%q, %d) = %q, changed a short string", tc.in, tc.max, out)
		}
		if len(tc.in) > tc.max && len(out) > tc.max+40 {
			t.Errorf("elide(%d bytes, %d) = %d bytes", len(tc.in), tc.max, len(out))
		}
		if !utf8ValidString(out) {
			t.Errorf("elide(%q, %d) = %q, not valid UTF-8", tc.in, tc.max, out)
		}
	}
}

func utf8ValidString(s string) bool { return strings.ToValidUTF8(s, "") == s }
