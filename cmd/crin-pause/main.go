// Command crin-pause is the infra process of a crin pod sandbox: it holds
// the pod's namespaces open by doing nothing. As PID 1 of a pod's PID
// namespace it reaps the zombies reparented to it. It exits 0 on SIGTERM
// or SIGINT. It is built static (CGO_ENABLED=0) and needs nothing from the
// image, so a sandbox needs no pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited. Signals coalesce, so one
// SIGCHLD may stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
