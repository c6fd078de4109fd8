package shimv2

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCappedBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{name: "under", max: 10, writes: []string{"abc", "de"}, want: "abcde"},
		{name: "cut in a write", max: 4, writes: []string{"abc", "def"}, want: "abcd"},
		{name: "full then more", max: 3, writes: []string{"abc", "d", "ef"}, want: "abc"},
		{name: "no cap", max: 0, writes: []string{"abc", "def"}, want: "abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &cappedBuffer{max: tc.max}
			for _, w := range tc.writes {
				// The writer is never told to stop: a process must not
				// stall or fail on its output.
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.buf.String(); got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMetaRoundTripAndBundleFallback(t *testing.T) {
	dir := t.TempDir()
	if _, err := readMeta(dir); !os.IsNotExist(err) {
		t.Fatalf("readMeta of an empty dir: %v, want not-exist", err)
	}
	m := meta{Address: "unix:///run/containerd/s/abc", ShimPid: 42, LogPath: "/var/log/x.log", OOMCounter: "/sys/x", OOMBase: 1}
	if err := writeMeta(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := readMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("meta round trip (-want +got):\n%s", diff)
	}
	// What a shim writes into the bundle at start.
	if err := os.WriteFile(filepath.Join(dir, "address"), []byte("unix:///run/containerd/s/def\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shim.pid"), []byte("77"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b := bundleMeta(dir); b.Address != "unix:///run/containerd/s/def" || b.ShimPid != 77 {
		t.Errorf("bundleMeta = %+v", b)
	}
}
