package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/cni"
)

// fakeCNI gives each pod an address, like a CNI chain whose ADD cleans up
// after itself when it fails (cni.Manager.Setup does), and fails Setup on
// demand.
type fakeCNI struct {
	mu       sync.Mutex
	setupErr error
	// nets is pod id -> address, for the pods with a network now.
	nets map[string]string
	n    int
}

func newFakeCNI() *fakeCNI { return &fakeCNI{nets: map[string]string{}} }

func (f *fakeCNI) Status() error           { return nil }
func (f *fakeCNI) SetPodCIDR(string) error { return nil }

func (f *fakeCNI) Setup(_ context.Context, pod cni.Pod) (*cni.Result, error) {
	// The real plugins enter the namespace: it must be there first.
	if _, err := os.Stat(pod.NetNS); err != nil {
		return nil, fmt.Errorf("cni add: netns: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setupErr != nil {
		return nil, fmt.Errorf("cni add pod %s: %w", pod.ID, f.setupErr)
	}
	f.n++
	ip := fmt.Sprintf("10.88.0.%d", f.n)
	f.nets[pod.ID] = ip
	return &cni.Result{IPs: []string{ip}}, nil
}

func (f *fakeCNI) Teardown(_ context.Context, pod cni.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.nets, pod.ID)
	return nil
}

// ip is the address pod id was given; "" when it has no network.
func (f *fakeCNI) ip(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nets[id]
}

// networks lists the pods that have a network.
func (f *fakeCNI) networks() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.nets {
		ids = append(ids, short(id))
	}
	sort.Strings(ids)
	return ids
}

// flakyPinner is fakePinner whose NewNetNS fails on demand.
type flakyPinner struct {
	fakePinner
	mu       sync.Mutex
	netnsErr error
}

func (p *flakyPinner) NewNetNS(dir, name string) (string, error) {
	p.mu.Lock()
	err := p.netnsErr
	p.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("new netns %s: %w", name, err)
	}
	return p.fakePinner.NewNetNS(dir, name)
}

// podNetConfig is podConfig on the pod network rather than the node's.
func podNetConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_POD
	return cfg
}

// TestRunPodSandboxNetworkRollsBack fails RunPodSandbox of a pod on the
// pod network at the network steps and at the step after them, and checks
// that the error reaches the client with its class, that nothing of the
// pod is left (record, name, netns pin, pod dir, CNI network), and that
// the same request then succeeds and its pod can be removed leaving
// nothing either.
func TestRunPodSandboxNetworkRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *hub, net *fakeCNI, pin *flakyPinner, err error)
	}{
		{
			name: "netns pin",
			set: func(_ *hub, _ *fakeCNI, pin *flakyPinner, err error) {
				pin.mu.Lock()
				pin.netnsErr = err
				pin.mu.Unlock()
			},
		},
		{
			name: "CNI setup",
			set: func(_ *hub, net *fakeCNI, _ *flakyPinner, err error) {
				net.mu.Lock()
				net.setupErr = err
				net.mu.Unlock()
			},
		},
		{
			name: "infra create after the network is up",
			set: func(h *hub, _ *fakeCNI, _ *flakyPinner, err error) {
				h.rt.mu.Lock()
				h.rt.createErr = err
				h.rt.mu.Unlock()
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			h := newHub(t)
			net, pin := newFakeCNI(), &flakyPinner{}
			h.opts.Network, h.opts.Pinner = net, pin
			h.start(t, true)

			tc.set(h, net, pin, errInjected)
			_, err := h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podNetConfig("web")})
			if !errors.Is(err, errInjected) || classify(err) != codes.Unavailable {
				t.Fatalf("RunPodSandbox: %v (%v); want the injected error, Unavailable", err, classify(err))
			}
			if left := h.leftovers(t); len(left) > 0 {
				t.Errorf("left after the failed RunPodSandbox: %q", left)
			}
			if nets := net.networks(); len(nets) > 0 {
				t.Errorf("CNI networks left after the failed RunPodSandbox: %q", nets)
			}
			if l, _ := h.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); len(l.GetItems()) > 0 {
				t.Errorf("ListPodSandbox shows %d pods", len(l.GetItems()))
			}

			tc.set(h, net, pin, nil)
			resp, err := h.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podNetConfig("web")})
			if err != nil {
				t.Fatalf("RunPodSandbox retried: %v", err)
			}
			id := resp.PodSandboxId
			if left := h.leftovers(t, id); len(left) > 0 {
				t.Errorf("left beside the retried pod: %q", left)
			}
			st, err := h.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := st.GetStatus().GetNetwork().GetIp(), net.ip(id); got == "" || got != want {
				t.Errorf("retried pod's IP = %q, want %q from CNI", got, want)
			}

			if _, err := h.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				t.Fatal(err)
			}
			if left := h.leftovers(t); len(left) > 0 {
				t.Errorf("left after RemovePodSandbox: %q", left)
			}
			if nets := net.networks(); len(nets) > 0 {
				t.Errorf("CNI networks left after RemovePodSandbox: %q", nets)
			}
		})
	}
}
