package image

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRootfsOwners: the containers holding something in the store are
// those with a lease, an image volume or a dir under containers/, each
// once; the store's own dot names are not containers.
func TestRootfsOwners(t *testing.T) {
	s := newService(t, Config{})
	s.mu.Lock()
	s.leases["leased"] = &leaseRecord{ImageID: "sha256:x"}
	s.leases["both"] = &leaseRecord{ImageID: "sha256:x"}
	s.volumes[volumeKey("withvolume", "data")] = &volumeRecord{ImageID: "sha256:y"}
	s.mu.Unlock()
	for _, d := range []string{"both", "dironly", ".del-old"} {
		if err := os.MkdirAll(filepath.Join(s.root, "containers", d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RootfsOwners()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"both", "dironly", "leased", "withvolume"}, got); diff != "" {
		t.Errorf("RootfsOwners (-want +got):\n%s", diff)
	}
}
