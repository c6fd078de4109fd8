package shim

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadOOMKills(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          uint64
		wantErr       bool
	}{
		{name: "v1", content: "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", want: 2},
		{name: "v2", content: "low 0\nhigh 0\nmax 5\noom 3\noom_kill 1\noom_group_kill 0\n", want: 1},
		{name: "old kernel", content: "oom_kill_disable 0\nunder_oom 0\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadOOMKills(p)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ReadOOMKills = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
