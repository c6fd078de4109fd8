package main

import (
	"fmt"
	"net"
	"os"
)

// notifySystemd sends state (for example "READY=1") to the service
// manager that started crind, when it asked for it by setting
// NOTIFY_SOCKET (a unit of Type=notify, contrib/systemd/crind.service).
// Without NOTIFY_SOCKET it does nothing and returns nil. The protocol is
// one datagram per message on that unix socket (sd_notify(3)); a name
// starting with '@' is an abstract socket, which package net maps itself.
func notifySystemd(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd %q: %w", state, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd %q: %w", state, err)
	}
	return nil
}
