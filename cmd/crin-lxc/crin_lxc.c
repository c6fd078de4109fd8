//go:build cgo

// The C half of crin-lxc (liblxc_cgo.go): what must run in C, before the
// Go runtime starts (the monitor and the read-only hook, entered from a
// constructor), and the small wrappers over liblxc's container API the
// Go side calls (crin_lxc.h).
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <lxc/lxccontainer.h>
#include <lxc/attach_options.h>

#include "crin_lxc.h"

// crin_open loads container name of lxcpath; NULL if it has no config.
static struct lxc_container *crin_open(const char *lxcpath, const char *name) {
	struct lxc_container *c = lxc_container_new(name, lxcpath);
	if (!c)
		return NULL;
	if (!c->is_defined(c)) {
		lxc_container_put(c);
		return NULL;
	}
	return c;
}

// crin_check loads the container's config: 0, or -1 when LXC refuses it.
int crin_check(const char *lxcpath, const char *name) {
	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c)
		return -1;
	lxc_container_put(c);
	return 0;
}

// The monitor: "crin-lxc __monitor <lxcpath> <name> <dir>" is handled
// here, before the Go runtime starts, so the process that runs the
// container is single-threaded: liblxc's signal handling (a signalfd
// for SIGCHLD and the signals it forwards to the init) sees every
// signal, and setns works for every namespace type.

static void crin_fail(const char *dir, const char *what, int err) {
	char path[4096];
	snprintf(path, sizeof(path), "%s/start-error", dir);
	FILE *f = fopen(path, "we");
	if (f) {
		if (err)
			fprintf(f, "%s: %s", what, strerror(err));
		else
			fprintf(f, "%s", what);
		fclose(f);
	}
	_exit(1);
}

// crin_read reads all of path (NUL-terminated, length in *len).
static char *crin_read(const char *path, size_t *len) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);
	for (;;) {
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += r;
	}
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
}

static int crin_ns_flag(const char *t) {
	if (!strcmp(t, "net")) return CLONE_NEWNET;
	if (!strcmp(t, "ipc")) return CLONE_NEWIPC;
	if (!strcmp(t, "uts")) return CLONE_NEWUTS;
	if (!strcmp(t, "pid")) return CLONE_NEWPID;
	return 0;
}

// crin_holder starts the process the container shares its joined
// namespaces with (lxc.namespace.share.*: liblxc takes a pid there, not a
// namespace file). The monitor itself enters none: liblxc's command
// socket is an abstract one, which lives in the monitor's network
// namespace, and crin-lxc reaches it from the host's; and liblxc starts a
// container in a PID namespace it was told to share, not one its monitor
// entered.
//
// The holder enters the namespaces in fds (types in flags, n of them).
// For a PID namespace it forks an anchor child, which begins in it, and
// whose pid is returned; otherwise its own. The holder also keeps the
// container's memory cgroup (v1), memcg being its cgroup.procs (unless
// NULL): it joins it once liblxc made it, since liblxc removes the
// container's cgroups before the monitor exits, and crin-shim reads the
// OOM kill counter when it reaps the monitor ("crin-lxc delete" removes
// the cgroup then). The anchor ends once the container's init is in
// that cgroup (liblxc holds the namespaces then); without memcg, with
// the holder. The holder is not the monitor's child (liblxc reaps every
// child, wait4(-1), when a start fails): an intermediate forks it and
// exits, so the shim (a subreaper) inherits it. It ends when the pipe
// the monitor holds closes, i.e. with the monitor.
static pid_t crin_holder(int *fds, int *flags, int n, const char *memcg) {
	int ready[2], life[2];
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(life, O_CLOEXEC) < 0)
		return -1;
	pid_t mid = fork();
	if (mid < 0)
		return -1;
	if (mid == 0) {
		close(ready[0]);
		close(life[1]);
		if (fork() != 0)
			_exit(0);
		int e = 0;
		bool pidns = false;
		for (int i = 0; i < n && !e; i++) {
			if (setns(fds[i], flags[i]) < 0)
				e = errno;
			if (flags[i] == CLONE_NEWPID)
				pidns = true;
		}
		pid_t anchor = 0;
		if (!e && pidns) {
			anchor = fork();
			if (anchor < 0)
				e = errno;
			if (anchor == 0) {
				struct pollfd pfd = {.fd = life[0], .events = POLLIN};
				poll(&pfd, 1, -1);
				_exit(0);
			}
		}
		pid_t share = anchor > 0 ? anchor : getpid();
		if (write(ready[1], &share, sizeof(share)) < 0 || write(ready[1], &e, sizeof(e)) < 0 || e)
			_exit(1);
		close(ready[1]);
		// The container's cgroup appears as liblxc starts it.
		bool joined = memcg == NULL;
		for (;;) {
			if (!joined) {
				int fd = open(memcg, O_WRONLY | O_CLOEXEC);
				if (fd >= 0) {
					joined = true;
					if (write(fd, "0", 1) < 0) {
					}
					close(fd);
				}
			}
			if (joined && anchor > 0 && memcg) {
				// Two pids in the cgroup: the init is in.
				size_t len = 0;
				char *procs = crin_read(memcg, &len);
				int lines = 0;
				for (size_t i = 0; procs && i < len; i++)
					lines += procs[i] == '\n';
				free(procs);
				if (lines >= 2) {
					kill(anchor, SIGKILL);
					waitpid(anchor, NULL, 0);
					anchor = 0;
				}
			}
			struct pollfd pfd = {.fd = life[0], .events = POLLIN};
			if (poll(&pfd, 1, joined && anchor <= 0 ? -1 : 2) > 0) {
				if (anchor > 0) {
					kill(anchor, SIGKILL);
					waitpid(anchor, NULL, 0);
				}
				_exit(0);
			}
		}
	}
	close(ready[1]);
	close(life[0]);
	waitpid(mid, NULL, 0);
	pid_t h = -1;
	int e = EIO;
	if (read(ready[0], &h, sizeof(h)) != sizeof(h) || read(ready[0], &e, sizeof(e)) != sizeof(e) || e) {
		close(ready[0]);
		errno = e ? e : EIO;
		return -1;
	}
	close(ready[0]);
	// life[1] stays open, close-on-exec, until the monitor ends.
	return h;
}

