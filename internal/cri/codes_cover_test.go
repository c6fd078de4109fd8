package cri

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// withoutRefusalRow are the CRI RPCs with no row in the refusal tables of
// this package, each with why: they take no input that can be wrong, or
// another test (named) checks how they fail.
var withoutRefusalRow = map[string]string{
	"Version":                 "takes no input and cannot fail",
	"RuntimeConfig":           "takes no input and cannot fail",
	"ListMetricDescriptors":   "takes no input and cannot fail",
	"ListPodSandboxMetrics":   "takes no input; TestPodSandboxMetricsThroughHub",
	"StreamPodSandboxMetrics": "ListPodSandboxMetrics in chunks (TestSendChunked)",
	"Status":                  "TestRuntimeRPCRefusals: a network that fails is a condition, not an error",
	"UpdateRuntimeConfig":     "TestRuntimeRPCRefusals",
	"GetContainerEvents":      "takes no input; TestContainerEventsSlowSubscriberDropped, TestContainerEventsStalledStreamEndsOnClose",
	"StreamPodSandboxes":      "ListPodSandbox in chunks, with its filter (TestSendChunked)",
	"StreamContainers":        "ListContainers in chunks, with its filter (TestSendChunked)",
	"StreamContainerStats":    "ListContainerStats in chunks, with its filter (TestSendChunked)",
	"StreamPodSandboxStats":   "ListPodSandboxStats in chunks, with its filter (TestSendChunked)",
	"StreamImages":            "ListImages in chunks, with its filter (TestSendChunked)",
}

// refusalRow is the first word of a row's name in a refusal table:
// {"CreateContainer no metadata", ...}.
var refusalRow = regexp.MustCompile(`(?m)^\s*\{"([A-Z][A-Za-z]+) `)

// TestEveryRPCHasRefusals walks the CRI's service descriptors: every RPC
// has a row in a refusal table of this package (TestRPCRefusals,
// TestImageRPCRefusals, ...) or is in withoutRefusalRow with the reason.
// A CRI version that adds an RPC fails here until its refusals are
// tested.
func TestEveryRPCHasRefusals(t *testing.T) {
	rows := map[string]bool{}
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range refusalRow.FindAllSubmatch(b, -1) {
			rows[string(m[1])] = true
		}
	}
	names := map[string]bool{}
	for _, d := range []grpc.ServiceDesc{runtimeapi.RuntimeService_ServiceDesc, runtimeapi.ImageService_ServiceDesc} {
		for _, m := range d.Methods {
			names[m.MethodName] = true
		}
		for _, s := range d.Streams {
			names[s.StreamName] = true
		}
	}
	for name := range names {
		why, excused := withoutRefusalRow[name]
		switch {
		case rows[name] && excused:
			t.Errorf("%s has refusal rows and is in withoutRefusalRow too (%q): take it out", name, why)
		case !rows[name] && !excused:
			t.Errorf("CRI RPC %s has no row in a refusal table (TestRPCRefusals, TestImageRPCRefusals) and no reason in withoutRefusalRow", name)
		}
	}
	for name, why := range withoutRefusalRow {
		if !names[name] {
			t.Errorf("withoutRefusalRow names %s, which the CRI no longer has", name)
		}
		for _, test := range regexp.MustCompile(`Test[A-Z][A-Za-z]+`).FindAllString(why, -1) {
			if !declared(t, files, test) {
				t.Errorf("withoutRefusalRow[%s] cites %s, which is no test of this package", name, test)
			}
		}
	}
}

// declared reports whether one of files declares func name.
func declared(t *testing.T, files []string, name string) bool {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nfunc "+name+"(") {
			return true
		}
	}
	return false
}
