package image

import (
	"fmt"
	"sync/atomic"

	"github.com/containerd/errdefs"
)

// unpackBudget caps the bytes the layers of one pull may expand to
// (Config.MaxUnpackedBytes): the content of their files and 512 bytes for
// every entry. Its layers are unpacked in parallel, so it is
// safe for concurrent use. A nil budget has no cap.
type unpackBudget struct {
	max  int64
	used atomic.Int64
}

// newUnpackBudget returns a budget of max bytes, or nil when max is 0.
func newUnpackBudget(max int64) *unpackBudget {
	if max <= 0 {
		return nil
	}
	return &unpackBudget{max: max}
}

// take accounts for n more bytes; going over the cap is
// errdefs.ErrResourceExhausted naming it.
func (b *unpackBudget) take(n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if used := b.used.Add(n); used > b.max || used < 0 {
		return fmt.Errorf("image expands to more than the %d-byte cap (image.max_unpacked_bytes): %w", b.max, errdefs.ErrResourceExhausted)
	}
	return nil
}
