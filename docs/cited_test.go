// Package docs holds no code: its test checks that what the docs cite
// (files of this repository, tests) exists, so a rename or a removal that
// forgets a doc fails CI.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// roots are the top-level dirs of this repository; a cited path that
// starts with one is one of ours (paths of other projects are cited too).
var roots = []string{"internal/", "cmd/", "test/", "bench/", "scripts/", "docs/", "contrib/", ".ci/"}

var (
	// A path or a test name in backquotes: `internal/cri/x.go`,
	// `TestX`; a path may carry a ":line" or " (...)" after it.
	quoted   = regexp.MustCompile("`([^`\n]+)`")
	pathLike = regexp.MustCompile(`^\.?[A-Za-z0-9_./*-]+$`)
	testName = regexp.MustCompile(`\b(Test[A-Z][A-Za-z0-9_]*|Benchmark[A-Z][A-Za-z0-9_]*|Fuzz[A-Z][A-Za-z0-9_]*)\b`)
	funcDecl = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
)

// TestCitedFilesExist: every path of this repository that a doc (docs)
// names in backquotes exists (a glob matches something).
func TestCitedFilesExist(t *testing.T) {
	for _, doc := range docs(t) {
		for _, ref := range citedPaths(t, doc) {
			if _, err := os.Stat(filepath.Join("..", ref)); err == nil {
				continue
			}
			if m, _ := filepath.Glob(filepath.Join("..", ref)); len(m) > 0 {
				continue
			}
			t.Errorf("%s cites %s, which does not exist", doc, ref)
		}
	}
}

// TestCitedTestsExist: every test, benchmark and fuzz target a doc (docs)
// names is a function of some _test.go file in this repository.
func TestCitedTestsExist(t *testing.T) {
	have := map[string]bool{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range funcDecl.FindAllSubmatch(b, -1) {
			have[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, q := range quoted.FindAllSubmatch(b, -1) {
			for _, name := range testName.FindAllString(string(q[1]), -1) {
				// TestX/subtest names its parent; a trailing _ or * is a
				// family (TestFoo*).
				name = strings.TrimRight(name, "_")
				if seen[name] || have[name] || strings.HasSuffix(string(q[1]), name+"*") {
					continue
				}
				seen[name] = true
				t.Errorf("%s names %s, which is no test, benchmark or fuzz target here", doc, name)
			}
		}
	}
}

// docs are README.md, STYLE.md, bench/README.md, the dated runs in
// bench/results and the Markdown files of docs/, relative to here.
func docs(t *testing.T) []string {
	t.Helper()
	out := []string{filepath.Join("..", "README.md"), filepath.Join("..", "STYLE.md"), filepath.Join("..", "bench", "README.md")}
	results, err := filepath.Glob(filepath.Join("..", "bench", "results", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, results...)
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".md") {
			out = append(out, e.Name())
		}
	}
	return out
}

// citedPaths are the paths of this repository doc names in backquotes.
func citedPaths(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range quoted.FindAllSubmatch(b, -1) {
		ref := string(q[1])
		if i := strings.IndexAny(ref, ": "); i > 0 {
			ref = ref[:i] // a line number or what follows the path
		}
		if !pathLike.MatchString(ref) || !ours(ref) || strings.Contains(ref, "...") {
			continue
		}
		// test/harness.Build names a symbol of a package dir.
		if i := strings.LastIndex(ref, "."); i > strings.LastIndex(ref, "/") && i+1 < len(ref) && ref[i+1] >= 'A' && ref[i+1] <= 'Z' {
			ref = ref[:i]
		}
		out = append(out, strings.TrimSuffix(ref, "/"))
	}
	return out
}

func ours(ref string) bool {
	for _, r := range roots {
		if strings.HasPrefix(ref, r) {
			return true
		}
	}
	return ref == "Makefile" || ref == "README.md" || ref == "go.mod"
}
