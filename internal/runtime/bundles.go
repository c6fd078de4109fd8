package runtime

import (
	"errors"
	"fmt"
	"io/fs"
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

// MakeBundleDir checks what every backend needs of a create request (a
// valid id, an absolute rootfs path, an absolute log path if any) and
// makes the container's bundle dir, stateDir/<id>, mode 0700. A bad
// request is errdefs.ErrInvalidArgument, an id in use
// errdefs.ErrAlreadyExists.
func MakeBundleDir(stateDir string, req CreateRequest) (string, error) {
	if err := CheckID(req.ID); err != nil {
		return "", err
	}
	if req.Spec == nil || req.Spec.Root == nil || !filepath.IsAbs(req.Spec.Root.Path) {
		return "", fmt.Errorf("create container %s: spec.root.path must be absolute: %w", req.ID, errdefs.ErrInvalidArgument)
	}
	if req.LogPath != "" && !filepath.IsAbs(req.LogPath) {
		return "", fmt.Errorf("create container %s: log path %q is not absolute: %w", req.ID, req.LogPath, errdefs.ErrInvalidArgument)
	}
	dir := filepath.Join(stateDir, req.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create container %s: %w", req.ID, errdefs.ErrAlreadyExists)
		}
		return "", fmt.Errorf("create container %s: %w", req.ID, err)
	}
	return dir, nil
}
