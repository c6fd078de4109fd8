package oci

import (
	"maps"
	"runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// crin's RuntimeDefault seccomp profile is a deny list: every syscall is
// allowed except the ones below, which fail with EPERM (the runtime's
// default errno for SCMP_ACT_ERRNO). A deny list was chosen over an allow
// list because the kernel already checks capabilities on nearly every
// syscall: the filter's job is to close the holes that capability checks
// leave (kernel attack surface reachable without privilege, and namespace
// tricks), and a deny list does not break workloads that use syscalls newer
// than the profile. Syscalls that only a capability would let through are
// denied unless the container keeps that capability, so adding a
// capability to a container works without a custom profile.
//
// Names a kernel or libseccomp does not know are skipped by the runtime.

// deniedSyscalls are refused whatever the capabilities: module and kexec
// loading, reboot, obsolete or debug-only interfaces, the kernel keyring
// (not namespaced), and io_uring, which bypasses syscall filtering.
var deniedSyscalls = []string{
	"_sysctl", "create_module", "get_kernel_syms", "query_module", "uselib",
	"nfsservctl", "vm86", "vm86old", "lookup_dcookie", "kexec_load",
	"kexec_file_load", "reboot", "add_key", "request_key", "keyctl",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// capSyscalls are refused unless the container keeps the capability the
// kernel would check anyway.
var capSyscalls = map[string][]string{
	"CAP_SYS_ADMIN": {
		"mount", "umount", "umount2", "pivot_root", "setns", "quotactl",
		"quotactl_fd", "name_to_handle_at", "fsopen", "fsconfig", "fsmount",
		"fspick", "move_mount", "open_tree", "mount_setattr", "swapon",
		"swapoff", "lookup_dcookie",
	},
	"CAP_SYS_MODULE":      {"init_module", "finit_module", "delete_module"},
	"CAP_SYS_PACCT":       {"acct"},
	"CAP_SYS_TIME":        {"settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64"},
	"CAP_SYSLOG":          {"syslog"},
	"CAP_SYS_RAWIO":       {"iopl", "ioperm"},
	"CAP_SYS_PTRACE":      {"kcmp", "userfaultfd"},
	"CAP_SYS_NICE":        {"move_pages"},
	"CAP_DAC_READ_SEARCH": {"open_by_handle_at"},
	"CAP_BPF":             {"bpf"},
	"CAP_PERFMON":         {"perf_event_open"},
}

// capSyscallAlternatives lets the older, broader capability stand in for
// the split ones (Linux before 5.8 checked CAP_SYS_ADMIN for bpf and perf).
var capSyscallAlternatives = map[string]string{
	"CAP_BPF":     "CAP_SYS_ADMIN",
	"CAP_PERFMON": "CAP_SYS_ADMIN",
}

const (
	cloneNewUser = 0x10000000 // CLONE_NEWUSER
	errnoENOSYS  = 38
)

// DefaultSeccomp returns crin's RuntimeDefault profile for a process with
// caps (nil: no capabilities).
func DefaultSeccomp(caps *specs.LinuxCapabilities) *specs.LinuxSeccomp {
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: nativeArchs(),
	}
	denied := append([]string(nil), deniedSyscalls...)
	for _, c := range slices.Sorted(maps.Keys(capSyscalls)) {
		if hasCapability(caps, c) || hasCapability(caps, capSyscallAlternatives[c]) {
			continue
		}
		for _, n := range capSyscalls[c] {
			if !slices.Contains(denied, n) {
				denied = append(denied, n)
			}
		}
	}
	s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: denied, Action: specs.ActErrno})

	if !hasCapability(caps, "CAP_SYS_ADMIN") {
		// New user namespaces give an unprivileged process a full set of
		// capabilities over fresh namespaces: the biggest kernel attack
		// surface left. clone's flags are its first argument everywhere
		// except s390, where they are the second.
		flagsArg := uint(0)
		if runtime.GOARCH == "s390x" {
			flagsArg = 1
		}
		s.Syscalls = append(s.Syscalls,
			specs.LinuxSyscall{
				Names:  []string{"unshare"},
				Action: specs.ActErrno,
				Args:   []specs.LinuxSeccompArg{{Index: 0, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: specs.OpMaskedEqual}},
			},
			specs.LinuxSyscall{
				Names:  []string{"clone"},
				Action: specs.ActErrno,
				Args:   []specs.LinuxSeccompArg{{Index: flagsArg, Value: cloneNewUser, ValueTwo: cloneNewUser, Op: specs.OpMaskedEqual}},
			})
		// clone3 passes its flags in memory a filter cannot read. ENOSYS
		// makes C libraries fall back to clone, where the rule above
		// applies; EPERM would make them fail thread creation.
		enosys := uint(errnoENOSYS)
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys,
		})
	}
	return s
}

// nativeArchs lists the architectures the filter covers: the native one
// and those whose binaries the kernel runs natively on it.
func nativeArchs() []specs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "386":
		return []specs.Arch{specs.ArchX86}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	case "arm":
		return []specs.Arch{specs.ArchARM}
	case "ppc64le":
		return []specs.Arch{specs.ArchPPC64LE}
	case "s390x":
		return []specs.Arch{specs.ArchS390X, specs.ArchS390}
	case "riscv64":
		return []specs.Arch{specs.ArchRISCV64}
	case "loong64":
		return []specs.Arch{specs.ArchLOONGARCH64}
	}
	return nil // the runtime's native architecture
}
