package main

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// Every handler logs first, then applies its rules, so a test sees that a
// hook is running while it sleeps.

func (p *plugin) Configure(_ context.Context, payload, runtime, version string) (stub.EventMask, error) {
	cfg := p.fileCfg
	if payload != "" {
		c, err := parseConfig([]byte(payload))
		if err != nil {
			return 0, err
		}
		cfg = c
	}
	if cfg == nil {
		cfg, _ = parseConfig([]byte("{}"))
	}
	if err := p.configure(cfg); err != nil {
		return 0, err
	}
	p.record(&line{Event: "Configure", Message: runtime + " " + version})
	if _, err := p.apply("Configure", nil, nil); err != nil {
		return 0, err
	}
	return cfg.mask, nil
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var podNames, ctrNames []string
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
		podNames = append(podNames, pod.GetName())
		p.record(eventLine("Synchronize", pod, nil, nil))
	}
	for _, c := range ctrs {
		p.see("Synchronize", c)
		ctrNames = append(ctrNames, c.GetName())
		p.record(eventLine("Synchronize", byID[c.GetPodSandboxId()], c, nil))
	}
	_, err := p.apply("Synchronize", podNames, ctrNames)
	return nil, err
}

func (p *plugin) Shutdown(context.Context) {
	p.record(&line{Event: "Shutdown"})
}

// podEvent handles an event about a pod.
func (p *plugin) podEvent(event string, pod *api.PodSandbox, res *api.LinuxResources) error {
	p.record(eventLine(event, pod, nil, res))
	_, err := p.apply(event, []string{pod.GetName()}, nil)
	return err
}

// ctrEvent handles an event about a container.
func (p *plugin) ctrEvent(event string, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*answer, error) {
	p.see(event, ctr)
	p.record(eventLine(event, pod, ctr, res))
	return p.apply(event, []string{pod.GetName()}, []string{ctr.GetName()})
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("RunPodSandbox", pod, nil)
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, res *api.LinuxResources) error {
	return p.podEvent("UpdatePodSandbox", pod, res)
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("PostUpdatePodSandbox", pod, nil)
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("StopPodSandbox", pod, nil)
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.podEvent("RemovePodSandbox", pod, nil)
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	a, err := p.ctrEvent("CreateContainer", pod, ctr, nil)
	if err != nil {
		return nil, nil, err
	}
	return a.adjust, a.updates, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	_, err := p.ctrEvent("PostCreateContainer", pod, ctr, nil)
	return err
}

func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	_, err := p.ctrEvent("StartContainer", pod, ctr, nil)
	return err
}

func (p *plugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	_, err := p.ctrEvent("PostStartContainer", pod, ctr, nil)
	return err
}

func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	a, err := p.ctrEvent("UpdateContainer", pod, ctr, res)
	if err != nil {
		return nil, err
	}
	return a.updates, nil
}

func (p *plugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	_, err := p.ctrEvent("PostUpdateContainer", pod, ctr, nil)
	return err
}

func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	a, err := p.ctrEvent("StopContainer", pod, ctr, nil)
	if err != nil {
		return nil, err
	}
	return a.updates, nil
}

func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	_, err := p.ctrEvent("RemoveContainer", pod, ctr, nil)
	return err
}

// ValidateContainerAdjustment rejects (through the stub, which turns an
// error into a rejection) when a rule says reject or fail.
func (p *plugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	const event = "ValidateContainerAdjustment"
	l := eventLine(event, req.GetPod(), req.GetContainer(), nil)
	l.Adjust = protoRaw(req.GetAdjust())
	p.record(l)
	_, err := p.apply(event, []string{req.GetPod().GetName()}, []string{req.GetContainer().GetName()})
	return err
}

// Every event handler of the stub is implemented, so that any mask a
// configuration asks for is allowed.
var (
	_ stub.ConfigureInterface                   = (*plugin)(nil)
	_ stub.SynchronizeInterface                 = (*plugin)(nil)
	_ stub.ShutdownInterface                    = (*plugin)(nil)
	_ stub.RunPodInterface                      = (*plugin)(nil)
	_ stub.UpdatePodInterface                   = (*plugin)(nil)
	_ stub.PostUpdatePodInterface               = (*plugin)(nil)
	_ stub.StopPodInterface                     = (*plugin)(nil)
	_ stub.RemovePodInterface                   = (*plugin)(nil)
	_ stub.CreateContainerInterface             = (*plugin)(nil)
	_ stub.PostCreateContainerInterface         = (*plugin)(nil)
	_ stub.StartContainerInterface              = (*plugin)(nil)
	_ stub.PostStartContainerInterface          = (*plugin)(nil)
	_ stub.UpdateContainerInterface             = (*plugin)(nil)
	_ stub.PostUpdateContainerInterface         = (*plugin)(nil)
	_ stub.StopContainerInterface               = (*plugin)(nil)
	_ stub.RemoveContainerInterface             = (*plugin)(nil)
	_ stub.ValidateContainerAdjustmentInterface = (*plugin)(nil)
)
