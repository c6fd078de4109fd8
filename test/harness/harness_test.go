package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what would fail the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckNoLeaks checks that the leak check reports a container state
// dir and a netns left in the state dir, and nothing for an empty one.
func TestCheckNoLeaks(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	clean := &recorder{TB: t}
	CheckNoLeaks(clean, root, state)
	if len(clean.errs) > 0 {
		t.Errorf("an empty state dir: %q", clean.errs)
	}
	for _, p := range []string{"c/ctr1", "netns/pod1"} {
		if err := os.MkdirAll(filepath.Join(state, p), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	leaky := &recorder{TB: t}
	CheckNoLeaks(leaky, root, state)
	got := strings.Join(leaky.errs, "\n")
	for _, want := range []string{"ctr1", "pod1"} {
		if !strings.Contains(got, want) {
			t.Errorf("leaks reported: %q; want one naming %s", leaky.errs, want)
		}
	}
}
