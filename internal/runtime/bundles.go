package runtime

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/crin-dev/crin/internal/runtime/shim"
)

// CheckID accepts the container ids every backend can use as a directory
// name and an OCI runtime id: 1 to 128 of [A-Za-z0-9_.-], not starting
// with '.' or '-'. Anything else is errdefs.ErrInvalidArgument.
func CheckID(id string) error {
	if id == "" || len(id) > 128 || id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("container id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
		default:
			return fmt.Errorf("container id %q: %w", id, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// ListBundles returns the ids of the containers whose bundle (a dir named
// by a valid id holding config.json) is in stateDir: what a backend that
// keeps one bundle dir per container has, whether or not crind knows it.
func ListBundles(stateDir string) ([]string, error) {
	ents, err := os.ReadDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if !e.IsDir() || CheckID(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(stateDir, e.Name(), shim.ConfigFile)); err == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
