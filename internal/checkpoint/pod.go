package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
)

// A pod checkpoint (CRI CheckpointPod) is a directory, not an archive: the
// caller owns it and chooses how to ship it. At its top is the manifest
// (PodManifestFile); beside it one directory per container, holding what
// a container archive holds (spec.dump, config.dump, rootfs-diff.tar,
// CRIU's images under ImagesDir), unpacked.

// PodManifestFile is the manifest of a pod checkpoint directory.
const PodManifestFile = "pod-checkpoint.json"

// PodManifestVersion is the manifest format this crind writes and reads.
const PodManifestVersion = 1

// PodManifest describes a pod checkpoint.
type PodManifest struct {
	Version int `json:"version"`
	// Engine is the OCI runtime that dumped the containers ("runc",
	// "crun"); only it restores them.
	Engine string `json:"engine"`
	// RuntimeHandler is the CRI handler the pod ran with.
	RuntimeHandler string `json:"runtimeHandler"`
	// PodSandboxID is the checkpointed pod's id.
	PodSandboxID string `json:"podSandboxId"`
	// PodConfig is the pod's CRI PodSandboxConfig, in protobuf's JSON.
	PodConfig        json.RawMessage `json:"podConfig"`
	CheckpointedTime time.Time       `json:"checkpointedTime"`
	Containers       []PodContainer  `json:"containers"`
}

// PodContainer is one checkpointed container of a pod.
type PodContainer struct {
	// Name is the container's CRI metadata name, unique in the pod.
	Name string `json:"name"`
	// ID is the checkpointed container's id.
	ID string `json:"id"`
	// Dir is its checkpoint's directory, a single name inside the pod
	// checkpoint directory.
	Dir string `json:"dir"`
	// Config is the container's CRI ContainerConfig, in protobuf's JSON.
	Config json.RawMessage `json:"config"`
}

// WritePodManifest writes m into dir, atomically.
func WritePodManifest(dir string, m PodManifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, PodManifestFile), b)
}

// ReadPodManifest reads and checks the manifest of the pod checkpoint in
// dir: a malformed one is errdefs.ErrInvalidArgument, a missing one
// errdefs.ErrNotFound.
func ReadPodManifest(dir string) (PodManifest, error) {
	var m PodManifest
	b, err := os.ReadFile(filepath.Join(dir, PodManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("no %s: not a pod checkpoint: %w", PodManifestFile, errdefs.ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %v: %w", PodManifestFile, err, errdefs.ErrInvalidArgument)
	}
	if m.Version != PodManifestVersion {
		return m, fmt.Errorf("%s: version %d, this crind reads version %d: %w", PodManifestFile, m.Version, PodManifestVersion, errdefs.ErrInvalidArgument)
	}
	if len(m.Containers) == 0 {
		return m, fmt.Errorf("%s: no containers: %w", PodManifestFile, errdefs.ErrInvalidArgument)
	}
	names := map[string]bool{}
	for i, c := range m.Containers {
		if c.Name == "" || names[c.Name] {
			return m, fmt.Errorf("%s: containers[%d]: name %q is empty or not unique: %w", PodManifestFile, i, c.Name, errdefs.ErrInvalidArgument)
		}
		names[c.Name] = true
		if c.Dir == "" || c.Dir != filepath.Base(c.Dir) || c.Dir == "." || c.Dir == ".." {
			return m, fmt.Errorf("%s: containers[%d]: dir %q is not a name inside the checkpoint: %w", PodManifestFile, i, c.Dir, errdefs.ErrInvalidArgument)
		}
		st, err := os.Lstat(filepath.Join(dir, c.Dir))
		if err != nil || !st.IsDir() {
			return m, fmt.Errorf("%s: containers[%d]: dir %q is missing: %w", PodManifestFile, i, c.Dir, errdefs.ErrInvalidArgument)
		}
	}
	return m, nil
}

// CopyDir copies the tree at src to dst, which must not exist. With link
// set, a regular file is hard-linked where it can be (the same file
// system) and copied where not. Only directories and regular files are
// copied: anything else (a symlink, a device) is errdefs.ErrInvalidArgument,
// and dst is removed on any error.
func CopyDir(src, dst string, link bool) (retErr error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(dst)
		}
	}()
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(to, 0o700)
		case d.Type().IsRegular():
			if link {
				err := os.Link(p, to)
				if err == nil || !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) {
					return err
				}
			}
			return copyFile(p, to)
		}
		return fmt.Errorf("%s: %s is neither a file nor a directory: %w", src, rel, errdefs.ErrInvalidArgument)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// MoveDir moves the tree at src to dst (which must not exist): a rename
// on one file system, else a copy and the removal of src.
func MoveDir(src, dst string) error {
	err := os.Rename(src, dst)
	if !errors.Is(err, syscall.EXDEV) {
		return err
	}
	if err := CopyDir(src, dst, false); err != nil {
		return err
	}
	return os.RemoveAll(src)
}

// writeFileSync writes b to p through a temporary file beside it, synced
// and renamed: p appears whole or not at all.
func writeFileSync(p string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
