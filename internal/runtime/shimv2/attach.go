package shimv2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime"
	"github.com/crin-dev/crin/internal/runtime/crilog"
	"github.com/crin-dev/crin/internal/runtime/exitrec"
)

var _ runtime.Attacher = (*Runtime)(nil)

// attachPoll is how often an attached client's log is read again when it
// had nothing new.
const attachPoll = 50 * time.Millisecond

// Attach follows the container's CRI log from its current end and writes
// the content of each record to req's writers, by stream, until the
// container's exit is recorded (its output is then all in the log), its
// logger is gone, ctx ends, or, for a request with no writer, its stdin
// ends. It follows a log rotated by renaming to the new file. req.Stdin
// goes to the container's stdin when it was created with one
// (relayAttachInput), and req.Resize to its terminal. A container that has
// exited is errdefs.ErrFailedPrecondition. A container created without a
// log path has a private one for this (privateLog).
func (r *Runtime) Attach(ctx context.Context, id string, req runtime.AttachRequest) error {
	dir, m, err := r.known(id)
	if err != nil {
		return err
	}
	if _, err := exitrec.Read(dir); err == nil || loggerPid(dir) == 0 {
		return fmt.Errorf("attach to container %s: its output has ended: %w", id, errdefs.ErrFailedPrecondition)
	}
	inputDone, stop, err := r.relayInput(ctx, id, dir, m, req)
	if err != nil {
		return err
	}
	defer stop()
	if req.Stdout == nil && req.Stderr == nil && inputDone != nil {
		select {
		case <-inputDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f, err := openLogRead(m)
	if err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	defer func() { f.Close() }()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("attach to container %s: %w", id, err)
	}
	outs := map[string]io.Writer{crilog.StreamStdout: req.Stdout, crilog.StreamStderr: req.Stderr}
	br := bufio.NewReader(f)
	var pending []byte // a record not yet ended by its newline
	tick := time.NewTicker(attachPoll)
	defer tick.Stop()
	for {
		// Checked before reading: the exit is recorded once the logger
		// read all the container wrote (waitLogger), so what is in the
		// log then is read in this round.
		_, err := exitrec.Read(dir)
		ended := err == nil || loggerPid(dir) == 0
		for {
			line, err := br.ReadSlice('\n')
			pending = append(pending, line...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				break // end of what the logger wrote so far
			}
			if err := writeRecord(outs, pending); err != nil {
				return fmt.Errorf("attach to container %s: %w", id, err)
			}
			pending = pending[:0]
		}
		if ended {
			return nil
		}
		if rotated(f, m.LogPath) {
			nf, err := openLogRead(m)
			if err == nil {
				f.Close()
				f, pending = nf, pending[:0]
				br.Reset(f)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// relayInput starts relaying req's stdin (relayAttachInput) and terminal
// sizes to the container. inputDone, when req has stdin, closes when its
// copy ended; stop ends the size relay. The stdin copy is not waited for:
// a Read of the client's stream cannot be interrupted; the stream's end
// ends it.
func (r *Runtime) relayInput(ctx context.Context, id, dir string, m meta, req runtime.AttachRequest) (inputDone <-chan struct{}, stop func(), err error) {
	stop = func() {}
	if req.Stdin == nil && req.Resize == nil {
		return nil, stop, nil
	}
	c, err := r.conn(ctx, m.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("attach to container %s: %w: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	if req.Stdin != nil {
		done := make(chan struct{})
		inputDone = done
		go func() {
			defer close(done)
			if m.Stdin {
				r.relayAttachInput(ctx, c, id, dir, m, req.Stdin)
			} else {
				_, _ = io.Copy(io.Discard, req.Stdin)
			}
		}()
	}
	if req.Resize != nil {
		rctx, cancel := context.WithCancel(ctx)
		stop = cancel
		go r.relayResizes(rctx, c, id, "", req.Resize)
	}
	return inputDone, stop, nil
}

// writeRecord writes the content of one CRI log record,
// "<time> <stream> <tag> <content>\n", to its stream's writer; a full (F)
// record ends a line.
func writeRecord(outs map[string]io.Writer, rec []byte) error {
	parts := bytes.SplitN(bytes.TrimSuffix(rec, []byte("\n")), []byte(" "), 4)
	if len(parts) < 3 {
		return nil
	}
	w := outs[string(parts[1])]
	if w == nil {
		return nil
	}
	var content []byte
	if len(parts) == 4 {
		content = parts[3]
	}
	if string(parts[2]) == crilog.TagFull {
		content = append(content, '\n')
	}
	_, err := w.Write(content)
	return err
}

// rotated reports whether path now names another file than f.
func rotated(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && !os.SameFile(a, b)
}

// openLogRead opens the container's CRI log for reading, beneath its
// pod's log directory with no symbolic link followed when the record
// names the directory: a link planted in its place must not hand a host
// file to the attach client.
func openLogRead(m meta) (*os.File, error) {
	if m.LogRoot == "" {
		return os.Open(m.LogPath)
	}
	return crilog.OpenBeneath(m.LogRoot, m.LogPath, os.O_RDONLY, 0)
}
