// Package crilog writes container output in the CRI log format that
// kubelet reads ("<RFC 3339 time> <stream> <P|F> <content>" lines), and
// opens the log files beneath a pod's log directory without following a
// symbolic link. Both backends' log writers use it: crin-shim (package
// shim/shimd) for the oci backend, crin-logger (package shimv2/logger)
// for shimv2; crind checks and prepares log paths with it. It is a leaf
// package, so that those small processes link nothing else of crind.
package crilog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Streams and tags of the CRI log format.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	TagFull      = "F"
	TagPartial   = "P"
)

// DefaultMaxLine is the longest line content written as one record; longer
// lines are split into partial (P) records followed by a full (F) one.
const DefaultMaxLine = 16 * 1024

// timestampFormat is RFC 3339 with a fixed nine-digit fraction, so records
// sort as text; kubelet parses it with time.RFC3339Nano.
const timestampFormat = "2006-01-02T15:04:05.000000000Z07:00"

// Writer writes container output to a file in the CRI log format:
//
//	<timestamp> <stream> <tag> <content>\n
//
// where tag is F for a record that ends a line and P for a piece of a line:
// one longer than the maximum, or the last bytes of a stream that closes
// without a newline. Readers (kubelet) end a line after every F record, so
// output that does not end a line must never be an F record: a container
// that prints "DONE" and exits has the log "DONE", not "DONE\n" (its
// FallbackToLogsOnError termination message). Records from concurrent
// streams never interleave.
type Writer struct {
	path    string
	root    string
	maxLine int
	maxSize int64
	now     func() time.Time
	onError func(error)

	// mu guards f, size and failed; a record is written under it in one
	// Write.
	mu     sync.Mutex
	f      *os.File
	size   int64 // of f, counted when maxSize is set
	failed bool
}

// Options tune a Writer; the zero value is the default.
type Options struct {
	MaxLine int              // DefaultMaxLine when 0
	Now     func() time.Time // time.Now when nil
	// OnError is told about the first write error after each (re)open;
	// output keeps being drained (and dropped) so the container never
	// blocks on a full pipe.
	OnError func(error)
	// Root is the pod's log directory: when set, the log is opened
	// beneath it with no symbolic link followed, at open and at every
	// reopen (see OpenBeneath). Empty opens the path as it is (records
	// from before crind passed the directory).
	Root string
	// MaxSize, when set, caps the log the writer keeps by itself, for a
	// log no kubelet rotates: past it the file is renamed to path.1
	// (replacing the last one) and a fresh one begun.
	MaxSize int64
}

// Open opens (creating or appending to) the CRI log at path. An empty
// path gives a writer that discards everything.
func Open(path string, opts Options) (*Writer, error) {
	w := &Writer{path: path, root: opts.Root, maxLine: opts.MaxLine, maxSize: opts.MaxSize, now: opts.Now, onError: opts.OnError}
	if w.maxLine <= 0 {
		w.maxLine = DefaultMaxLine
	}
	if w.now == nil {
		w.now = time.Now
	}
	if path == "" {
		return w, nil
	}
	f, err := openLogFile(w.root, path)
	if err != nil {
		return nil, err
	}
	w.f = f
	if st, err := f.Stat(); err == nil {
		w.size = st.Size()
	}
	return w, nil
}

// Reopen closes the log file and opens path again, so a log rotated by
// renaming continues in a fresh file. If the path cannot be opened, the
// old file stays in use and the error says why (ErrLogPath and
// errdefs.ErrFailedPrecondition when it is what is on disk).
func (w *Writer) Reopen() error {
	if w.path == "" {
		return nil
	}
	f, err := openLogFile(w.root, w.path)
	if err != nil {
		return err
	}
	w.mu.Lock()
	old := w.f
	w.f = f
	w.size = 0
	if st, err := f.Stat(); err == nil {
		w.size = st.Size()
	}
	w.failed = false
	w.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// Close closes the log file. Copy calls still running drop their output.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// Copy reads r until EOF and writes it as records of stream. It returns the
// read error, if any, other than io.EOF. Write errors do not stop it.
func (w *Writer) Copy(stream string, r io.Reader) error {
	// One byte more than a record holds, so a line of exactly maxLine
	// bytes and its newline make one full record.
	br := bufio.NewReaderSize(r, w.maxLine+1)
	// carry holds the tail of an overlong line, shorter than maxLine,
	// that belongs at the start of the next record.
	var carry []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			carry = w.records(stream, append(carry, chunk[:len(chunk)-1]...), TagFull)
		case errors.Is(err, bufio.ErrBufferFull):
			carry = w.records(stream, append(carry, chunk...), TagPartial)
		case errors.Is(err, errIdle):
			// A piece of a line waited too long for its end (FlushReader).
			if rest := w.records(stream, append(carry, chunk...), TagPartial); len(rest) > 0 {
				w.record(stream, TagPartial, rest)
			}
			carry = carry[:0]
		default:
			// The stream ended inside a line: every piece of it is partial.
			if rest := w.records(stream, append(carry, chunk...), TagPartial); len(rest) > 0 {
				w.record(stream, TagPartial, rest)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read container %s: %w", stream, err)
		}
	}
}

