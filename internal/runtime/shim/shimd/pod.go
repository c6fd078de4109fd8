package shimd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// maxRequest caps a request line.
const maxRequest = 16 << 10

// creator creates the container o describes under the shim; the
// container is registered once it returns.
type creator func(id string, o shim.CreateOptions) (*ctr, error)

// pod is the shim's set of containers and its control socket. The shim
// exits once its set becomes empty after holding a container (the last one
// was deleted, or the first create failed), or when it held none for
// idleExit after start (crind died before asking for one).
type pod struct {
	log    *slog.Logger
	create creator

	// mu guards ctrs and exiting.
	mu sync.Mutex
	// ctrs holds the containers by id; a nil entry is one being created.
	ctrs    map[string]*ctr
	exiting bool

	quit     chan struct{} // closed once the shim is to exit
	quitOnce sync.Once
	conns    sync.WaitGroup
	// bg counts the goroutines that record exits and delete exited
	// containers from the runtime; the shim waits for them to finish.
	bg sync.WaitGroup
}

func newPod(log *slog.Logger, create creator) *pod {
	return &pod{log: log, create: create, ctrs: make(map[string]*ctr), quit: make(chan struct{})}
}

// exitWhenIdle makes the shim exit if no container was asked for within d.
func (p *pod) exitWhenIdle(d time.Duration) {
	time.AfterFunc(d, func() {
		p.mu.Lock()
		idle := len(p.ctrs) == 0 && !p.exiting
		if idle {
			p.exiting = true
		}
		p.mu.Unlock()
		if idle {
			p.log.Info("no container asked for; exiting", "after", d)
			p.stop()
		}
	})
}

func (p *pod) stop() { p.quitOnce.Do(func() { close(p.quit) }) }

// serve answers connections on l until l is closed; it returns after every
// connection it accepted has been answered.
func (p *pod) serve(l net.Listener) {
	defer p.conns.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.log.Warn("accept", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.conns.Go(func() { p.handle(c) })
	}
}

func (p *pod) handle(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(io.LimitReader(c, maxRequest)).ReadBytes('\n')
	if err != nil {
		return
	}
	start := time.Now()
	var req shim.Request
	var resp shim.Response
	var sess attachSession
	var cc *ctr
	if err := json.Unmarshal(line, &req); err != nil {
		resp = errorResponse(fmt.Errorf("decode request: %v: %w", err, errdefs.ErrInvalidArgument))
	} else if req.Op == shim.OpExec {
		p.execOp(c, req) // answers, then carries the session
		return
	} else {
		resp, cc, sess = p.dispatch(req, c)
	}
	if req.Op == shim.OpCreate {
		resp.HandleNanos = time.Since(start).Nanoseconds()
	}
	_ = writeResponse(c, resp)
	if req.Op == shim.OpAttach && resp.Error == "" {
		cc.streamAttach(c, sess)
	}
	if resp.ShimExiting {
		p.stop()
	}
}

// dispatch answers req; for an attach it also returns the container and
// the session to stream.
func (p *pod) dispatch(req shim.Request, c net.Conn) (shim.Response, *ctr, attachSession) {
	switch req.Op {
	case shim.OpCreate:
		return p.createOp(req), nil, attachSession{}
	case shim.OpShutdown:
		return p.shutdown(), nil, attachSession{}
	case shim.OpRelease:
		return p.releaseIfEmpty(), nil, attachSession{}
	}
	cc, err := p.lookup(req.ID)
	if err != nil {
		return errorResponse(err), nil, attachSession{}
	}
	switch req.Op {
	case shim.OpAttach:
		resp, sess := cc.attach(req)
		return resp, cc, sess
	case shim.OpDelete:
		return p.remove(cc), nil, attachSession{}
	case shim.OpKill:
		if err := cc.kill(req.Signal, req.All); err != nil {
			return errorResponse(err), nil, attachSession{}
		}
		return cc.snapshot(), nil, attachSession{}
	case shim.OpWait:
		// The caller gives up by closing its end; notice that so an
		// abandoned wait does not hold a goroutine until the exit.
		gone := make(chan struct{})
		go func() {
			_, _ = c.Read(make([]byte, 1))
			close(gone)
		}()
		return cc.dispatch(req.Op, gone), nil, attachSession{}
	}
	return cc.dispatch(req.Op, nil), nil, attachSession{}
}

