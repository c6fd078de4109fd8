package nri

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	ma, mb := newMux(a, nil, 1, 2), newMux(b, nil, 1, 2)
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
		valid bool
	}{
		{name: "oversized frame", id: 1, size: muxMaxPayload + 1},
		{name: "reserved conn id", id: 0, size: 4},
		{name: "largest frame", id: 1, size: muxMaxPayload, valid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			raw, end := socketPair(t)
			closed := make(chan error, 1)
			m := newMux(end, func(err error) { closed <- err }, 1)
			c, _ := m.open(1)
			hdr := make([]byte, muxHeaderLen)
			binary.BigEndian.PutUint32(hdr[0:4], tc.id)
			binary.BigEndian.PutUint32(hdr[4:8], tc.size)
			go func() {
				_, _ = raw.Write(hdr)
				if tc.valid {
					_, _ = raw.Write(make([]byte, tc.size))
				}
			}()
			if tc.valid {
				buf := make([]byte, tc.size)
				if _, err := io.ReadFull(c, buf); err != nil {
					t.Fatalf("read largest frame: %v", err)
				}
				_ = raw.Close()
			}
			select {
			case err := <-closed:
				if tc.valid != !errors.Is(err, ErrProtocol) {
					t.Errorf("mux closed with %v, want protocol error: %v", err, !tc.valid)
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
		})
	}
}
