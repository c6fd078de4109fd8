package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// maxSeccompProfile bounds a Localhost profile file.
const maxSeccompProfile = 1 << 20

// Every seccomp action, operator, architecture and flag the runtime spec
// defines; anything else in a profile is refused.
var (
	seccompActions = []specs.LinuxSeccompAction{
		specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap,
		specs.ActErrno, specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify,
	}
	seccompOperators = []specs.LinuxSeccompOperator{
		specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
		specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
	}
	seccompArchs = []specs.Arch{
		specs.ArchX86, specs.ArchX86_64, specs.ArchX32, specs.ArchARM, specs.ArchAARCH64,
		specs.ArchMIPS, specs.ArchMIPS64, specs.ArchMIPS64N32, specs.ArchMIPSEL,
		specs.ArchMIPSEL64, specs.ArchMIPSEL64N32, specs.ArchPPC, specs.ArchPPC64,
		specs.ArchPPC64LE, specs.ArchS390, specs.ArchS390X, specs.ArchPARISC,
		specs.ArchPARISC64, specs.ArchRISCV64, specs.ArchLOONGARCH64, specs.ArchM68K,
		specs.ArchSH, specs.ArchSHEB,
	}
	seccompFlags = []specs.LinuxSeccompFlag{
		specs.LinuxSeccompFlagLog, specs.LinuxSeccompFlagSpecAllow,
		specs.LinuxSeccompFlagWaitKillableRecv,
	}
)

// seccompProfile picks the process's seccomp filter from the CRI profile
// (or the deprecated seccomp_profile_path when the profile is unset). A nil
// profile and an empty path mean unconfined, as in the CRI. Privileged
// containers are always unconfined.
func seccompProfile(field string, p *runtimeapi.SecurityProfile, legacy, root string, caps *specs.LinuxCapabilities, privileged bool) (*specs.LinuxSeccomp, error) {
	if privileged {
		return nil, nil
	}
	var ref string
	switch {
	case p != nil:
		switch p.GetProfileType() {
		case runtimeapi.SecurityProfile_RuntimeDefault:
			return DefaultSeccomp(caps), nil
		case runtimeapi.SecurityProfile_Unconfined:
			return nil, nil
		case runtimeapi.SecurityProfile_Localhost:
			ref = p.GetLocalhostRef()
			field += ".localhost_ref"
		default:
			return nil, invalidf("%s.profile_type %d: unknown", field, p.GetProfileType())
		}
	case legacy == "", legacy == "unconfined":
		return nil, nil
	case legacy == "runtime/default", legacy == "docker/default":
		return DefaultSeccomp(caps), nil
	case strings.HasPrefix(legacy, "localhost/"):
		ref = strings.TrimPrefix(legacy, "localhost/")
		field = strings.TrimSuffix(field, "seccomp") + "seccomp_profile_path"
	default:
		return nil, invalidf("%s %q: not a known seccomp profile", strings.TrimSuffix(field, "seccomp")+"seccomp_profile_path", legacy)
	}
	return loadSeccompProfile(field, ref, root)
}

// loadSeccompProfile reads an OCI LinuxSeccomp JSON document from ref (an
// absolute path, or one relative to root).
func loadSeccompProfile(field, ref, root string) (*specs.LinuxSeccomp, error) {
	if ref == "" {
		return nil, invalidf("%s: empty for a Localhost profile", field)
	}
	p := ref
	if !filepath.IsAbs(ref) {
		if root == "" {
			return nil, invalidf("%s %q: relative, and no seccomp profile root is configured", field, ref)
		}
		if !filepath.IsLocal(ref) {
			return nil, invalidf("%s %q: leaves the seccomp profile root", field, ref)
		}
		p = filepath.Join(root, ref)
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, invalidf("%s %q: profile %s does not exist", field, ref, p)
	}
	if err != nil {
		return nil, fmt.Errorf("open seccomp profile %s: %w", p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSeccompProfile+1))
	if err != nil {
		return nil, fmt.Errorf("read seccomp profile %s: %w", p, err)
	}
	if len(b) > maxSeccompProfile {
		return nil, invalidf("%s %q: profile larger than %d bytes", field, ref, maxSeccompProfile)
	}
	var s specs.LinuxSeccomp
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, invalidf("%s %q: not an OCI seccomp profile: %v", field, ref, err)
	}
	if err := checkSeccomp(&s); err != nil {
		return nil, invalidf("%s %q: %v", field, ref, err)
	}
	return &s, nil
}

// checkSeccomp validates a profile against the runtime spec.
func checkSeccomp(s *specs.LinuxSeccomp) error {
	if !slices.Contains(seccompActions, s.DefaultAction) {
		return fmt.Errorf("defaultAction %q: unknown action", s.DefaultAction)
	}
	for _, a := range s.Architectures {
		if !slices.Contains(seccompArchs, a) {
			return fmt.Errorf("architectures: %q: unknown architecture", a)
		}
	}
	for _, fl := range s.Flags {
		if !slices.Contains(seccompFlags, fl) {
			return fmt.Errorf("flags: %q: unknown flag", fl)
		}
	}
	for i, sc := range s.Syscalls {
		if len(sc.Names) == 0 {
			return fmt.Errorf("syscalls[%d].names: empty", i)
		}
		for _, n := range sc.Names {
			if n == "" || strings.ContainsAny(n, " \t\n\x00") {
				return fmt.Errorf("syscalls[%d].names: %q: not a syscall name", i, n)
			}
		}
		if !slices.Contains(seccompActions, sc.Action) {
			return fmt.Errorf("syscalls[%d].action %q: unknown action", i, sc.Action)
		}
		for j, a := range sc.Args {
			if !slices.Contains(seccompOperators, a.Op) {
				return fmt.Errorf("syscalls[%d].args[%d].op %q: unknown operator", i, j, a.Op)
			}
			if a.Index > 5 {
				return fmt.Errorf("syscalls[%d].args[%d].index %d: syscalls take at most 6 arguments", i, j, a.Index)
			}
		}
	}
	if (s.DefaultAction == specs.ActNotify || slices.ContainsFunc(s.Syscalls, func(c specs.LinuxSyscall) bool { return c.Action == specs.ActNotify })) && s.ListenerPath == "" {
		return fmt.Errorf("SCMP_ACT_NOTIFY without listenerPath")
	}
	return nil
}
