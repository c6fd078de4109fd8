// The liblxc wrappers crin-lxc's Go side calls (crin_lxc.c).
#ifndef CRIN_LXC_H
#define CRIN_LXC_H

#include <stddef.h>
#include <sys/types.h>

// crin_check loads the container's config: 0, or -1 when LXC refuses it.
int crin_check(const char *lxcpath, const char *name);
// crin_init_pid is the running container's init pid, or -1.
int crin_init_pid(const char *lxcpath, const char *name);
// crin_state copies LXC's state name of the container into buf; -1
// when the container has no config.
int crin_state(const char *lxcpath, const char *name, char *buf, size_t len);
// crin_freeze freezes (on != 0) or thaws the container; -1 when it
// cannot.
int crin_freeze(const char *lxcpath, const char *name, int on);
// crin_attach runs argv in the running container with this process's
// stdio, as uid:gid with groups, in cwd, with exactly env, and sets *pid
// (a child of this process).
int crin_attach(const char *lxcpath, const char *name, char **argv, char **env,
		const char *cwd, int uid, int gid, gid_t *groups, size_t ngroups,
		int no_new_privs, pid_t *pid);

#endif
