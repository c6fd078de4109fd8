package shimv2

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/shim"
)

// cappedBuffer keeps the first max bytes written to it and drops the rest
// (the writer is never blocked: the process must not stall on its output).
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); b.max <= 0 || room >= len(p) {
		b.buf.Write(p)
	} else if room > 0 {
		b.buf.Write(p[:room])
	}
	return len(p), nil
}

// Exec runs req through the shim's Exec, Start and Wait and collects its
// output from two fifos. When req.Timeout expires the process is killed
// and the error wraps context.DeadlineExceeded.
func (r *Runtime) Exec(ctx context.Context, id string, req runtime.ExecRequest) (runtime.ExecResult, error) {
	var res runtime.ExecResult
	if len(req.Args) == 0 {
		return res, fmt.Errorf("exec in container %s: no args: %w", id, errdefs.ErrInvalidArgument)
	}
	dir, m, err := r.known(id)
	if err != nil {
		return res, err
	}
	procAny, err := execProcess(dir, req.Args)
	if err != nil {
		return res, fmt.Errorf("exec in container %s: %w", id, err)
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return res, fmt.Errorf("exec in container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	execID := "exec-" + hex.EncodeToString(rnd[:])

	outs := []*cappedBuffer{{max: req.MaxOutput}, {max: req.MaxOutput}}
	var readers, holders []*os.File
	var paths []string
	defer func() {
		for _, f := range append(readers, holders...) {
			_ = f.Close()
		}
		for _, p := range paths {
			_ = os.Remove(p)
		}
	}()
	for _, stream := range []string{"stdout", "stderr"} {
		p := filepath.Join(dir, "."+execID+"-"+stream)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return res, fmt.Errorf("exec in container %s: %w", id, err)
		}
		paths = append(paths, p)
		f, err := openFifoReader(p)
		if err != nil {
			return res, fmt.Errorf("exec in container %s: %w", id, err)
		}
		readers = append(readers, f)
		h, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return res, fmt.Errorf("exec in container %s: %w", id, err)
		}
		holders = append(holders, h)
	}
	copied := make(chan struct{}, len(readers))
	for i, f := range readers {
		go func() {
			_, _ = io.Copy(outs[i], f)
			copied <- struct{}{}
		}()
	}
	// The copies end by EOF, or when the deferred Close of the readers
	// unblocks them: wait for them before the buffers are read.
	waitCopies := func(d time.Duration) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for n := 0; n < len(readers); n++ {
			select {
			case <-copied:
			case <-timer.C:
				for _, f := range readers {
					_ = f.Close()
				}
				for ; n < len(readers); n++ {
					<-copied
				}
				return
			}
		}
	}

	cctx, cancel := r.callCtx(ctx)
	defer cancel()
	if _, err := c.task.Exec(cctx, &task.ExecProcessRequest{
		ID: id, ExecID: execID, Stdout: paths[0], Stderr: paths[1], Spec: procAny,
	}); err != nil {
		waitCopies(0)
		return res, fmt.Errorf("exec in container %s: %w", id, errgrpc.ToNative(err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
		defer cancel()
		if _, err := c.task.Delete(dctx, &task.DeleteRequest{ID: id, ExecID: execID}); err != nil {
			if err = errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
				r.log.WarnContext(ctx, "delete exec process", "container_id", id, "exec_id", execID, "error", err)
			}
		}
	}()
	if _, err := c.task.Start(cctx, &task.StartRequest{ID: id, ExecID: execID}); err != nil {
		waitCopies(0)
		return res, fmt.Errorf("exec in container %s: %w", id, errgrpc.ToNative(err))
	}
	for _, h := range holders {
		_ = h.Close()
	}
	holders = nil

	wctx := ctx
	if req.Timeout > 0 {
		var wcancel context.CancelFunc
		wctx, wcancel = context.WithTimeout(ctx, req.Timeout)
		defer wcancel()
	}
	resp, werr := c.task.Wait(wctx, &task.WaitRequest{ID: id, ExecID: execID})
	if werr != nil && wctx.Err() != nil {
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
		_, _ = c.task.Kill(kctx, &task.KillRequest{ID: id, ExecID: execID, Signal: uint32(syscall.SIGKILL)})
		_, _ = c.task.Wait(kctx, &task.WaitRequest{ID: id, ExecID: execID})
		kcancel()
		waitCopies(ioDrainWait)
		res.Stdout, res.Stderr = outs[0].buf.Bytes(), outs[1].buf.Bytes()
		err := ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded
		}
		return res, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if werr != nil {
		waitCopies(0)
		return res, fmt.Errorf("exec in container %s: %w", id, errgrpc.ToNative(werr))
	}
	waitCopies(ioDrainWait)
	res.Stdout, res.Stderr = outs[0].buf.Bytes(), outs[1].buf.Bytes()
	res.ExitCode = int32(resp.GetExitStatus())
	return res, nil
}

// execProcess is the container's process spec with args replaced, as the
// shim takes it.
func execProcess(dir string, args []string) (*anypb.Any, error) {
	data, err := os.ReadFile(filepath.Join(dir, shim.ConfigFile))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("bundle has no process: %w", errdefs.ErrFailedPrecondition)
	}
	p := *spec.Process
	p.Args, p.Terminal, p.ConsoleSize = args, false, nil
	data, err = json.Marshal(&p)
	if err != nil {
		return nil, err
	}
	return &anypb.Any{TypeUrl: processURL, Value: data}, nil
}
