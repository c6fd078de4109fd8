package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// ExecProcess is the process spec of an exec in the container whose
// bundle is dir: the container's process with args replaced and a
// terminal requested or not (with TERM=xterm unless the container sets
// TERM), as JSON. Both backends use it.
func ExecProcess(dir string, args []string, tty bool) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(dir, shim.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode bundle: %w", err)
	}
	if spec.Process == nil {
		return nil, fmt.Errorf("bundle has no process: %w", errdefs.ErrFailedPrecondition)
	}
	p := *spec.Process
	p.Args = args
	p.Terminal = tty
	p.ConsoleSize = nil
	if tty && !hasEnv(p.Env, "TERM") {
		p.Env = append(append([]string(nil), p.Env...), "TERM=xterm")
	}
	return json.Marshal(&p)
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '=' {
			return true
		}
	}
	return false
}
