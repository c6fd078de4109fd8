// Package shimd is the crin-shim process (cmd/crin-shim): it serves one
// pod's containers on the control socket package shim defines. Main parses
// the command line, becomes a child subreaper, serves the socket and exits
// once its last container is dropped. A pod (pod.go) routes each request to
// its container (server.go, container_linux.go): create and start through
// the OCI runtime, output copied to the CRI log and to attached clients
// (attach.go), stdin and terminal held for the container's life
// (stdio.go, tty_linux.go), exits reaped (reaper_linux.go) and recorded
// with the OOM kill counter read before the runtime deletes the cgroup
// (oom_linux.go). See package shim for the protocol, the files and the
// life of a shim.
package shimd
