package nri

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Wire constants of the NRI multiplexed transport.
const (
	// muxHeaderLen is the frame header: big-endian uint32 connection id,
	// big-endian uint32 payload length.
	muxHeaderLen = 8
	// muxMaxPayload is the largest payload a frame may carry: one maximal
	// ttrpc message (4 MiB) plus its 10-byte ttrpc header.
	muxMaxPayload = 4<<20 + 10
	// muxReservedConn is never used for traffic.
	muxReservedConn = 0
	// pluginServiceConn carries runtime-to-plugin calls (crin is the client).
	pluginServiceConn = 1
	// runtimeServiceConn carries plugin-to-runtime calls (crin serves).
	runtimeServiceConn = 2
	// muxMaxQueued bounds the bytes buffered for one logical connection
	// that its reader has not consumed yet; a peer that floods past it
	// commits a protocol error.
	muxMaxQueued = 64 << 20
)

// ErrProtocol classifies a violation of the multiplexing protocol by the
// peer: an oversized frame, a frame for a reserved connection id, or a flood
// of unread data. It closes the trunk.
var ErrProtocol = errors.New("nri mux protocol error")

// mux carries several logical stream connections over one trunk connection.
// Each Write becomes one or more frames. Incoming frames are read either by
// a reader goroutine the mux owns, or, when the mux has a driver connection,
// by whoever reads that connection: its Read takes its own frames straight
// from the trunk and queues the frames of the other connections for them.
// A driver saves a goroutine handoff per message on the busy connection
// (crin's calls to the plugin); it suits a connection that is read all the
// time, like a ttrpc client's. Closing the mux closes every logical
// connection and waits for its reader goroutine, if any.
type mux struct {
	trunk net.Conn

	// wmu serializes frames on the trunk and guards wbuf.
	wmu  sync.Mutex
	wbuf []byte

	// rmu serializes reading the trunk and guards in; the driver's Read
	// or the reader goroutine holds it while it reads.
	rmu sync.Mutex
	in  inbound

	// mu guards conns, err and driver.
	mu    sync.Mutex
	conns map[uint32]*muxConn
	err   error
	// driver reads the trunk from its own Read; nil once it is closed, or
	// when the reader goroutine does the reading.
	driver *muxConn

	closeOnce sync.Once
	done      chan struct{} // closed when the mux is closed
	readers   sync.WaitGroup
	onClose   func(error)
}

// inbound is the frame being read from the trunk. Reads can be interrupted
// (a driver connection being closed sets a past read deadline), so what a
// read got of a header or payload is kept here until the frame is whole.
type inbound struct {
	br  *bufio.Reader
	hdr [muxHeaderLen]byte
	hn  int    // header bytes read
	id  uint32 // connection of the frame, once the header is whole
	rem int    // payload bytes not read yet
	to  *muxConn
	buf []byte // payload for another connection than the reader's
}

// newMux starts demultiplexing trunk with the connection ids already open,
// so no early frame for them is dropped. driver, if not 0, is one of ids:
// its Read reads the trunk, and no reader goroutine runs until it is
// closed. onClose, if set, runs once, from a reader or Close, with the
// reason the mux closed (io.EOF for an orderly close); it must not call
// Close.
func newMux(trunk net.Conn, onClose func(error), driver uint32, ids ...uint32) *mux {
	m := &mux{
		trunk:   trunk,
		conns:   make(map[uint32]*muxConn),
		done:    make(chan struct{}),
		onClose: onClose,
	}
	m.in.br = bufio.NewReaderSize(trunk, 64<<10)
	for _, id := range ids {
		if id != muxReservedConn {
			m.conns[id] = newMuxConn(m, id)
		}
	}
	m.driver = m.conns[driver]
	if m.driver != nil {
		m.driver.drives = true
	} else {
		m.readers.Add(1)
		go m.reader()
	}
	return m
}

func newMuxConn(m *mux, id uint32) *muxConn {
	return &muxConn{id: id, m: m, ready: make(chan struct{}, 1), closed: make(chan struct{})}
}

// open returns the logical connection id, creating it on first use. Frames
// that arrive for an id nobody opened are dropped, as the peer's mux does.
func (m *mux) open(id uint32) (*muxConn, error) {
	if id == muxReservedConn {
		return nil, fmt.Errorf("open mux conn %d: reserved", id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, fmt.Errorf("open mux conn %d: %w", id, m.err)
	}
	c, ok := m.conns[id]
	if !ok {
		c = newMuxConn(m, id)
		m.conns[id] = c
	}
	return c, nil
}

// Close closes the trunk and all logical connections and waits until the
// reader goroutine, if one runs, is gone.
func (m *mux) Close() error {
	m.closeWith(io.EOF)
	m.readers.Wait()
	return nil
}

// closed reports the reason the mux is closed, or nil while it is open.
func (m *mux) closedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

func (m *mux) closeWith(reason error) {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.err = reason
		conns := make([]*muxConn, 0, len(m.conns))
		for _, c := range m.conns {
			conns = append(conns, c)
		}
		m.mu.Unlock()
		close(m.done)
		_ = m.trunk.Close()
		for _, c := range conns {
			c.shut(reason)
		}
		if m.onClose != nil {
			m.onClose(reason)
		}
	})
}

