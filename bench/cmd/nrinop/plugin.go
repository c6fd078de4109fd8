package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// Names of the requests counted beside the events of api.Event.
const (
	reqConfigure   = "Configure"
	reqSynchronize = "Synchronize"
	reqShutdown    = "Shutdown"
)

// nop handles every NRI request and event, counts it and answers with
// nothing: no adjustment, no update, no rejection. It measures what the
// runtime spends on delivering an event, not what a plugin does with it.
type nop struct {
	mask   api.EventMask
	counts map[string]*atomic.Int64 // built once, read-only after: safe to share
}

// Compile-time checks: every handler interface of the stub is implemented.
var (
	_ stub.ConfigureInterface                   = (*nop)(nil)
	_ stub.SynchronizeInterface                 = (*nop)(nil)
	_ stub.ShutdownInterface                    = (*nop)(nil)
	_ stub.RunPodInterface                      = (*nop)(nil)
	_ stub.UpdatePodInterface                   = (*nop)(nil)
	_ stub.PostUpdatePodInterface               = (*nop)(nil)
	_ stub.StopPodInterface                     = (*nop)(nil)
	_ stub.RemovePodInterface                   = (*nop)(nil)
	_ stub.CreateContainerInterface             = (*nop)(nil)
	_ stub.PostCreateContainerInterface         = (*nop)(nil)
	_ stub.StartContainerInterface              = (*nop)(nil)
	_ stub.PostStartContainerInterface          = (*nop)(nil)
	_ stub.UpdateContainerInterface             = (*nop)(nil)
	_ stub.PostUpdateContainerInterface         = (*nop)(nil)
	_ stub.StopContainerInterface               = (*nop)(nil)
	_ stub.RemoveContainerInterface             = (*nop)(nil)
	_ stub.ValidateContainerAdjustmentInterface = (*nop)(nil)
)

// defaultEvents is what nrinop subscribes to without -validate: every
// event but ValidateContainerAdjustment.
func defaultEvents() api.EventMask {
	m := api.ValidEvents
	m.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	return m
}

// newNop returns a plugin that subscribes to events in Configure.
func newNop(events api.EventMask) *nop {
	p := &nop{mask: events, counts: map[string]*atomic.Int64{}}
	for _, name := range countNames() {
		p.counts[name] = new(atomic.Int64)
	}
	return p
}

// handshake names the requests that are not events, in the order they are
// written.
func handshake() []string { return []string{reqConfigure, reqSynchronize, reqShutdown} }

// eventNames names the events in protocol order.
func eventNames() []string {
	var names []string
	for e := api.Event_RUN_POD_SANDBOX; e < api.Event_LAST; e++ {
		names = append(names, e.PrettyName())
	}
	return names
}

func countNames() []string { return append(handshake(), eventNames()...) }

func (p *nop) count(name string) { p.counts[name].Add(1) }

func (p *nop) event(e api.Event) { p.count(e.PrettyName()) }

// writeCounts writes one "name count" line per request and event, then
// "events N", the sum of the events (handshake requests left out).
func (p *nop) writeCounts(w io.Writer) error {
	var events int64
	for _, name := range handshake() {
		if _, err := fmt.Fprintf(w, "%s %d\n", name, p.counts[name].Load()); err != nil {
			return err
		}
	}
	for _, name := range eventNames() {
		n := p.counts[name].Load()
		events += n
		if _, err := fmt.Fprintf(w, "%s %d\n", name, n); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "events %d\n", events)
	return err
}

// Configure subscribes to p.mask, whatever the configuration says.
func (p *nop) Configure(context.Context, string, string, string) (api.EventMask, error) {
	p.count(reqConfigure)
	return p.mask, nil
}

func (p *nop) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	p.count(reqSynchronize)
	return nil, nil
}

func (p *nop) Shutdown(context.Context) { p.count(reqShutdown) }

func (p *nop) RunPodSandbox(context.Context, *api.PodSandbox) error {
	p.event(api.Event_RUN_POD_SANDBOX)
	return nil
}

func (p *nop) UpdatePodSandbox(context.Context, *api.PodSandbox, *api.LinuxResources, *api.LinuxResources) error {
	p.event(api.Event_UPDATE_POD_SANDBOX)
	return nil
}

func (p *nop) PostUpdatePodSandbox(context.Context, *api.PodSandbox) error {
	p.event(api.Event_POST_UPDATE_POD_SANDBOX)
	return nil
}

func (p *nop) StopPodSandbox(context.Context, *api.PodSandbox) error {
	p.event(api.Event_STOP_POD_SANDBOX)
	return nil
}

func (p *nop) RemovePodSandbox(context.Context, *api.PodSandbox) error {
	p.event(api.Event_REMOVE_POD_SANDBOX)
	return nil
}

func (p *nop) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.event(api.Event_CREATE_CONTAINER)
	return nil, nil, nil
}

func (p *nop) PostCreateContainer(context.Context, *api.PodSandbox, *api.Container) error {
	p.event(api.Event_POST_CREATE_CONTAINER)
	return nil
}

func (p *nop) StartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	p.event(api.Event_START_CONTAINER)
	return nil
}

func (p *nop) PostStartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	p.event(api.Event_POST_START_CONTAINER)
	return nil
}

func (p *nop) UpdateContainer(context.Context, *api.PodSandbox, *api.Container, *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.event(api.Event_UPDATE_CONTAINER)
	return nil, nil
}

func (p *nop) PostUpdateContainer(context.Context, *api.PodSandbox, *api.Container) error {
	p.event(api.Event_POST_UPDATE_CONTAINER)
	return nil
}

func (p *nop) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	p.event(api.Event_STOP_CONTAINER)
	return nil, nil
}

func (p *nop) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error {
	p.event(api.Event_REMOVE_CONTAINER)
	return nil
}

// ValidateContainerAdjustment accepts every adjustment. It is only called
// when the plugin runs with -validate.
func (p *nop) ValidateContainerAdjustment(context.Context, *api.ValidateContainerAdjustmentRequest) error {
	p.event(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	return nil
}
