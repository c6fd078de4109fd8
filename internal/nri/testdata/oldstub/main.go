// Command oldstub is an NRI test plugin built against containerd/nri v0.6.1,
// whose stub only knows the StateChange RPC for pod and most container
// events. crin's tests launch it, or run it as an external plugin with
// -socket, -idx, -name and -out, to prove old plugins still work.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	mu  sync.Mutex
	out *os.File
}

func (p *plugin) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out != nil {
		fmt.Fprintf(p.out, format+"\n", args...)
	}
}

func (p *plugin) open(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o600)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.out = f
	p.mu.Unlock()
	return nil
}

// Configure takes "out=PATH" from the plugin configuration.
func (p *plugin) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	for _, line := range strings.Split(config, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "out="); ok {
			if err := p.open(v); err != nil {
				return 0, err
			}
		}
	}
	p.record("Configure %s %s", runtime, version)
	return 0, nil
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	for _, pod := range pods {
		p.record("Synchronize pod %s", pod.GetId())
	}
	for _, c := range ctrs {
		p.record("Synchronize container %s", c.GetId())
	}
	p.record("Synchronized")
	return nil, nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RunPodSandbox %s", pod.GetId())
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("StopPodSandbox %s", pod.GetId())
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RemovePodSandbox %s", pod.GetId())
	return nil
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("CreateContainer %s", c.GetId())
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("OLDSTUB", "1")
	return adj, nil, nil
}

func (p *plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("StartContainer %s", c.GetId())
	return nil
}

func (p *plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("PostStartContainer %s", c.GetId())
	return nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.record("RemoveContainer %s", c.GetId())
	return nil
}

func (p *plugin) Shutdown(context.Context) {
	p.record("Shutdown")
}

func main() {
	socket := flag.String("socket", "", "connect to this NRI socket (external plugin)")
	idx := flag.String("idx", "", "plugin index (external plugin)")
	name := flag.String("name", "", "plugin name (external plugin)")
	out := flag.String("out", "", "record events here (an external plugin gets no configuration)")
	flag.Parse()
	p := &plugin{}
	if *out != "" {
		if err := p.open(*out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	var opts []stub.Option
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket), stub.WithPluginIdx(*idx), stub.WithPluginName(*name))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
