// Package shim is crin-shim: one small process per container that owns the
// container's stdio, writes its CRI log, reaps it, records how it exited and
// outlives crind. It also holds the client side of the shim's control
// protocol and the file formats crind reads, so both ends share one
// definition.
//
// Start-up: the oci backend runs crin-shim with a pipe as descriptor 3. That
// process starts a copy of itself in a new session (stdio on /dev/null and
// the state dir's shim.log) and exits, so the copy is reparented away from
// crind and survives it. The copy becomes a child subreaper, listens on its
// control socket, runs "<runtime> create" with the container's stdout and
// stderr on pipes it keeps (stdin too with -stdin, else /dev/null; with
// -tty, the runtime makes a terminal and sends its master on a console
// socket, and that carries all three), and writes one JSON Handshake line
// on descriptor 3: the init pid, or the runtime's own error message (runc's
// --log-format json output) after removing what the runtime made.
//
// State dir (the bundle, StateDir/<id>): config.json, shim.pid, init.pid,
// runtime.log (the runtime's JSON log), shim.log, exit (JSON Exit, written
// atomically once the container exited; it outlives the shim), and
// shim.sock unless that path is too long (see SocketPath); console.sock
// during a terminal container's create (see ConsoleSocketPath).
//
// Protocol: one request per connection on a path-based unix socket; the
// client writes one JSON Request line and reads one JSON Response line.
// Ops: state, wait (blocks until the exit is recorded), start, reopen_log,
// shutdown (refused while the container lives), attach (the connection then
// carries framed output until the container exited, and the client's
// framed stdin and terminal sizes the other way; see Attach). Errors carry
// a code that Call maps back to errdefs.
//
// Stdin: the shim holds the container's stdin (the pipe's write end, or
// the terminal's master) for the container's whole life, so the container
// sees no end of input between attaches or while crind restarts. Every
// attach that asks for stdin (Request.Stdin) and is granted it
// (Response.Stdin) feeds it; with -stdin-once only the first is granted,
// and its end (its EOF frame, or its connection closing) closes the
// container's stdin: the pipe is closed, a terminal gets its VEOF
// character. Output is copied to every attached client and to the log.
//
// Exit: the exit code is the status, or 128+signal. OOMKilled is set when
// the oom_kill counter of the container's memory cgroup (v1
// memory.oom_control, v2 memory.events) grew while it ran; it is read
// before anything deletes the cgroup. The exit is recorded after the
// output pipes drain (at most two seconds), so a reader of the exit sees
// the whole log.
package shim
