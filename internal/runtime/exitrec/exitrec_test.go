package exitrec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExitRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read on empty dir = %v, want ErrNotExist", err)
	}
	want := Exit{
		Pid: 42, ExitCode: 137, Signal: 9, OOMKilled: true,
		StartedAt:  time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC),
		FinishedAt: time.Date(2024, 1, 2, 3, 4, 6, 7, time.UTC),
	}
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temp files left behind: %v", ents)
	}
	data, _ := os.ReadFile(filepath.Join(dir, File))
	for _, key := range []string{`"exit_code":137`, `"oom_killed":true`, `"finished_at"`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("exit file %s lacks %s", data, key)
		}
	}
}

func TestReadCorrupt(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, File), []byte("{"), 0o600)
	if _, err := Read(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read on corrupt file = %v, want a decode error", err)
	}
}