static void crin_monitor(const char *lxcpath, const char *name, const char *dir) {
	char path[4096];
	// Wait for "crin-lxc start": it opens the fifo and writes one byte.
	// A reader that gets EOF (a writer that wrote nothing) waits again.
	snprintf(path, sizeof(path), "%s/start", dir);
	for (;;) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			crin_fail(dir, "open the start fifo", errno);
		char b;
		ssize_t r;
		do
			r = read(fd, &b, 1);
		while (r < 0 && errno == EINTR);
		close(fd);
		if (r == 1)
			break;
	}
	snprintf(path, sizeof(path), "%s/started", dir);
	int sf = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (sf >= 0)
		close(sf);

	// The run file: NUL-terminated words, argc, the argv, then pairs of
	// namespace type and path to join.
	size_t len;
	snprintf(path, sizeof(path), "%s/run", dir);
	char *run = crin_read(path, &len);
	if (!run)
		crin_fail(dir, "read the run file", errno);
	char *words[4096];
	int nw = 0;
	for (size_t i = 0; i < len && nw < 4095; i += strlen(run + i) + 1)
		words[nw++] = run + i;
	if (nw < 1)
		crin_fail(dir, "empty run file", 0);
	int argc = atoi(words[0]);
	if (argc < 1 || argc + 1 > nw)
		crin_fail(dir, "bad run file", 0);
	char **argv = calloc(argc + 1, sizeof(char *));
	for (int i = 0; i < argc; i++)
		argv[i] = words[1 + i];
	// The joined namespaces are shared with the holder (crin_holder).
	int fds[8], flags[8], n = 0;
	const char *types[8];
	const char *memcg = NULL;
	for (int i = 1 + argc; i + 1 < nw; i += 2) {
		if (!strcmp(words[i], "memcg")) {
			memcg = words[i + 1];
			continue;
		}
		if (n == 8 || !crin_ns_flag(words[i]))
			crin_fail(dir, "bad run file", 0);
		if ((fds[n] = open(words[i + 1], O_RDONLY | O_CLOEXEC)) < 0) {
			char what[4200];
			snprintf(what, sizeof(what), "open the %s namespace %s", words[i], words[i + 1]);
			crin_fail(dir, what, errno);
		}
		flags[n] = crin_ns_flag(words[i]);
		types[n++] = words[i];
	}
	char sharepid[32] = "";
	if (n > 0 || memcg) {
		pid_t h = crin_holder(fds, flags, n, memcg);
		if (h < 0)
			crin_fail(dir, "join the pod's namespaces", errno);
		snprintf(sharepid, sizeof(sharepid), "%d", h);
	}

	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c)
		crin_fail(dir, "liblxc did not load the container's config", 0);
	for (int i = 0; i < n; i++) {
		char key[64];
		snprintf(key, sizeof(key), "lxc.namespace.share.%s", types[i]);
		if (!c->set_config_item(c, key, sharepid))
			crin_fail(dir, "liblxc did not take lxc.namespace.share", 0);
		close(fds[i]);
	}
	c->want_daemonize(c, false);
	bool ok = c->start(c, 0, argv);
	int status = c->error_num;
	if (!ok)
		crin_fail(dir, "liblxc did not start the container", 0);
	snprintf(path, sizeof(path), "%s/ran", dir);
	FILE *rf = fopen(path, "we");
	if (rf) {
		fprintf(rf, "%d\n", status);
		fclose(rf);
	}
	// Exit as the container's init did. liblxc reports an init killed
	// by a signal as (signal << 8) | 0x7f (the layout of a stop).
	int sig = 0;
	if (WIFSIGNALED(status))
		sig = WTERMSIG(status);
	else if (WIFSTOPPED(status))
		sig = WSTOPSIG(status);
	if (sig > 0) {
		signal(sig, SIG_DFL);
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		kill(getpid(), sig);
		_exit(128 + sig);
	}
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 255);
}

