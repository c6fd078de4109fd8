//go:build e2e

package e2e

import "testing"

// TestKubeletCRIStats runs the stats scenarios with kubelet's
// PodAndContainerStatsFromCRI gate: kubelet then takes every figure of
// /stats/summary (pod network included, which cAdvisor cannot find for a
// runtime it does not know) from crind's ListPodSandboxStats and
// ListContainerStats, and its /metrics/cadvisor from ListPodSandboxMetrics
// (checked against what a pod did in CadvisorMetrics).
func TestKubeletCRIStats(t *testing.T) {
	n := startNodeWith(t, nodeOptions{featureGates: map[string]bool{"PodAndContainerStatsFromCRI": true}})
	t.Run("StatsRootfs", func(t *testing.T) { testStatsRootfs(t, n) })
	t.Run("StatsFields", func(t *testing.T) { testStatsFields(t, n) })
	t.Run("CadvisorMetrics", func(t *testing.T) { testCadvisorMetrics(t, n) })
}
