package cri

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/store"
)

func TestStopSignal(t *testing.T) {
	tests := []struct {
		name     string
		sig      runtimeapi.Signal
		wantExit int32
		want     runtimeapi.Signal
	}{
		{"config SIGUSR1", runtimeapi.Signal_SIGNAL_SIGUSR1, 128 + int32(syscall.SIGUSR1), runtimeapi.Signal_SIGNAL_SIGUSR1},
		{"config SIGRTMIN+1", runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1, 128 + 35, runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1},
		{"default", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, 128 + int32(syscall.SIGTERM), runtimeapi.Signal_SIGNAL_SIGTERM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			pod := h.runPod(t, "p")
			cfg := ctrConfig("c")
			cfg.StopSignal = tc.sig
			resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.ContainerId
			h.startCtr(t, id)
			// The signal is the record's: a restart keeps it.
			h.start(t, true)
			st, err := h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetStatus().GetStopSignal(); got != tc.want {
				t.Errorf("status stop_signal = %v, want %v", got, tc.want)
			}
			if _, err := h.StopContainer(t.Context(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 30}); err != nil {
				t.Fatal(err)
			}
			st, err = h.ContainerStatus(t.Context(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.GetStatus().GetExitCode(); got != tc.wantExit {
				t.Errorf("exit code = %d, want %d (the fake exits 128+signal)", got, tc.wantExit)
			}
		})
	}
}

func TestSignalCRIRoundTrip(t *testing.T) {
	for v := range runtimeapi.Signal_name {
		s := runtimeapi.Signal(v)
		if s == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
			continue
		}
		sig, ok := signalFromCRI(s)
		if !ok {
			t.Errorf("signalFromCRI(%v): unknown", s)
			continue
		}
		back := signalToCRI(sig)
		if sig2, _ := signalFromCRI(back); sig2 != sig {
			t.Errorf("%v -> %v -> %v", s, sig, back)
		}
	}
}

const cdiSpec = `cdiVersion: "0.6.0"
kind: vendor.com/dev
devices:
  - name: one
    containerEdits:
      env: ["VENDOR_DEV=one"]
`

func TestCreateContainerCDI(t *testing.T) {
	h := newHub(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vendor.yaml"), []byte(cdiSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	h.Service.opts.CDISpecDirs = []string{dir}
	pod := h.runPod(t, "p")

	cfg := ctrConfig("c")
	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/dev=none"}}
	_, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"vendor.com/dev=none"`) {
		t.Fatalf("CreateContainer with an undefined CDI device: %v, want NotFound naming it", err)
	}
	// Nothing half-made: no record, rootfs or name; a retry works.
	if cs, _ := h.opts.Store.Containers(); len(cs) != 0 {
		t.Errorf("records left: %d", len(cs))
	}
	if res, _ := h.opts.Store.Reservations(store.KindContainer); len(res) != 0 {
		t.Errorf("names left: %v", res)
	}
	h.images.mu.Lock()
	left := len(h.images.rootfs)
	h.images.mu.Unlock()
	if left != 0 {
		t.Errorf("rootfs left: %d", left)
	}

	cfg.CDIDevices = []*runtimeapi.CDIDevice{{Name: "vendor.com/dev=one"}}
	resp, err := h.CreateContainer(t.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg})
	if err != nil {
		t.Fatalf("CreateContainer with a defined CDI device: %v", err)
	}
	raw, err := h.opts.Store.ContainerSpec(resp.ContainerId)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "VENDOR_DEV=one") {
		t.Errorf("the device's edits are not in the spec")
	}
}