// crin_hook_errfd is <dir>/hook-error of the hook running, opened before
// it enters the container's mount namespace, for crin_hook_fail.
static int crin_hook_errfd = -1;

// crin_hook_fail ends a hook with an error, also left in <dir>/hook-error
// for crin-lxc start to report (liblxc logs only that the hook failed).
static void crin_hook_fail(const char *what, const char *p, int err) {
	char msg[4400];
	int n = snprintf(msg, sizeof(msg), "crin-lxc read-only hook: %s %s: %s", what, p, strerror(err));
	fprintf(stderr, "%s\n", msg);
	if (crin_hook_errfd >= 0 && n > 0 && write(crin_hook_errfd, msg, strlen(msg)) < 0) {
	}
	_exit(1);
}

// crin_unescape decodes mountinfo's octal escapes (\040) in place.
static void crin_unescape(char *s) {
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] && r[3]) {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

// crin_readonly_tree remounts read-only every mount at or below dir
// (an rro mount's submounts), keeping each one's other flags; mountinfo
// is the container init's, read before entering its mount namespace
// (the container's /proc shows its own PID namespace, without us).
static void crin_readonly_tree(const char *dir, const char *mountinfo) {
	size_t dl = strlen(dir);
	char *mi = strdup(mountinfo);
	for (char *line = strtok(mi, "\n"); line; line = strtok(NULL, "\n")) {
		// id parent major:minor root mountpoint options ...
		char *f[5];
		int n = 0;
		for (char *q = line; n < 5 && q; n++) {
			f[n] = q;
			q = strchr(q, ' ');
			if (q)
				*q++ = '\0';
		}
		if (n < 5)
			continue;
		char *mp = f[4];
		crin_unescape(mp);
		if (strncmp(mp, dir, dl) || (mp[dl] != '\0' && mp[dl] != '/'))
			continue;
		struct statvfs sv;
		unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
		if (statvfs(mp, &sv) == 0) {
			if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
			if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
			if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
			if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
			if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
			if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
		}
		if (mount(NULL, mp, NULL, flags, NULL) < 0)
			crin_hook_fail("make read-only", mp, errno);
	}
	free(mi);
}

// crin_readonly is the start-host hook, "crin-lxc __readonly <dir> ...":
// liblxc runs it on the host once the container is set up, just before
// its init starts, with the init's pid in LXC_PID. It enters the
// container's mount namespace and makes each path listed in
// <dir>/readonly (NUL-terminated; 'p' then the path, or 'r' then the path
// of an rro mount, whose submounts too) read-only, and remounts each bind
// mount listed as 'b<MS_* flags>:<path>' with its flags (liblxc applies
// them only with ro): later than the mount entries
// could, since liblxc writes the spec's sysctls into /proc/sys after
// those. Single-threaded (before the Go runtime), as setns to a mount
// namespace must be.
static void crin_readonly(const char *dir) {
	const char *pid = getenv("LXC_PID");
	char path[4096];
	snprintf(path, sizeof(path), "%s/hook-error", dir);
	crin_hook_errfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (!pid)
		crin_hook_fail("find the container's init:", "LXC_PID", ENOENT);
	snprintf(path, sizeof(path), "%s/readonly", dir);
	size_t len;
	char *list = crin_read(path, &len);
	if (!list)
		crin_hook_fail("read", path, errno);
	snprintf(path, sizeof(path), "/proc/%s/mountinfo", pid);
	size_t milen;
	char *mountinfo = crin_read(path, &milen);
	if (!mountinfo)
		crin_hook_fail("read", path, errno);
	snprintf(path, sizeof(path), "/proc/%s/ns/mnt", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNS) < 0)
		crin_hook_fail("enter", path, errno);
	for (size_t i = 0; i < len; i += strlen(list + i) + 1) {
		const char *p = list + i + 1;
		if (list[i] == 'r') {
			crin_readonly_tree(p, mountinfo);
			continue;
		}
		if (list[i] == 'b') {
			char *end;
			unsigned long flags = strtoul(p, &end, 10);
			if (*end != ':')
				crin_hook_fail("parse", p, EINVAL);
			if (mount(NULL, end + 1, NULL, MS_REMOUNT | MS_BIND | flags, NULL) < 0)
				crin_hook_fail("remount", end + 1, errno);
			continue;
		}
		// The root is remounted where it is: a bind mount over it
		// would not be the init's root.
		if (strcmp(p, "/") && mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			crin_hook_fail("bind", p, errno);
		}
		unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
		if (strcmp(p, "/"))
			flags |= MS_NOSUID | MS_NODEV | MS_NOEXEC;
		if (mount(NULL, p, NULL, flags, NULL) < 0)
			crin_hook_fail("make read-only", p, errno);
	}
	_exit(0);
}