// records writes data as partial records of maxLine bytes. With end
// TagFull the rest ends the line as a full record; with TagPartial a rest
// shorter than maxLine is returned to be continued. The returned slice
// reuses data's storage.
func (w *Writer) records(stream string, data []byte, end string) []byte {
	for len(data) > w.maxLine || (end == TagPartial && len(data) == w.maxLine) {
		w.record(stream, TagPartial, data[:w.maxLine])
		data = data[w.maxLine:]
	}
	if end == TagFull {
		w.record(stream, TagFull, data)
		return data[:0]
	}
	return data
}

func (w *Writer) record(stream, tag string, content []byte) {
	ts := w.now()
	buf := make([]byte, 0, len(timestampFormat)+len(stream)+len(tag)+len(content)+4)
	buf = ts.AppendFormat(buf, timestampFormat)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, content...)
	buf = append(buf, '\n')

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return
	}
	if w.maxSize > 0 && w.size > 0 && w.size+int64(len(buf)) > w.maxSize {
		w.rotate()
	}
	n, err := w.f.Write(buf)
	w.size += int64(n)
	if err != nil && !w.failed {
		w.failed = true
		if w.onError != nil {
			w.onError(fmt.Errorf("write container log %s: %w", w.path, err))
		}
	}
}

// rotate renames the log to path.1 and begins a fresh one, for MaxSize;
// on failure the log goes on growing. Called with mu held.
func (w *Writer) rotate() {
	if err := os.Rename(w.path, w.path+".1"); err != nil {
		return
	}
	f, err := openLogFile(w.root, w.path)
	if err != nil {
		return
	}
	_ = w.f.Close()
	w.f, w.size = f, 0
}

// errIdle is a FlushReader's report that a piece of a line has waited
// for its end for the reader's flush delay: Copy writes it as a partial
// record and reads on.
var errIdle = errors.New("line piece idle")

// deadliner is a stream whose reads can be given a deadline (an *os.File
// on a pipe or fifo).
type deadliner interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// FlushReader wraps a container's output stream for Copy so that a piece
// of a line the container wrote does not wait for its newline for ever:
// after the flush delay it is logged as a partial (P) record, as a prompt
// without a newline must reach a client that follows the log (attach on
// the shimv2 backend). A line written whole, or completed within the
// delay, stays one full record. Stop makes Copy return at a time.
type FlushReader struct {
	f     deadliner
	after time.Duration

	pending bool      // the last read ended inside a line
	flushAt time.Time // when the pending piece is flushed; zero: none

	mu     sync.Mutex // guards stopAt and the deadline of f
	stopAt time.Time
}

// NewFlushReader wraps f, flushing a piece of a line after d.
func NewFlushReader(f deadliner, d time.Duration) *FlushReader {
	return &FlushReader{f: f, after: d}
}

// Stop makes reads end with os.ErrDeadlineExceeded from at on, which ends
// Copy; what was read by then is still written.
func (x *FlushReader) Stop(at time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopAt = at
	x.setDeadline()
}

// setDeadline gives f the earlier of the stop time and the flush time.
// Called with mu held.
func (x *FlushReader) setDeadline() {
	d := x.stopAt
	if !x.flushAt.IsZero() && (d.IsZero() || x.flushAt.Before(d)) {
		d = x.flushAt
	}
	_ = x.f.SetReadDeadline(d)
}

// Read reads from the stream; a pending piece of a line that waited for
// the flush delay ends the read with errIdle.
func (x *FlushReader) Read(p []byte) (int, error) {
	x.mu.Lock()
	switch {
	case x.pending && x.flushAt.IsZero():
		x.flushAt = time.Now().Add(x.after)
		x.setDeadline()
	case !x.pending && !x.flushAt.IsZero():
		x.flushAt = time.Time{}
		x.setDeadline()
	}
	x.mu.Unlock()
	n, err := x.f.Read(p)
	if n > 0 {
		x.pending = p[n-1] != '\n'
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		x.mu.Lock()
		stopped := !x.stopAt.IsZero() && !time.Now().Before(x.stopAt)
		x.mu.Unlock()
		if !stopped {
			x.pending = false // Copy writes the piece
			return n, errIdle
		}
	}
	return n, err
}