// reader reads the trunk when no driver does.
func (m *mux) reader() {
	defer m.readers.Done()
	m.rmu.Lock()
	defer m.rmu.Unlock()
	for {
		if _, err := m.readFrames(nil, nil); err != nil {
			m.closeWith(readErr(err))
			return
		}
	}
}

// readFrames reads frames until some payload for self has been copied
// into p, and hands the frames for other connections to them. Called with
// rmu held; self and p may be nil. An error leaves the partial frame in
// m.in, so that a read interrupted by a deadline can be resumed; the end
// of the trunk inside a frame is io.ErrUnexpectedEOF.
func (m *mux) readFrames(self *muxConn, p []byte) (int, error) {
	n, err := m.readFramesOnce(self, p)
	if errors.Is(err, io.EOF) && m.in.hn > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (m *mux) readFramesOnce(self *muxConn, p []byte) (int, error) {
	in := &m.in
	for {
		if in.hn < muxHeaderLen {
			n, err := io.ReadFull(in.br, in.hdr[in.hn:])
			in.hn += n
			if err != nil {
				return 0, err
			}
			id := binary.BigEndian.Uint32(in.hdr[0:4])
			size := binary.BigEndian.Uint32(in.hdr[4:8])
			if size > muxMaxPayload {
				return 0, fmt.Errorf("%w: conn %d: frame payload %d bytes, limit %d", ErrProtocol, id, size, muxMaxPayload)
			}
			if id == muxReservedConn {
				return 0, fmt.Errorf("%w: frame for reserved conn %d", ErrProtocol, id)
			}
			in.id, in.rem = id, int(size)
			m.mu.Lock()
			in.to = m.conns[id]
			m.mu.Unlock()
			if in.to != nil && in.to != self && in.rem > 0 {
				in.buf = make([]byte, in.rem)
			}
		}
		switch {
		case in.rem == 0:
		case self != nil && in.to == self:
			if len(p) == 0 {
				return 0, nil
			}
			n, err := in.br.Read(p[:min(len(p), in.rem)])
			in.rem -= n
			if in.rem == 0 {
				in.hn, in.to = 0, nil
			}
			if n > 0 {
				return n, nil
			}
			return 0, err
		case in.buf != nil:
			n, err := io.ReadFull(in.br, in.buf[len(in.buf)-in.rem:])
			in.rem -= n
			if err != nil {
				return 0, err
			}
			if err := in.to.push(in.buf); err != nil {
				return 0, err
			}
			in.buf = nil
		default:
			// Nobody opened the connection (or its driver was closed
			// in the middle of the frame): drop the payload.
			n, err := in.br.Discard(in.rem)
			in.rem -= n
			if err != nil {
				return 0, err
			}
		}
		in.hn, in.to = 0, nil
	}
}

// drive is the Read of the driver connection c: it reads the trunk.
func (m *mux) drive(c *muxConn, p []byte) (int, error) {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	for {
		if err := c.closedErr(); err != nil {
			return 0, err
		}
		n, err := m.readFrames(c, p)
		if err == nil || n > 0 {
			return n, nil
		}
		if isTimeout(err) {
			// Close of c interrupted the read; the loop reports it.
			continue
		}
		m.closeWith(readErr(err))
		return 0, c.closedErr()
	}
}

// undrive hands the reading of the trunk over to a reader goroutine once
// the driver connection c is closed: it interrupts c's Read if blocked,
// waits until it has left and starts the reader if the mux is open.
func (m *mux) undrive(c *muxConn) {
	m.mu.Lock()
	if m.driver != c {
		m.mu.Unlock()
		return
	}
	m.driver = nil
	m.mu.Unlock()
	_ = m.trunk.SetReadDeadline(time.Now())
	m.rmu.Lock()
	_ = m.trunk.SetReadDeadline(time.Time{})
	m.rmu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		// Under mu, ordered before Close's Wait by closeWith's m.err.
		m.readers.Add(1)
		go m.reader()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func readErr(err error) error {
	if errors.Is(err, ErrProtocol) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return io.EOF
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated frame", ErrProtocol)
	}
	return fmt.Errorf("read mux trunk: %w", err)
}

// write sends b on connection id, split into frames of at most
// muxMaxPayload bytes. Header and payload go out in one write.
func (m *mux) write(id uint32, b []byte) (int, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if err := m.closedErr(); err != nil {
		return 0, fmt.Errorf("write mux conn %d: %w", id, net.ErrClosed)
	}
	total := 0
	for len(b) > 0 {
		n := min(len(b), muxMaxPayload)
		if cap(m.wbuf) < muxHeaderLen+n {
			m.wbuf = make([]byte, muxHeaderLen+n)
		}
		frame := m.wbuf[:muxHeaderLen+n]
		binary.BigEndian.PutUint32(frame[0:4], id)
		binary.BigEndian.PutUint32(frame[4:8], uint32(n))
		copy(frame[muxHeaderLen:], b[:n])
		if _, err := m.trunk.Write(frame); err != nil {
			// A partial frame desynchronizes the stream for good.
			m.closeWith(fmt.Errorf("write mux trunk: %w", err))
			return total, fmt.Errorf("write mux conn %d: %w", id, err)
		}
		if cap(m.wbuf) > 1<<20 {
			m.wbuf = nil // do not pin a large buffer after a big message
		}
		total += n
		b = b[n:]
	}
	return total, nil
}

// muxConn is one logical connection of a mux. It is a byte stream: Read
// may return part of a frame, and a Write may become several frames.
type muxConn struct {
	id uint32
	m  *mux
	// drives is set for the mux's driver: Read reads the trunk.
	drives bool

	// mu guards queue, cur, queued and err.
	mu     sync.Mutex
	queue  [][]byte
	cur    []byte
	queued int
	err    error

	ready     chan struct{} // signalled (cap 1) when data is pushed
	closed    chan struct{} // closed when the conn is shut
	closeOnce sync.Once
}

var _ net.Conn = (*muxConn)(nil)

func (c *muxConn) push(b []byte) error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil
	}
	if c.queued+len(b) > muxMaxQueued {
		c.mu.Unlock()
		return fmt.Errorf("%w: conn %d: more than %d bytes unread", ErrProtocol, c.id, muxMaxQueued)
	}
	c.queue = append(c.queue, b)
	c.queued += len(b)
	c.mu.Unlock()
	select {
	case c.ready <- struct{}{}:
	default:
	}
	return nil
}

