//go:build !linux

package oci

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func defaultDevices() []specs.LinuxDevice           { return nil }
func defaultDeviceRules() []specs.LinuxDeviceCgroup { return nil }

func criDevices(in []*runtimeapi.Device) ([]specs.LinuxDevice, []specs.LinuxDeviceCgroup, error) {
	if len(in) > 0 {
		return nil, nil, unsupportedf("devices: only supported on Linux")
	}
	return nil, nil, nil
}

func privilegedDevices() ([]specs.LinuxDevice, error) {
	return nil, unsupportedf("privileged containers: only supported on Linux")
}
