package lxcconf

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultErrno is what an errno action without errnoRet returns (EPERM).
const defaultErrno = 1

// seccomp writes the spec's filter in LXC's own profile format (version
// 2): a denylist when the default action allows, else an allowlist with
// the default action; one rule line per syscall name, with its argument
// conditions; every rule in the [all] section (LXC resolves each name on
// the native and compat architectures).
func (t *translator) seccomp() error {
	s := t.s.Linux.Seccomp
	if s == nil {
		return nil
	}
	switch {
	case s.ListenerPath != "" || s.ListenerMetadata != "":
		return unsupported("linux.seccomp.listenerPath", "seccomp notification is not supported by crin-lxc")
	case len(s.Flags) > 0:
		return unsupported("linux.seccomp.flags", "lxc sets no seccomp filter flags (%v)", s.Flags)
	}
	def, err := seccompAction("linux.seccomp.defaultAction", s.DefaultAction, s.DefaultErrnoRet)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("2\n")
	if def == "allow" {
		b.WriteString("denylist\n")
	} else {
		b.WriteString("allowlist " + def + "\n")
	}
	b.WriteString("[all]\n")
	for i, sc := range s.Syscalls {
		field := fmt.Sprintf("linux.seccomp.syscalls[%d]", i)
		act, err := seccompAction(field+".action", sc.Action, sc.ErrnoRet)
		if err != nil {
			return err
		}
		if act == def {
			continue
		}
		var args strings.Builder
		for j, a := range sc.Args {
			if !strings.HasPrefix(string(a.Op), "SCMP_CMP_") {
				return unsupported(fmt.Sprintf("%s.args[%d].op", field, j), "%q", a.Op)
			}
			fmt.Fprintf(&args, " [%d,%d,%s,%d]", a.Index, a.Value, a.Op, a.ValueTwo)
		}
		for _, name := range sc.Names {
			if name == "" || strings.ContainsAny(name, " \n[]#") {
				return unsupported(field+".names", "%q is not a syscall name", name)
			}
			b.WriteString(name + " " + act + args.String() + "\n")
		}
	}
	t.c.Seccomp = b.String()
	if t.o.SeccompFile == "" {
		return unsupported("linux.seccomp", "no file to write the LXC profile to")
	}
	t.add("lxc.seccomp.profile", t.o.SeccompFile)
	return nil
}

// seccompAction is LXC's name of an OCI seccomp action.
func seccompAction(field string, a specs.LinuxSeccompAction, errno *uint) (string, error) {
	switch a {
	case specs.ActAllow:
		return "allow", nil
	case specs.ActErrno:
		n := uint(defaultErrno)
		if errno != nil {
			n = *errno
		}
		return fmt.Sprintf("errno %d", n), nil
	case specs.ActKill, specs.ActKillThread:
		return "kill", nil
	case specs.ActTrap:
		return "trap", nil
	}
	return "", unsupported(field, "%q has no LXC equivalent (allow, errno, kill, trap)", a)
}
