// Package shim is crind's side of crin-shim, the one small process per pod
// that owns the stdio of each of the pod's containers, writes their CRI
// logs, reaps them, records how each exited and outlives crind: its
// command line (Config), its control protocol (Request, Response, Call,
// Attach), and the files both ends read and write (exit records, socket
// paths; the CRI log writer is package crilog, which crin-logger shares).
// The shim process itself is package shimd,
// which builds on these definitions; this package does not depend on it.
//
// Start-up: the oci backend starts crin-shim itself (no second exec), in a
// session of its own, with stdio on /dev/null and the shim dir's shim.log,
// and a pipe as descriptor 3. The shim becomes a child subreaper, listens on
// its control socket and writes one JSON Handshake line on descriptor 3
// (its pid, or why it could not start). crind reaps it when it exits; after
// a crind restart, init does. A shim that is never asked for a container
// exits after a minute (crind died right after starting it).
//
// Containers: each OpCreate names a container (id, bundle, log path,
// stdin, terminal). The shim runs "<runtime> run --detach", which creates
// and starts the container in one command ("<runtime> restore --detach"
// with Restore), with the container's stdout and stderr on pipes it keeps
// (stdin too with Stdin, else /dev/null; with TTY, the runtime makes a
// terminal and sends its master on a console socket, and that carries all
// three), and answers with the init pid or the runtime's own error message
// (runc's --log-format json output) after removing what the runtime made.
// crind's oci backend sends OpCreate at StartContainer; until then the
// container is only a bundle crind wrote. When the container exits, the shim runs "<runtime> delete"
// itself, so removing the container later costs no runtime command, and
// records the exit once that is done; OpDelete drops a stopped container.
// OpKill signals a container's init through a pidfd, without a runtime
// command. Once the last container is dropped (or the first create
// failed), the shim answers that it is exiting and exits; an OpCreate that
// reaches it then is refused with CodeShimExiting, and the client waits for
// it to go and starts a new one.
//
// Shim dir (StateDir/.pod-<pod id>): shim.pid, shim.log, and shim.sock
// unless that path is too long (see SocketPath). Container state dir (the
// bundle, StateDir/<id>): config.json, shim.dir (the shim dir's path,
// written by crind), shim.pid (the pid of the shim supervising it, so the
// death of that shim is told apart from the pod's next one), init.pid,
// runtime.log (the runtime's JSON log), exit (JSON Exit, written
// atomically once the container exited; it outlives the shim), and
// console.sock during a terminal container's create (see
// ConsoleSocketPath). crind writes shim.dir and the create options before
// config.json, whose presence makes the container known.
//
// Protocol: one request per connection on a path-based unix socket; the
// client writes one JSON Request line and reads one JSON Response line.
// Every op but OpShutdown names its container (Request.ID). Ops: create,
// state, wait (blocks until the container has exited), reopen_log,
// delete, shutdown (refused while a container lives), attach (the
// connection then carries framed output until the container exited, and
// the client's framed stdin and terminal sizes the other way; see Attach),
// exec (the answer comes once the process runs; the connection then
// carries its framed output and, last, its exit code, and the client's
// input; see Exec). Errors carry a code that Call maps back to errdefs.
//
// Exec: the shim runs "<runtime> exec --detach --process F --pid-file P"
// (with --console-socket for a terminal, whose master the runtime sends
// it) with pipes it keeps as the process's stdio, so the process becomes
// the shim's child once the runtime exits; the reaper reports its status
// (a status reaped before the runtime started is an earlier process's with
// the same pid, and is not taken for it). The shim SIGKILLs the process
// through a pidfd when the client's end of the connection closes (or is
// half-closed) first, and when the container's init exits; it removes the
// exec's files once the runtime is done with them.
//
// Stdin: the shim holds a container's stdin (the pipe's write end, or the
// terminal's master) for the container's whole life, so the container sees
// no end of input between attaches or while crind restarts. Every attach
// that asks for stdin (Request.Stdin) and is granted it (Response.Stdin)
// feeds it; with StdinOnce only the first is granted, and its end (its EOF
// frame, or its connection closing) closes the container's stdin: the pipe
// is closed, a terminal gets its VEOF character. Output is copied to every
// attached client and to the log.
//
// Exit: the exit code is the status, or 128+signal. OOMKilled is set when
// the oom_kill counter of the container's memory cgroup (v1
// memory.oom_control, v2 memory.events) grew while it ran; it is read
// as the init is reaped, before the runtime deletes the cgroup. The exit
// is recorded after the output pipes drain (at most two seconds) and the
// runtime delete is done (at most five), so a reader of the exit sees the
// whole log and finds nothing left to delete.
package shim
