package cri

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoSpokeImportsTheHub keeps the house's one rule of direction
// (STYLE.md, "Layout"): internal/cri orchestrates the other packages, and
// none of them imports it back; only cmd/ wires it. A spoke that needs
// the hub declares an interface where it uses it (podenv.Config.Defer,
// checkpoint.Hub, podstats.Source).
func TestNoSpokeImportsTheHub(t *testing.T) {
	const hub = "github.com/crin-dev/crin/internal/cri"
	out, err := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/crin-dev/crin/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		checked++
		if pkg == hub || strings.HasPrefix(pkg, "github.com/crin-dev/crin/cmd/") {
			continue
		}
		for _, imp := range imports {
			if imp == hub {
				t.Errorf("%s imports the hub, %s: only cmd/ may; declare what it needs as an interface where it is used", pkg, hub)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list named %d packages: %s", checked, out)
	}
}
