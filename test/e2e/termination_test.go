//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// testTerminationMessageFromLog is kubelet's node conformance spec "should
// report termination message from log output if TerminationMessagePolicy
// FallbackToLogsOnError is set": a container that prints DONE with no
// newline and fails gets the termination message DONE, exactly. Kubelet
// reads it from the CRI log, where it ends every full (F) record with a
// newline; crind must log the unterminated end of the output as a partial
// (P) record (issue 24).
func testTerminationMessageFromLog(t *testing.T, n *node) {
	c := n.ctr("main", "printf DONE; exit 1")
	c["terminationMessagePolicy"] = "FallbackToLogsOnError"
	n.addPod(t, "termmsg", map[string]any{"restartPolicy": "Never", "containers": []any{c}})
	p := n.waitPod(t, "termmsg", 2*time.Minute, "main terminated", func(p *pod) bool {
		c := p.container("main")
		return c != nil && c.State.Terminated != nil
	})
	term := p.container("main").State.Terminated
	if term.ExitCode != 1 || term.Message != "DONE" {
		t.Errorf("terminated: exit %d, message %q; want exit 1, message %q", term.ExitCode, term.Message, "DONE")
	}
}
