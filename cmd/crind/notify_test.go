package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNotifySystemd(t *testing.T) {
	dir, err := os.MkdirTemp("", "crin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	t.Setenv("NOTIFY_SOCKET", path)
	if err := notifySystemd("READY=1"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "READY=1" {
		t.Errorf("systemd got %q, want READY=1", got)
	}

	t.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "nobody"))
	if err := notifySystemd("READY=1"); err == nil {
		t.Error("notify to a socket nobody listens on: no error")
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := notifySystemd("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nil", err)
	}
}
