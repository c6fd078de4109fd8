package critest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// suiteReport is the part of a ginkgo JSON report (a list of suites) the
// run reads.
type suiteReport struct {
	SpecReports []specReport
}

// specReport is one node's outcome: an It (a spec), or a suite-level node
// such as BeforeSuite.
type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string // passed, skipped, pending, failed, panicked, ...
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

// name is the spec's full text, as ginkgo's focus and skip match it.
func (s specReport) name() string {
	return strings.TrimSpace(strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " "))
}

func readReport(path string) ([]specReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var suites []suiteReport
	if err := json.Unmarshal(b, &suites); err != nil {
		return nil, fmt.Errorf("parse report %s: %w", path, err)
	}
	var specs []specReport
	for _, s := range suites {
		specs = append(specs, s.SpecReports...)
	}
	return specs, nil
}

// summary counts a run's specs and says what failed it.
type summary struct {
	specs    int // the Its: passed + failed ones + listed + filtered
	passed   int
	listed   int      // skipped by the skip list
	filtered int      // not selected (benchmarks, the other run's focus)
	failed   []string // a line for each spec or suite node that failed it
}

// summarize sorts every spec: passed, skipped by the skip list, not
// selected, or failed. A spec that skipped itself at run time (its
// Failure carries the Skip message) fails the run unless listed: the
// suite must not shrink unseen.
func summarize(specs []specReport, listed func(name string) bool) summary {
	var s summary
	for _, sp := range specs {
		if sp.LeafNodeType != "It" {
			if sp.State != "passed" && sp.State != "skipped" {
				s.failed = append(s.failed, fmt.Sprintf("%s %s: %s", sp.LeafNodeType, sp.State, sp.Failure.Message))
			}
			continue
		}
		s.specs++
		switch {
		case sp.State == "passed":
			s.passed++
		case (sp.State == "skipped" || sp.State == "pending") && listed(sp.name()):
			s.listed++
		case sp.State == "skipped" && sp.Failure.Message == "":
			s.filtered++
		case sp.State == "skipped":
			s.failed = append(s.failed, fmt.Sprintf("spec %q skipped itself (not in the skip list): %s",
				sp.name(), sp.Failure.Message))
		default:
			s.failed = append(s.failed, fmt.Sprintf("spec %q %s at %s:%d: %s", sp.name(), sp.State,
				sp.Failure.Location.FileName, sp.Failure.Location.LineNumber, sp.Failure.Message))
		}
	}
	return s
}

// TestSummarize reads a report as ginkgo writes it and sorts its specs: a
// spec that skipped itself fails the run unless listed; a suite node
// that failed fails it too.
func TestSummarize(t *testing.T) {
	report := `[{"SpecReports": [
 {"ContainerHierarchyTexts": ["[k8s.io] A"], "LeafNodeType": "It", "LeafNodeText": "passes", "State": "passed"},
 {"ContainerHierarchyTexts": ["[k8s.io] A"], "LeafNodeType": "It", "LeafNodeText": "is listed", "State": "skipped"},
 {"ContainerHierarchyTexts": ["[k8s.io] A"], "LeafNodeType": "It", "LeafNodeText": "is a benchmark", "State": "skipped"},
 {"ContainerHierarchyTexts": ["[k8s.io] A"], "LeafNodeType": "It", "LeafNodeText": "skips itself", "State": "skipped",
  "Failure": {"Message": "no AppArmor"}},
 {"ContainerHierarchyTexts": ["[k8s.io] A"], "LeafNodeType": "It", "LeafNodeText": "fails", "State": "failed",
  "Failure": {"Message": "boom", "Location": {"FileName": "x.go", "LineNumber": 7}}},
 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "panicked", "Failure": {"Message": "no socket"}}
]}]`
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, []byte(report), 0o600); err != nil {
		t.Fatal(err)
	}
	specs, err := readReport(path)
	if err != nil {
		t.Fatal(err)
	}
	got := summarize(specs, func(name string) bool { return name == "[k8s.io] A is listed" })
	want := summary{specs: 5, passed: 1, listed: 1, filtered: 1, failed: []string{
		`spec "[k8s.io] A skips itself" skipped itself (not in the skip list): no AppArmor`,
		`spec "[k8s.io] A fails" failed at x.go:7: boom`,
		"SynchronizedBeforeSuite panicked: no socket",
	}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(summary{})); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}
