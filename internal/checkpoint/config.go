package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ContainerConfig is the content of ConfigDumpFile. Its JSON keys are those of
// checkpointctl's metadata.ContainerConfig, which CRI-O, containerd and
// Podman write too. The times have no omitempty: checkpointctl fails to
// decode an empty string, and the zero time marshals as a valid RFC 3339
// timestamp.
type ContainerConfig struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// RootfsImage is the image as the user asked for it.
	RootfsImage string `json:"rootfsImage,omitempty"`
	// RootfsImageRef is the image's id; a restore takes the image from it.
	RootfsImageRef string `json:"rootfsImageRef,omitempty"`
	// RootfsImageName is the image name checkpointctl shows.
	RootfsImageName string `json:"rootfsImageName,omitempty"`
	// Runtime is the runtime handler the container ran with.
	Runtime          string    `json:"runtime,omitempty"`
	CreatedTime      time.Time `json:"createdTime"`
	CheckpointedTime time.Time `json:"checkpointedTime"`
	RestoredTime     time.Time `json:"restoredTime"`
	Restored         bool      `json:"restored"`
}

// ReadConfig reads ConfigDumpFile in dir, an extracted archive. A missing file
// is errdefs.ErrNotFound, one that is not valid JSON of ContainerConfig
// errdefs.ErrInvalidArgument.
func ReadConfig(dir string) (ContainerConfig, error) {
	var c ContainerConfig
	if err := readJSON(filepath.Join(dir, ConfigDumpFile), &c); err != nil {
		return ContainerConfig{}, err
	}
	return c, nil
}

// ReadSpec reads SpecDumpFile in dir, an extracted archive, with the same
// errors as ReadConfig.
func ReadSpec(dir string) (*specs.Spec, error) {
	var s specs.Spec
	if err := readJSON(filepath.Join(dir, SpecDumpFile), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WriteConfig writes c as ConfigDumpFile in dir (mode 0600), replacing an
// earlier one; it fails only as writing a file does.
func WriteConfig(dir string, c ContainerConfig) error {
	return writeJSON(filepath.Join(dir, ConfigDumpFile), c)
}

// WriteSpec writes s as SpecDumpFile in dir (mode 0600), like WriteConfig; a
// nil s is errdefs.ErrInvalidArgument.
func WriteSpec(dir string, s *specs.Spec) error {
	if s == nil {
		return fmt.Errorf("write %s: no spec: %w", SpecDumpFile, errdefs.ErrInvalidArgument)
	}
	return writeJSON(filepath.Join(dir, SpecDumpFile), s)
}

func readJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read checkpoint file %s: %w", p, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read checkpoint file: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode checkpoint file %s: %v: %w", p, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(p), err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("write checkpoint file: %w", err)
	}
	return nil
}
