package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
	"github.com/crin-dev/crin/internal/serving"
	"github.com/crin-dev/crin/internal/store"
)

// portForwardDialTimeout bounds connecting to a port inside a pod.
const portForwardDialTimeout = 10 * time.Second

// PortForward prepares forwarding to ports of a ready pod and returns the
// streaming server URL. An unknown pod is NotFound, one that is not ready
// FailedPrecondition, a port outside 1-65535 InvalidArgument.
func (s *Service) PortForward(ctx context.Context, r *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := s.streamingEnabled(); err != nil {
		return nil, err
	}
	if err := validatePorts(r.GetPort()); err != nil {
		return nil, err
	}
	rec, err := s.readySandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return s.stream.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: rec.ID, Port: r.GetPort()})
}

// validatePorts refuses a port outside 1-65535, naming it.
func validatePorts(ports []int32) error {
	for i, p := range ports {
		if p <= 0 || p > 65535 {
			return fmt.Errorf("port[%d] %d: must be 1-65535: %w", i, p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// readySandbox returns a copy of a ready pod's record.
func (s *Service) readySandbox(id string) (store.Sandbox, error) {
	sb, err := s.getSandboxExact(id)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb.mu.Lock()
	rec := *sb.rec
	sb.mu.Unlock()
	if rec.State != store.SandboxReady {
		return store.Sandbox{}, fmt.Errorf("pod sandbox %s is %s, not ready: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	return rec, nil
}

// PortForward connects to port on the pod's loopback, inside its network
// namespace (on the host for a host-network pod), and copies both ways
// until both directions ended or the streaming server stops.
func (r *streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) (err error) {
	defer serving.RecoverSession(ctx, r.s.log, r.s.opts.Metrics, "portforward", &err)
	ctx, done, err := r.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	if port <= 0 || port > 65535 {
		return fmt.Errorf("port %d: must be 1-65535: %w", port, errdefs.ErrInvalidArgument)
	}
	rec, err := r.s.readySandbox(podSandboxID)
	if err != nil {
		return err
	}
	conn, err := dialPod(ctx, rec.NetNS, port)
	if err != nil {
		return fmt.Errorf("port forward to pod %s port %d: %w", rec.ID, port, err)
	}
	defer conn.Close()
	r.s.log.DebugContext(ctx, "port forward", "pod_sandbox_id", rec.ID, "port", port)

	// Pod to client: the pod's EOF becomes the end of the stream's write
	// side, which tells the client the remote side is done.
	podDone := make(chan struct{})
	go func() {
		defer close(podDone)
		_, _ = io.Copy(stream, conn)
		_ = stream.Close()
	}()
	// Client to pod, on this goroutine: the client's EOF half-closes the
	// pod connection.
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	select {
	case <-ctx.Done():
		// Unblock both copies: the pod side by closing the
		// connection, the client side by resetting the stream.
		conn.Close()
		if rs, ok := stream.(interface{ Reset() error }); ok {
			_ = rs.Reset()
		}
	case <-podDone:
	}
	<-podDone
	<-clientDone
	return nil
}

// dialPod connects to port on the loopback of the network namespace at
// netns ("" is the host's), trying IPv4 then IPv6.
func dialPod(ctx context.Context, netns string, port int32) (net.Conn, error) {
	var conn net.Conn
	dial := func() error {
		d := net.Dialer{Timeout: portForwardDialTimeout}
		var errs []error
		for _, host := range []string{"127.0.0.1", "::1"} {
			c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
			if err == nil {
				conn = c
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	var err error
	if netns == "" {
		err = dial()
	} else {
		err = cni.InNetNS(netns, dial)
	}
	return conn, err
}
