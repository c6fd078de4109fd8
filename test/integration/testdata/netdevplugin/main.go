// Command netdevplugin is a pre-installed NRI test plugin in the pattern
// of the network-device-injector sample: on RunPodSandbox it moves a host
// network device into the pod's network namespace, on StopPodSandbox it
// moves it back to the host's. Its configuration (the Configure payload)
// is key=value lines:
//
//	dev=NAME   the host device to move
//	log=PATH   append one line per step ("in <pod>", "out <pod>", or
//	           "error <step>: <message>")
//
// It uses ip(8) and nsenter(1), and is built only on containerd/nri
// v0.12.5 pkg/stub and pkg/api.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type plugin struct {
	mu  sync.Mutex
	dev string
	log string
}

func (p *plugin) record(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, format+"\n", args...)
}

func (p *plugin) Configure(_ context.Context, config, _, _ string) (stub.EventMask, error) {
	for _, line := range strings.Split(config, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "dev":
			p.dev = v
		case "log":
			p.log = v
		}
	}
	if p.dev == "" || p.log == "" {
		return 0, fmt.Errorf("netdevplugin: config needs dev= and log=")
	}
	return api.MustParseEventMask("RunPodSandbox,StopPodSandbox"), nil
}

// netns is the pod's network namespace path.
func netns(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}

func (p *plugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	path := netns(pod)
	if path == "" {
		p.record("error in: pod %s has no network namespace path", pod.GetName())
		return nil
	}
	if out, err := exec.Command("ip", "link", "set", "dev", p.dev, "netns", path).CombinedOutput(); err != nil {
		p.record("error in: %v: %s", err, strings.TrimSpace(string(out)))
		return fmt.Errorf("move %s into %s: %v: %s", p.dev, path, err, out)
	}
	p.record("in %s", pod.GetName())
	return nil
}

func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	path := netns(pod)
	// Into the namespace of the host's init process, from the pod's.
	out, err := exec.Command("nsenter", "--net="+path, "ip", "link", "set", "dev", p.dev, "netns", "1").CombinedOutput()
	if err != nil {
		p.record("error out: %v: %s", err, strings.TrimSpace(string(out)))
		return fmt.Errorf("move %s out of %s: %v: %s", p.dev, path, err, out)
	}
	p.record("out %s", pod.GetName())
	return nil
}

func main() {
	s, err := stub.New(&plugin{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "netdevplugin: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "netdevplugin: %v\n", err)
		os.Exit(1)
	}
}
