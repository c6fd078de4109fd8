package nri

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// frame encodes one mux frame with a payload of n bytes of value b.
func frame(id, size uint32, payload []byte) []byte {
	out := make([]byte, muxHeaderLen, muxHeaderLen+len(payload))
	binary.BigEndian.PutUint32(out[0:4], id)
	binary.BigEndian.PutUint32(out[4:8], size)
	return append(out, payload...)
}

// FuzzMuxFrames feeds arbitrary bytes to the frame reader as a plugin
// would send them on the trunk, read by conn 1 in chunks of chunk bytes
// while conn 2's frames are queued: it must never panic, must stop with a
// protocol error at an oversized frame or one for the reserved connection
// before reading its payload, and must deliver exactly the payloads of the
// well-formed frames before that point, to the right connection.
func FuzzMuxFrames(f *testing.F) {
	f.Add([]byte{}, uint16(1))
	f.Add(frame(1, 5, []byte("hello")), uint16(2))
	f.Add(append(frame(2, 3, []byte("abc")), frame(1, 2, []byte("xy"))...), uint16(64))
	f.Add(frame(1, muxMaxPayload+1, nil), uint16(8))
	f.Add(frame(2, 0xffffffff, []byte("x")), uint16(8))
	f.Add(frame(0, 4, []byte("zero")), uint16(8))
	f.Add(frame(1, 10, []byte("short")), uint16(3))
	f.Add(append(frame(7, 2, []byte("no")), frame(1, 0, nil)...), uint16(1))
	f.Add([]byte{0, 0, 0, 1, 0, 0}, uint16(4))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16) {
		want, wantErr := parseFrames(data)

		m := &mux{conns: make(map[uint32]*muxConn), done: make(chan struct{})}
		m.in.br = bufio.NewReader(bytes.NewReader(data))
		c1, c2 := newMuxConn(m, 1), newMuxConn(m, 2)
		m.conns[1], m.conns[2] = c1, c2
		p := make([]byte, max(int(chunk), 1))
		var got1 []byte
		var err error
		for {
			var n int
			n, err = m.readFrames(c1, p)
			got1 = append(got1, p[:n]...)
			if err != nil {
				break
			}
		}
		var got2 []byte
		for _, b := range c2.queue {
			got2 = append(got2, b...)
		}

		if !bytes.Equal(got1, want[1]) {
			t.Errorf("conn 1 got %q, want %q", got1, want[1])
		}
		if !bytes.Equal(got2, want[2]) {
			t.Errorf("conn 2 got %q, want %q", got2, want[2])
		}
		switch {
		case errors.Is(wantErr, errBadFrame):
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("error = %v, want a protocol error", err)
			}
		case errors.Is(wantErr, io.EOF):
			// A conn's Read must return io.EOF itself, never wrapped
			// (io.Reader's contract), so this compares, not errors.Is.
			if err != io.EOF { //nolint:errorlint // see above
				t.Errorf("error = %v, want EOF at a frame boundary", err)
			}
		case errors.Is(wantErr, io.ErrUnexpectedEOF):
			if !errors.Is(readErr(err), ErrProtocol) {
				t.Errorf("error = %v, want a truncated frame", err)
			}
		}
	})
}

var errBadFrame = errors.New("bad frame")

// parseFrames is the reference reading of data: the payloads per
// connection up to the first bad or truncated frame, and how reading ends.
func parseFrames(data []byte) (map[uint32][]byte, error) {
	out := map[uint32][]byte{}
	for {
		if len(data) == 0 {
			return out, io.EOF
		}
		if len(data) < muxHeaderLen {
			return out, io.ErrUnexpectedEOF
		}
		id := binary.BigEndian.Uint32(data[0:4])
		size := binary.BigEndian.Uint32(data[4:8])
		if size > muxMaxPayload || id == muxReservedConn {
			return out, errBadFrame
		}
		data = data[muxHeaderLen:]
		if uint64(len(data)) < uint64(size) {
			// What arrived of a truncated frame's payload may already
			// have reached its reader.
			if id == 1 {
				out[1] = append(out[1], data...)
			}
			return out, io.ErrUnexpectedEOF
		}
		if id == 1 || id == 2 {
			out[id] = append(out[id], data[:size]...)
		}
		data = data[size:]
	}
}
