// Package oci is crind's oci backend: it drives any OCI runtime CLI
// (runc, crun, crin-lxc) with one crin-shim process per pod; the shim owns
// the stdio of each of the pod's containers, writes their CRI logs, reaps
// them and records how they exited, and outlives crind restarts. It is
// the only client of crin-shim (package shim, its protocol; shim/shimd,
// the shim itself). Its sibling, package shimv2, drives containerd shim v2
// runtimes; both implement runtime.Runtime (see docs/runtimes.md).
//
// The package is named oci after the backend's runtime_type in crind's
// config ("oci" beside "shimv2"), so the config, docs/runtimes.md and the
// code use one name. It is not internal/oci, the spec builder: a file
// that needs both imports this one as ocirt.
//
// Runtime keeps nothing in memory but per-pod locks. Each container has a
// state dir, StateDir/<id>, which is also its bundle (config.json); each
// pod's shim has a dir, StateDir/.pod-<pod id> (the pod is the create
// request's PodID; a container without one gets a shim of its own).
// The container's dir names its shim's dir and pid, and the shim keeps the
// init pid, the runtime's JSON log and, once the container exited, the
// exit record there (see package shim for the files and the control
// protocol). A fresh Runtime on the same StateDir therefore sees every
// container a previous crind made: List reads the dirs, Status and Wait
// ask the shim, and fall back to the exit record when the shim is gone,
// and to "<runtime> state" when neither exists (StateUnknown when the
// runtime no longer knows it either; the exit code is then lost).
//
// A shim that died without recording an exit (the container's pid file
// names a process that is gone or is no longer that shim) is never taken
// for a success: the first Status or Wait that finds it, for each of the
// pod's containers, kills what is left of the container, deletes it from
// the runtime and writes the exit record itself with exit code 255 and
// ReasonShimDied. A Wait is a request on the shim's socket, which the
// kernel closes when the shim dies, so a waiter learns of the death at
// once.
//
// Create writes the bundle only. Start asks the pod's shim to create and
// start the container (one request, one "<runtime> run --detach"); when
// the pod has no live shim it starts one first. Until then the container
// is pending: Status says created, Update rewrites the bundle, a SIGKILL
// records it killed, Delete removes the bundle. A failed or cancelled
// Start deletes the container from the runtime and has the shim drop it;
// the container is pending again. Signal asks the shim, which signals the
// init through a pidfd; "all" of a container that shares its PID
// namespace, and a container without a live shim, go to "<runtime> kill".
// Update runs the runtime CLI directly, with its own timeout and with
// --log-format json so errors carry the runtime's messages (see
// RuntimeError).
//
// Exec and ExecStream write the process spec into the container's dir and
// have the pod's shim run it (shim.OpExec, "<runtime> exec --detach"): the
// process is the shim's child, the shim copies its stdio (pipes, or the
// terminal whose master the runtime hands it) over the request's
// connection and reports its real exit status last. When the request's
// ctx ends (Exec's timeout included) or crind dies, the connection closes
// and the shim kills the process, so no exec'd process outlives its
// session; it also kills them when the container's init exits.
//
// Delete kills a live container (SIGKILL to all its processes), waits for
// its exit to be recorded, has the shim drop it (the shim ran "<runtime>
// delete" when it exited; without a live shim Delete runs "<runtime>
// delete --force" itself) and removes the state dir. When it was the
// shim's last container, the shim exits by itself.
//
// Shim sockets are path-based: StateDir/.pod-<pod id>/shim.sock, or a
// derived name in /run/crin-shim when that path would not fit a unix
// socket address.
package oci
