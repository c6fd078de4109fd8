// Command plugin is the NRI test plugin crin's tests launch from a plugin
// directory. It is built against containerd/nri v0.12.5 pkg/stub. Its
// behaviour comes from the plugin configuration crin sends in Configure,
// one key=value per line:
//
//	out=PATH          append one line per event to PATH
//	events=LIST       subscribe to these events (api.ParseEventMask syntax)
//	hang=EVENT        never answer EVENT
//	crash=EVENT       exit at once when EVENT arrives
//	oversize=EVENT    send a frame over the mux limit when EVENT arrives
//	env=KEY=VALUE     add KEY=VALUE to created containers
//	delay=DURATION    sleep this long in CreateContainer
//	pid=1             record "pid N" with the process id
//	linger=1          keep running after the connection is gone, also when
//	                  stdout and stderr are broken pipes
//	ignore-term=1     ignore SIGTERM (and linger)
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// linger keeps the process alive after the stub returns.
var linger atomic.Bool

type plugin struct {
	mu       sync.Mutex
	out      *os.File
	hang     string
	crash    string
	oversize string
	env      string
	delay    time.Duration
}

func (p *plugin) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out != nil {
		fmt.Fprintf(p.out, format+"\n", args...)
	}
}

func (p *plugin) on(event string) {
	switch event {
	case p.crash:
		os.Exit(3)
	case p.hang:
		time.Sleep(time.Hour)
	case p.oversize:
		var hdr [8]byte
		binary.BigEndian.PutUint32(hdr[0:4], 1)
		binary.BigEndian.PutUint32(hdr[4:8], 5<<20)
		f := os.NewFile(3, "nri")
		_, _ = f.Write(hdr[:])
		time.Sleep(time.Hour)
	}
}

func (p *plugin) Configure(_ context.Context, config, runtime, version string) (stub.EventMask, error) {
	var mask stub.EventMask
	for _, line := range strings.Split(config, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "out":
			f, err := os.OpenFile(v, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_SYNC, 0o600)
			if err != nil {
				return 0, err
			}
			p.out = f
		case "events":
			m, err := api.ParseEventMask(v)
			if err != nil {
				return 0, err
			}
			mask = m
		case "hang":
			p.hang = v
		case "crash":
			p.crash = v
		case "oversize":
			p.oversize = v
		case "env":
			p.env = v
		case "pid":
			defer p.record("pid %d", os.Getpid())
		case "linger":
			signal.Ignore(syscall.SIGPIPE)
			linger.Store(true)
		case "ignore-term":
			signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE)
			linger.Store(true)
		case "delay":
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, err
			}
			p.delay = d
		}
	}
	if mask == 0 {
		mask = api.ValidEvents
		mask.Clear(api.Event_VALIDATE_CONTAINER_ADJUSTMENT)
	}
	p.record("Configure %s %s", runtime, version)
	return mask, nil
}

func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.on("Synchronize")
	for _, x := range pods {
		p.record("Synchronize pod %s", x.GetId())
	}
	for _, x := range ctrs {
		p.record("Synchronize container %s", x.GetId())
	}
	p.record("Synchronized")
	return nil, nil
}

func (p *plugin) Shutdown(context.Context) { p.record("Shutdown") }

func (p *plugin) pod(ev string, pod *api.PodSandbox) error {
	p.on(ev)
	p.record("%s %s", ev, pod.GetId())
	return nil
}

func (p *plugin) ctr(ev string, c *api.Container) error {
	p.on(ev)
	p.record("%s %s", ev, c.GetId())
	return nil
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.pod("RunPodSandbox", pod)
}

func (p *plugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	return p.pod("UpdatePodSandbox", pod)
}

func (p *plugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.pod("PostUpdatePodSandbox", pod)
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.pod("StopPodSandbox", pod)
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.pod("RemovePodSandbox", pod)
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if err := p.ctr("CreateContainer", c); err != nil {
		return nil, nil, err
	}
	if p.delay > 0 {
		time.Sleep(p.delay)
	}
	adj := &api.ContainerAdjustment{}
	if k, v, ok := strings.Cut(p.env, "="); ok {
		adj.AddEnv(k, v)
	}
	return adj, nil, nil
}

func (p *plugin) PostCreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.ctr("PostCreateContainer", c)
}

func (p *plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.ctr("StartContainer", c)
}

func (p *plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.ctr("PostStartContainer", c)
}

func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	return nil, p.ctr("UpdateContainer", c)
}

func (p *plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.ctr("PostUpdateContainer", c)
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, p.ctr("StopContainer", c)
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	return p.ctr("RemoveContainer", c)
}

func (p *plugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	return p.ctr("ValidateContainerAdjustment", req.GetContainer())
}

func main() {
	socket := flag.String("socket", "", "connect to this NRI socket (external plugin)")
	idx := flag.String("idx", "", "plugin index (external plugin)")
	name := flag.String("name", "", "plugin name (external plugin)")
	flag.Parse()
	var opts []stub.Option
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket), stub.WithPluginIdx(*idx), stub.WithPluginName(*name))
	}
	s, err := stub.New(&plugin{}, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	err = s.Run(context.Background())
	for linger.Load() {
		time.Sleep(time.Hour)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
