package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
)

// blobPath is where the blob with digest d lives. Only sha256 digests are
// stored.
func (s *Service) blobPath(d string) (string, error) {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 || !isHex(hexPart) {
		return "", fmt.Errorf("digest %q: only sha256 digests are supported", d)
	}
	return filepath.Join(s.root, "blobs", "sha256", hexPart), nil
}

// hasBlob reports whether the blob d is stored. Stored blobs were verified
// when written.
func (s *Service) hasBlob(d string) bool {
	p, err := s.blobPath(d)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}

// writeBlob stores the content r yields under digest d, verifying it. The
// blob appears under its name complete or not at all. A read error is
// classified as the registry client's (see classify); content with another
// digest is errdefs.ErrDataLoss.
func (s *Service) writeBlob(d string, r io.Reader) error {
	p, err := s.blobPath(d)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Join(s.root, "blobs", "tmp"), "blob-")
	if err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name()) // fails harmlessly once renamed
	}()
	h := sha256.New()
	src := &sourceReader{r: r}
	if _, err := io.Copy(io.MultiWriter(tmp, h), src); err != nil {
		if src.err != nil {
			return fmt.Errorf("fetch blob %s: %w", d, classify(src.err))
		}
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != d {
		return fmt.Errorf("store blob %s: content has digest %s: %w", d, got, errdefs.ErrDataLoss)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	return syncDir(filepath.Dir(p))
}

// sourceReader remembers the error its reader returned, to tell a failed
// download from a failed write.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
