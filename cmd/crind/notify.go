package main

import (
	"fmt"
	"net"
	"os"
)

// systemdNotifier tells the service manager that started crind about its
// state, when it asked for that by setting NOTIFY_SOCKET (a unit of
// Type=notify, contrib/systemd/crind.service). The zero value does
// nothing.
type systemdNotifier struct {
	socket string
}

// takeNotifySocket returns the notifier for $NOTIFY_SOCKET and removes the
// variable from crind's environment. It must run before crind starts any
// child: runc and crun take NOTIFY_SOCKET as the container's, and `run
// --detach` then waits for the container to say READY=1, which a pod's
// infra process never does (a pod start hung until its deadline).
func takeNotifySocket() systemdNotifier {
	n := systemdNotifier{socket: os.Getenv("NOTIFY_SOCKET")}
	_ = os.Unsetenv("NOTIFY_SOCKET")
	return n
}

// notify sends state (for example "READY=1"): one datagram on the unix
// socket (sd_notify(3)); a name starting with '@' is an abstract socket,
// which package net maps itself. Without a socket it returns nil.
func (n systemdNotifier) notify(state string) error {
	if n.socket == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd %q: %w", state, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd %q: %w", state, err)
	}
	return nil
}