func (c *muxConn) shut(reason error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if reason == nil || errors.Is(reason, io.EOF) {
			reason = io.EOF
		}
		c.err = reason
		c.mu.Unlock()
		close(c.closed)
	})
}

// Read reads buffered data; it blocks until data arrives or the conn is
// closed. Data queued before a close is still returned.
func (c *muxConn) Read(p []byte) (int, error) {
	if c.drives {
		return c.m.drive(c, p)
	}
	for {
		c.mu.Lock()
		if len(c.cur) == 0 && len(c.queue) > 0 {
			c.cur = c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.queued -= len(c.cur)
		}
		if len(c.cur) > 0 {
			n := copy(p, c.cur)
			c.cur = c.cur[n:]
			c.mu.Unlock()
			return n, nil
		}
		err := c.err
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-c.ready:
		case <-c.closed:
		}
	}
}

// Write sends p as one or more frames.
func (c *muxConn) Write(p []byte) (int, error) {
	select {
	case <-c.closed:
		return 0, fmt.Errorf("write mux conn %d: %w", c.id, net.ErrClosed)
	default:
	}
	return c.m.write(c.id, p)
}

// Close closes the logical connection only; the trunk stays up.
func (c *muxConn) Close() error {
	c.m.mu.Lock()
	if c.m.conns[c.id] == c {
		delete(c.m.conns, c.id)
	}
	c.m.mu.Unlock()
	c.shut(net.ErrClosed)
	if c.drives {
		c.m.undrive(c)
	}
	return nil
}

// closedErr is the reason c is closed, or nil.
func (c *muxConn) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LocalAddr returns the trunk's local address.
func (c *muxConn) LocalAddr() net.Addr { return c.m.trunk.LocalAddr() }

// RemoteAddr returns the trunk's remote address.
func (c *muxConn) RemoteAddr() net.Addr { return c.m.trunk.RemoteAddr() }

// SetDeadline is not supported on a logical connection; ttrpc does not use
// deadlines, it bounds calls with contexts.
func (c *muxConn) SetDeadline(time.Time) error { return nil }

// SetReadDeadline is not supported; see SetDeadline.
func (c *muxConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline is not supported; see SetDeadline.
func (c *muxConn) SetWriteDeadline(time.Time) error { return nil }

// connListener hands out one connection, then blocks until closed; it lets
// a ttrpc.Server serve a single logical mux connection.
type connListener struct {
	conn      net.Conn
	closeOnce sync.Once
	handed    chan net.Conn
	closed    chan struct{}
}

func newConnListener(c net.Conn) *connListener {
	l := &connListener{conn: c, handed: make(chan net.Conn, 1), closed: make(chan struct{})}
	l.handed <- c
	return l
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handed:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.conn.LocalAddr() }
