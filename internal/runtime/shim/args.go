package shim

import "strconv"

// Config is what one shim process needs; the oci backend passes it as
// flags. The containers come later, one OpCreate each.
type Config struct {
	Dir         string // the shim's own dir: shim.pid, shim.sock, shim.log
	Runtime     string // OCI runtime binary
	RuntimeRoot string // the runtime's --root
	// OOMScoreAdj, when set, becomes the shim's own oom_score_adj.
	OOMScoreAdj *int
}

// Args returns the command-line flags that make a shim use c.
func (c Config) Args() []string {
	args := []string{"-dir", c.Dir, "-runtime", c.Runtime, "-root", c.RuntimeRoot}
	if c.OOMScoreAdj != nil {
		args = append(args, "-oom-score-adj", strconv.Itoa(*c.OOMScoreAdj))
	}
	return args
}
