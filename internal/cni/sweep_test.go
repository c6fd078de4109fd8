package cni

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSweepHostLocal(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"10.0.0.2":           "live\r\neth0",
		"10.0.0.3":           "gone\r\neth0",
		"10.0.0.4":           "gone2\neth0",
		"last_reserved_ip.0": "10.0.0.4",
		"lock":               "",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := sweepHostLocal(dir, func(id string) bool { return id == "live" })
	if err != nil || n != 2 {
		t.Fatalf("sweepHostLocal = %d, %v; want 2 released", n, err)
	}
	for name := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		gone := name == "10.0.0.3" || name == "10.0.0.4"
		if gone != os.IsNotExist(err) {
			t.Errorf("%s: stat %v, want removed=%v", name, err, gone)
		}
	}
	if n, err := sweepHostLocal(filepath.Join(dir, "missing"), func(string) bool { return false }); n != 0 || err != nil {
		t.Errorf("missing dir: %d, %v", n, err)
	}
}
