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
	n := takeNotifySocket()
	// Children (shims, so runc and crun) must not see it.
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Errorf("NOTIFY_SOCKET=%q still set after takeNotifySocket", v)
	}
	if err := n.notify("READY=1"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	m, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:m]); got != "READY=1" {
		t.Errorf("systemd got %q, want READY=1", got)
	}

	if err := (systemdNotifier{socket: filepath.Join(dir, "nobody")}).notify("READY=1"); err == nil {
		t.Error("notify to a socket nobody listens on: no error")
	}
	if err := (systemdNotifier{}).notify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nil", err)
	}
}
