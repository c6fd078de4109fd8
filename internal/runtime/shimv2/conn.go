package shimv2

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
)

// errShimGone means the shim's socket refused the connection or is gone.
var errShimGone = errors.New("shim is gone")

// conn is a ttrpc connection to one shim, shared by its containers.
type conn struct {
	client *ttrpc.Client
	task   task.TTRPCTaskService
	closed chan struct{} // closed when the connection ends
}

func (c *conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func isClosed(err error) bool {
	return errors.Is(err, ttrpc.ErrClosed) || errors.Is(err, net.ErrClosed)
}

// shimArgs are the flags every shim command takes.
func (r *Runtime) shimArgs(id string) []string {
	return []string{"-namespace", r.cfg.Namespace, "-address", r.cfg.StateDir,
		"-publish-binary", r.cfg.PublishBinary, "-id", id}
}

func (r *Runtime) shimCommand(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.cfg.Binary, args...)
	cmd.Dir = dir
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TTRPC_ADDRESS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

// startShim runs "<shim> ... start" in the bundle and returns the address
// it prints: a new shim's, or, for a container grouped with others, the
// running pod shim's.
func (r *Runtime) startShim(ctx context.Context, id, dir string) (string, error) {
	// Not cut short by ctx: the shim it forks must be seen to be undone.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
	defer cancel()
	cmd := r.shimCommand(sctx, dir, append(r.shimArgs(id), "start")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("start shim: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseStartOutput(stdout.Bytes())
}

// parseStartOutput reads the address a shim's start prints: the bare
// address (containerd-shim-runc-v2), or the JSON bootstrap parameters of
// containerd 2's shims (gVisor's: version 2, the address, the protocol,
// which must be ttrpc).
func parseStartOutput(out []byte) (string, error) {
	out = bytes.TrimSpace(out)
	addr := string(out)
	if bytes.HasPrefix(out, []byte("{")) {
		var p struct {
			Version  int    `json:"version"`
			Address  string `json:"address"`
			Protocol string `json:"protocol"`
		}
		if err := json.Unmarshal(out, &p); err != nil {
			return "", fmt.Errorf("start shim: decode %q: %w", out, err)
		}
		if p.Version != 2 || (p.Protocol != "" && p.Protocol != "ttrpc") {
			return "", fmt.Errorf("start shim: bootstrap version %d protocol %q: want version 2 over ttrpc", p.Version, p.Protocol)
		}
		addr = p.Address
	}
	if !strings.HasPrefix(addr, "unix://") {
		return "", fmt.Errorf("start shim: unexpected address %q", addr)
	}
	return addr, nil
}

// conn returns the connection to the shim at address, dialling it when
// there is none. A shim whose socket is gone or refuses is errShimGone.
func (r *Runtime) conn(ctx context.Context, address string) (*conn, error) {
	r.mu.Lock()
	c := r.conns[address]
	r.mu.Unlock()
	if c != nil && !c.isClosed() {
		return c, nil
	}
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok {
		return nil, fmt.Errorf("shim address %q: not a unix socket", address)
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("dial shim %s: %w", address, errShimGone)
		}
		return nil, fmt.Errorf("dial shim %s: %w", address, err)
	}
	closed := make(chan struct{})
	client := ttrpc.NewClient(nc, ttrpc.WithOnClose(func() { close(closed) }))
	nw := &conn{client: client, task: task.NewTTRPCTaskClient(client), closed: closed}
	r.mu.Lock()
	if old := r.conns[address]; old != nil && !old.isClosed() {
		r.mu.Unlock()
		client.Close()
		return old, nil
	}
	r.conns[address] = nw
	r.mu.Unlock()
	return nw, nil
}

// dropConn closes and forgets the connection to address.
func (r *Runtime) dropConn(address string) {
	r.mu.Lock()
	c := r.conns[address]
	delete(r.conns, address)
	r.mu.Unlock()
	if c != nil {
		c.client.Close()
	}
}

// isShim reports whether pid is a shim this Runtime started (its command
// line carries StateDir as -address). A zombie has no command line.
func (r *Runtime) isShim(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(data, []byte("\x00-address\x00"+r.cfg.StateDir+"\x00"))
}

// shimGone reports whether the shim of m is dead, giving a shim whose
// connection just closed a moment to finish dying.
func (r *Runtime) shimGone(ctx context.Context, m meta) bool {
	if m.ShimPid <= 0 {
		return true
	}
	deadline := time.Now().Add(shimGoneWait)
	for r.isShim(m.ShimPid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// shimDelete runs "<shim> ... delete" on the bundle of a container whose
// shim died: it removes the container from the OCI runtime.
func (r *Runtime) shimDelete(ctx context.Context, id, dir string) error {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	cmd := r.shimCommand(dctx, dir, append(r.shimArgs(id), "-bundle", dir, "delete")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("shim delete: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// stopShim waits for the shim of m to exit after Shutdown, kills it when
// it does not, and removes its socket.
func (r *Runtime) stopShim(ctx context.Context, m meta) {
	defer r.dropConn(m.Address)
	if m.ShimPid <= 0 {
		return // not known to be ours: its socket is left alone
	}
	deadline := time.Now().Add(shimExitWait)
	for r.isShim(m.ShimPid) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if r.isShim(m.ShimPid) {
		r.log.WarnContext(ctx, "killing shim that did not exit", "shim_pid", m.ShimPid)
		_ = unix.Kill(m.ShimPid, unix.SIGKILL)
		deadline = time.Now().Add(shimExitWait)
		for r.isShim(m.ShimPid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !r.isShim(m.ShimPid) {
		removeSocket(m.Address)
	}
}

// removeSocket removes the socket file of a dead shim (a shim whose
// bundle is gone cannot find it to remove it itself).
func removeSocket(address string) {
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return
	}
	if st, err := os.Lstat(path); err == nil && st.Mode().Type() == os.ModeSocket {
		_ = os.Remove(path)
	}
}
