package shimv2

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestOOMKilled(t *testing.T) {
	dir := t.TempDir()
	events := func(name string, kills int) string {
		f := filepath.Join(dir, name)
		data := fmt.Sprintf("low 0\nhigh 0\nmax 3\noom %d\noom_kill %d\n", kills, kills)
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	gone := filepath.Join(dir, "scope-gone", "memory.events")
	pod := events("pod", 2)
	slice := events("slice", 5)
	for _, tc := range []struct {
		name string
		m    meta
		code uint32
		want bool
	}{
		{"own counter up", meta{OOMCounter: events("own-up", 1)}, 137, true},
		{"own counter unchanged, SIGKILL", meta{OOMCounter: events("own-same", 1), OOMBase: 1,
			OOMAncestors: []oomCount{{File: pod, Base: 1}}}, 137, false},
		{"scope gone, pod counter up", meta{OOMCounter: gone,
			OOMAncestors: []oomCount{{File: pod, Base: 1}, {File: slice, Base: 5}}}, 137, true},
		{"scope gone, pod counter unchanged", meta{OOMCounter: gone,
			OOMAncestors: []oomCount{{File: pod, Base: 2}, {File: slice, Base: 1}}}, 137, false},
		{"scope and pod gone, nearest left up", meta{OOMCounter: gone,
			OOMAncestors: []oomCount{{File: filepath.Join(dir, "pod-gone"), Base: 0}, {File: slice, Base: 4}}}, 137, true},
		{"scope gone, not SIGKILL", meta{OOMCounter: gone,
			OOMAncestors: []oomCount{{File: pod, Base: 1}}}, 1, false},
		{"no counter", meta{}, 137, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := oomKilled(tc.m, tc.code); got != tc.want {
				t.Errorf("oomKilled = %v, want %v", got, tc.want)
			}
		})
	}
}
