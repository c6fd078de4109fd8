package main

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var updateDeps = flag.Bool("update-deps", false, "rewrite testdata/deps.txt from the build")

// depsFile lists every package crind links, as "make build" builds it.
const depsFile = "testdata/deps.txt"

// TestDependencies keeps crind's dependency diet: the packages it links
// (go list -deps with the Makefile's tags and CGO_ENABLED=0) must be the
// ones depsFile lists. A package gained costs mapped binary, and so RSS on
// every node (docs/memory.md); a package lost is good news. Either way the
// list is rewritten on purpose, with the reason in the commit:
//
//	go test ./cmd/crind -run TestDependencies -update-deps
func TestDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	got := strings.Fields(string(out))
	if *updateDeps {
		if err := os.WriteFile(depsFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(depsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(string(b))
	for _, p := range got {
		if !slices.Contains(want, p) {
			t.Errorf("crind now links %s, which %s does not list: drop it, or add it with -update-deps and say why in the commit", p, depsFile)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("crind no longer links %s: rewrite %s with -update-deps", p, depsFile)
		}
	}
	for _, banned := range []string{"text/template", "golang.org/x/net/trace"} {
		if slices.Contains(got, banned) {
			t.Errorf("crind links %s, which the shipped build keeps out (docs/memory.md)", banned)
		}
	}
}