func (p *pod) lookup(id string) (*ctr, error) {
	if id == "" {
		return nil, fmt.Errorf("request names no container: %w", errdefs.ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cc := p.ctrs[id]
	if cc == nil {
		return nil, fmt.Errorf("container %s: not under this shim: %w", id, errdefs.ErrNotFound)
	}
	return cc, nil
}

// checkCreate refuses a create request that names no usable container.
func checkCreate(req shim.Request) error {
	if req.Create == nil {
		return fmt.Errorf("create request without create options: %w", errdefs.ErrInvalidArgument)
	}
	id := req.ID
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") || len(id) > 128 {
		return fmt.Errorf("container id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(req.Create.Bundle) {
		return fmt.Errorf("bundle %q is not absolute: %w", req.Create.Bundle, errdefs.ErrInvalidArgument)
	}
	if req.Create.LogPath != "" && !filepath.IsAbs(req.Create.LogPath) {
		return fmt.Errorf("log path %q is not absolute: %w", req.Create.LogPath, errdefs.ErrInvalidArgument)
	}
	if req.Create.LogRoot != "" && !filepath.IsAbs(req.Create.LogRoot) {
		return fmt.Errorf("log root %q is not absolute: %w", req.Create.LogRoot, errdefs.ErrInvalidArgument)
	}
	return nil
}

// createOp creates a container under the shim. A shim that is exiting
// refuses (shim.ErrShimExiting); when the create fails and the shim has no
// other container, it exits after answering.
func (p *pod) createOp(req shim.Request) shim.Response {
	if err := checkCreate(req); err != nil {
		return errorResponse(err)
	}
	p.mu.Lock()
	switch _, taken := p.ctrs[req.ID]; {
	case p.exiting:
		p.mu.Unlock()
		return errorResponse(shim.ErrShimExiting)
	case taken:
		p.mu.Unlock()
		return errorResponse(fmt.Errorf("container %s: %w", req.ID, errdefs.ErrAlreadyExists))
	}
	p.ctrs[req.ID] = nil
	p.mu.Unlock()

	cc, err := p.create(req.ID, *req.Create)

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		delete(p.ctrs, req.ID)
		resp := errorResponse(err)
		resp.ShimExiting = p.emptyLocked()
		return resp
	}
	p.ctrs[req.ID] = cc
	resp := cc.snapshot()
	resp.RuntimeNanos = cc.took.Nanoseconds()
	return resp
}

// emptyLocked marks the shim exiting when it holds no container; p.mu is
// held.
func (p *pod) emptyLocked() bool {
	if len(p.ctrs) == 0 {
		p.exiting = true
	}
	return p.exiting
}

// remove drops a stopped container once the runtime deleted it; the shim
// exits after answering when it was the last.
func (p *pod) remove(cc *ctr) shim.Response {
	if st := cc.currentState(); st != shim.StateStopped {
		return errorResponse(fmt.Errorf("container %s is %s: %w", cc.id, st, errdefs.ErrFailedPrecondition))
	}
	<-cc.deleted
	resp := cc.snapshot()
	if cc.deleteErr != nil {
		// The client deletes it from the runtime itself.
		resp.Error, resp.Code = cc.deleteErr.Error(), ""
	}
	p.mu.Lock()
	if p.ctrs[cc.id] == cc {
		delete(p.ctrs, cc.id)
		cc.release()
	}
	resp.ShimExiting = p.emptyLocked()
	p.mu.Unlock()
	p.log.Info("container dropped", "container_id", cc.id, "shim_exiting", resp.ShimExiting)
	return resp
}

// shutdown makes the shim exit when every container it holds has stopped
// (those are dropped as by shim.OpDelete); otherwise it is refused.
func (p *pod) shutdown() shim.Response {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, cc := range p.ctrs {
		if cc == nil {
			return errorResponse(fmt.Errorf("container %s is being created: %w", id, errdefs.ErrFailedPrecondition))
		}
		if st := cc.currentState(); st != shim.StateStopped {
			return errorResponse(fmt.Errorf("container %s is %s: %w", id, st, errdefs.ErrFailedPrecondition))
		}
	}
	for id, cc := range p.ctrs {
		delete(p.ctrs, id)
		cc.release()
	}
	p.exiting = true
	return shim.Response{ShimExiting: true}
}

// releaseIfEmpty answers OpRelease: a shim that holds no container (one
// being created included) exits.
func (p *pod) releaseIfEmpty() shim.Response {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.ctrs); n > 0 {
		return errorResponse(fmt.Errorf("shim holds %d containers: %w", n, errdefs.ErrFailedPrecondition))
	}
	p.exiting = true
	return shim.Response{ShimExiting: true}
}

// writeResponse writes resp as the request's one-line answer.
func writeResponse(c net.Conn, resp shim.Response) error {
	data, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	_, err = c.Write(append(data, '\n'))
	return err
}