__attribute__((constructor)) static void crin_monitor_entry(void) {
	size_t len;
	char *cmd = crin_read("/proc/self/cmdline", &len);
	if (!cmd)
		return;
	char *w[5] = {0};
	int n = 0;
	for (size_t i = 0; i < len && n < 5; i += strlen(cmd + i) + 1)
		w[n++] = cmd + i;
	if (n == 5 && !strcmp(w[1], "__monitor"))
		crin_monitor(w[2], w[3], w[4]);
	if (n >= 3 && !strcmp(w[1], "__readonly"))
		crin_readonly(w[2]);
	free(cmd);
}

// crin_init_pid is the running container's init pid, or -1.
int crin_init_pid(const char *lxcpath, const char *name) {
	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c)
		return -1;
	pid_t pid = c->init_pid(c);
	lxc_container_put(c);
	return pid;
}

// crin_state copies LXC's state name of the container into buf.
int crin_state(const char *lxcpath, const char *name, char *buf, size_t len) {
	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c)
		return -1;
	const char *s = c->state(c);
	snprintf(buf, len, "%s", s ? s : "UNKNOWN");
	lxc_container_put(c);
	return 0;
}

// crin_freeze freezes (on != 0) or thaws the container.
int crin_freeze(const char *lxcpath, const char *name, int on) {
	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c)
		return -1;
	bool ok = on ? c->freeze(c) : c->unfreeze(c);
	lxc_container_put(c);
	return ok ? 0 : -1;
}

// crin_attach runs argv in the running container with this process's
// stdio, as uid:gid with groups, in cwd, with exactly env. liblxc makes
// the process a child of this one (CLONE_PARENT from its intermediate).
int crin_attach(const char *lxcpath, const char *name, char **argv, char **env,
		       const char *cwd, int uid, int gid, gid_t *groups, size_t ngroups,
		       int no_new_privs, pid_t *pid) {
	struct lxc_container *c = crin_open(lxcpath, name);
	if (!c) {
		errno = ENOENT;
		return -1;
	}
	lxc_attach_options_t opts = LXC_ATTACH_OPTIONS_DEFAULT;
	lxc_attach_command_t cmd = {.program = argv[0], .argv = argv};
	opts.env_policy = LXC_ATTACH_CLEAR_ENV;
	opts.extra_env_vars = env;
	if (cwd && *cwd)
		opts.initial_cwd = (char *)cwd;
	opts.uid = uid;
	opts.gid = gid;
	opts.groups.size = ngroups;
	opts.groups.list = groups;
	opts.attach_flags |= LXC_ATTACH_SETGROUPS;
	if (no_new_privs)
		opts.attach_flags |= LXC_ATTACH_NO_NEW_PRIVS;
	opts.stdin_fd = 0;
	opts.stdout_fd = 1;
	opts.stderr_fd = 2;
	int ret = c->attach(c, lxc_attach_run_command, &cmd, &opts, pid);
	lxc_container_put(c);
	return ret;
}
