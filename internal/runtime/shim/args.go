package shim

import (
	"os"
	"strconv"
)

// UnsetEnv names, in a shim's environment, the variables crind set for the
// shim process alone; the shim unsets them (and UnsetEnv) as it starts, so
// the runtime commands it runs inherit crind's environment.
const UnsetEnv = "CRIN_SHIM_UNSET"

// Env is the environment crind starts a shim with: its own, plus
// GOMAXPROCS=1 unless it sets GOMAXPROCS itself (a shim waits on pipes,
// sockets and children; each further P costs it about 180 KiB).
func Env() []string {
	env := os.Environ()
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		env = append(env, "GOMAXPROCS=1", UnsetEnv+"=GOMAXPROCS")
	}
	return env
}

// Config is what one shim process needs; the oci backend passes it as
// flags. The containers come later, one OpCreate each.
type Config struct {
	Dir         string // the shim's own dir: shim.pid, shim.sock, shim.log
	Runtime     string // OCI runtime binary
	RuntimeRoot string // the runtime's --root
	// SystemdCgroup makes the runtime run with --systemd-cgroup: the
	// systemd cgroup driver, container cgroups as scopes in the pod's
	// slice (linux.cgroupsPath in slice:prefix:name form).
	SystemdCgroup bool
	// OOMScoreAdj, when set, becomes the shim's own oom_score_adj.
	OOMScoreAdj *int
}

// RuntimeFlags are the OCI runtime's global flags for c, before the
// command: its --root, and --systemd-cgroup with the systemd driver.
func (c Config) RuntimeFlags() []string {
	if c.SystemdCgroup {
		return []string{"--root", c.RuntimeRoot, "--systemd-cgroup"}
	}
	return []string{"--root", c.RuntimeRoot}
}

// Args returns the command-line flags that make a shim use c.
func (c Config) Args() []string {
	args := []string{"-dir", c.Dir, "-runtime", c.Runtime, "-root", c.RuntimeRoot}
	if c.OOMScoreAdj != nil {
		args = append(args, "-oom-score-adj", strconv.Itoa(*c.OOMScoreAdj))
	}
	if c.SystemdCgroup {
		args = append(args, "-systemd-cgroup")
	}
	return args
}
