//go:build e2e

package e2e

import "net"

// The parts of kubelet's /stats/summary the tests read.
type statsSummary struct {
	Pods []podStats `json:"pods"`
}

type podStats struct {
	PodRef struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		UID       string `json:"uid"`
	} `json:"podRef"`
	Containers       []containerStats `json:"containers"`
	CPU              cpuStats         `json:"cpu"`
	Memory           memoryStats      `json:"memory"`
	Network          *networkStats    `json:"network,omitempty"`
	EphemeralStorage *fsStats         `json:"ephemeral-storage,omitempty"`
}

type containerStats struct {
	Name   string      `json:"name"`
	CPU    cpuStats    `json:"cpu"`
	Memory memoryStats `json:"memory"`
	Rootfs *fsStats    `json:"rootfs,omitempty"`
	Logs   *fsStats    `json:"logs,omitempty"`
}

type cpuStats struct {
	UsageNanoCores       *uint64 `json:"usageNanoCores,omitempty"`
	UsageCoreNanoSeconds *uint64 `json:"usageCoreNanoSeconds,omitempty"`
}

type memoryStats struct {
	UsageBytes      *uint64 `json:"usageBytes,omitempty"`
	WorkingSetBytes *uint64 `json:"workingSetBytes,omitempty"`
}

type networkStats struct {
	RxBytes *uint64 `json:"rxBytes,omitempty"`
	TxBytes *uint64 `json:"txBytes,omitempty"`
}

type fsStats struct {
	UsedBytes  *uint64 `json:"usedBytes,omitempty"`
	InodesUsed *uint64 `json:"inodesUsed,omitempty"`
}

func (s *statsSummary) pod(name string) *podStats {
	for i := range s.Pods {
		if s.Pods[i].PodRef.Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

func parseIP(s string) net.IP { return net.ParseIP(s) }
