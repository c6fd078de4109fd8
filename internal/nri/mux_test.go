package nri

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crin-dev/crin/test/poll"
)

// socketPair returns both ends of a unix stream socketpair.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

func TestMuxRoundTrip(t *testing.T) {
	before := runtime.NumGoroutine()
	a, b := socketPair(t)
	// a is read by a reader goroutine, b by the reader of its conn 1.
	ma, mb := newMux(a, nil, 0, 1, 2), newMux(b, nil, 1, 1, 2)
	a1, _ := ma.open(1)
	a2, _ := ma.open(2)
	b1, _ := mb.open(1)
	b2, _ := mb.open(2)

	big := bytes.Repeat([]byte("0123456789abcdef"), (9<<20)/16) // spans 3 frames
	done := make(chan error, 2)
	go func() {
		_, err := a1.Write(big)
		done <- err
	}()
	go func() {
		_, err := b2.Write([]byte("other way"))
		done <- err
	}()
	got := make([]byte, len(big))
	if _, err := io.ReadFull(b1, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Error("conn 1 payload corrupted")
	}
	small := make([]byte, 9)
	if _, err := io.ReadFull(a2, small); err != nil || string(small) != "other way" {
		t.Errorf("conn 2 read %q, %v", small, err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	_ = ma.Close()
	if _, err := b1.Read(small); !errors.Is(err, io.EOF) {
		t.Errorf("read after peer closed: %v, want EOF", err)
	}
	_ = mb.Close()
	checkGoroutines(t, before)
}

func TestMuxProtocolErrors(t *testing.T) {
	tests := []struct {
		name  string
		id    uint32
		size  uint32
		sent  int // payload bytes sent before the peer closes; -1: none, no close
		valid bool
	}{
		{name: "oversized frame", id: 1, size: muxMaxPayload + 1, sent: -1},
		{name: "reserved conn id", id: 0, size: 4, sent: -1},
		{name: "truncated frame", id: 1, size: 10, sent: 3},
		{name: "truncated frame for the other conn", id: 2, size: 10, sent: 0},
		{name: "largest frame", id: 1, size: muxMaxPayload, sent: muxMaxPayload, valid: true},
	}
	for _, tc := range tests {
		for _, driver := range []uint32{0, 1} {
			t.Run(fmt.Sprintf("%s/driver=%d", tc.name, driver), func(t *testing.T) {
				testMuxProtocolError(t, tc.id, tc.size, tc.sent, tc.valid, driver)
			})
		}
	}
}

func testMuxProtocolError(t *testing.T, id, size uint32, sent int, valid bool, driver uint32) {
	before := runtime.NumGoroutine()
	raw, end := socketPair(t)
	closed := make(chan error, 1)
	m := newMux(end, func(err error) { closed <- err }, driver, 1, 2)
	c, _ := m.open(1)
	hdr := make([]byte, muxHeaderLen)
	binary.BigEndian.PutUint32(hdr[0:4], id)
	binary.BigEndian.PutUint32(hdr[4:8], size)
	go func() {
		_, _ = raw.Write(hdr)
		if sent >= 0 {
			_, _ = raw.Write(make([]byte, sent))
			if !valid {
				_ = raw.Close()
			}
		}
	}()
	if valid {
		buf := make([]byte, size)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("read largest frame: %v", err)
		}
		_ = raw.Close()
	}
	if driver != 0 {
		// A driven mux reads the trunk only while its driver reads.
		go func() { _, _ = io.Copy(io.Discard, c) }()
	}
	select {
	case err := <-closed:
		if valid != !errors.Is(err, ErrProtocol) {
			t.Errorf("mux closed with %v, want protocol error: %v", err, !valid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("mux not closed")
	}
	if _, err := c.Read(hdr); err == nil {
		t.Error("read on closed mux succeeded")
	}
	_ = m.Close()
	_ = raw.Close()
	checkGoroutines(t, before)
}

// TestMuxDriverClose closes the driver connection while its Read waits on
// the trunk, in the middle of a frame for the other connection: the Read
// returns, and the other connection still gets its frames whole.
func TestMuxDriverClose(t *testing.T) {
	before := runtime.NumGoroutine()
	raw, end := socketPair(t)
	m := newMux(end, nil, 1, 1, 2)
	c1, _ := m.open(1)
	c2, _ := m.open(2)

	frame := func(id uint32, payload string) []byte {
		b := make([]byte, muxHeaderLen, muxHeaderLen+len(payload))
		binary.BigEndian.PutUint32(b[0:4], id)
		binary.BigEndian.PutUint32(b[4:8], uint32(len(payload)))
		return append(b, payload...)
	}
	if _, err := raw.Write(frame(1, "to the driver")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := c1.Read(buf); err != nil || string(buf[:n]) != "to the driver" {
		t.Fatalf("driver read %q, %v", buf[:n], err)
	}
	// Half a frame for conn 2: the driver is stuck in the middle of it.
	f2 := frame(2, "for conn two")
	if _, err := raw.Write(f2[:10]); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c1.Read(buf)
		readErr <- err
	}()
	// The Read is in the trunk once it holds the trunk's read lock.
	poll.Until(t, 30*time.Second, "the driver's Read in the trunk", func() (bool, string) {
		if m.rmu.TryLock() {
			m.rmu.Unlock()
			return false, ""
		}
		return true, ""
	})
	_ = c1.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("driver Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the driver's Read")
	}
	if _, err := raw.Write(append(f2[10:], frame(1, "dropped")...)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(frame(2, "and more")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("for conn twoand more"))
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "for conn twoand more" {
		t.Errorf("conn 2 read %q, %v", got, err)
	}
	_ = m.Close()
	_ = raw.Close()
	if _, err := c2.Read(buf); !errors.Is(err, io.EOF) {
		t.Errorf("read after Close: %v, want EOF", err)
	}
	checkGoroutines(t, before)
}
