// Command nriplugin is the NRI plugin crin's integration tests run, either
// pre-installed (launched by crind from plugin_path as NN-name, configured
// with the content of plugin_config_path/NN-name.conf) or external:
//
//	nriplugin -name NAME -idx NN -socket PATH -config FILE
//
// (the file is read at start; a non-empty Configure payload overrides it).
// It is built only on containerd/nri v0.12.5 pkg/stub and pkg/api, and exits
// when its connection to the runtime closes, or on SIGTERM/SIGINT.
//
// Its JSON configuration (config.go) names an event log and rules: a rule
// matches an event by name and optionally by pod and container metadata
// name, and makes the plugin sleep or wait for a file, fail, reject
// (validation), adjust the container being created, or update other
// containers by name, in its answer or unsolicited from a goroutine.
//
// The event log gets one JSON line per event, written before the rules
// apply so that a test sees a hook in progress:
//
//	{"seq":1,"plugin":"10-name","event":"CreateContainer","pod":"<name>",
//	 "pod_id":"...","container":"<name>","container_id":"...",
//	 "state":"CONTAINER_CREATED","pid":0,"exit_code":0,"reason":"",
//	 "message":"","pod_obj":{...},"container_obj":{...},"resources":{...},
//	 "time":"RFC3339Nano"}
//
// pod_obj and container_obj are protojson; resources is set for
// UpdateContainer and UpdatePodSandbox; ValidateContainerAdjustment lines
// also carry "adjust". Synchronize logs one line per pod and per container;
// Configure, Shutdown, "UpdateContainersResult" (with "failed" ids and
// "error") and "Error" (an answer's update naming an unknown container)
// have lines of their own. The test harness is
// test/integration/nri_harness_test.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
)

func main() {
	name := flag.String("name", "", "plugin name (external plugins)")
	idx := flag.String("idx", "", "plugin index (external plugins)")
	socket := flag.String("socket", "", "NRI socket to connect to (external plugins)")
	cfgFile := flag.String("config", "", "JSON configuration file, overridden by a non-empty Configure payload")
	flag.Parse()

	if err := run(*name, *idx, *socket, *cfgFile); err != nil {
		fmt.Fprintf(os.Stderr, "nriplugin: %v\n", err)
		os.Exit(1)
	}
}

func run(name, idx, socket, cfgFile string) error {
	p := &plugin{id: identity(name, idx), used: make(map[int]bool), ids: make(map[string]string)}
	if cfgFile != "" {
		b, err := os.ReadFile(cfgFile)
		if err != nil {
			return fmt.Errorf("read config: %w", err)
		}
		cfg, err := parseConfig(b)
		if err != nil {
			return fmt.Errorf("config file %s: %w", cfgFile, err)
		}
		p.fileCfg = cfg
	}

	var opts []stub.Option
	if name != "" {
		opts = append(opts, stub.WithPluginName(name))
	}
	if idx != "" {
		opts = append(opts, stub.WithPluginIdx(idx))
	}
	if socket != "" {
		opts = append(opts, stub.WithSocketPath(socket))
	}
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("create stub: %w", err)
	}
	p.stub = s

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = s.Run(ctx)
	p.close()
	if err == nil || errors.Is(err, ttrpc.ErrServerClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// identity is the "NN-name" the plugin logs as: from the flags, else from
// the environment crind sets for pre-installed plugins, else from argv[0].
func identity(name, idx string) string {
	if name == "" {
		name = os.Getenv(api.PluginNameEnvVar)
	}
	if idx == "" {
		idx = os.Getenv(api.PluginIdxEnvVar)
	}
	if name == "" || idx == "" {
		if i, n, err := api.ParsePluginName(filepath.Base(os.Args[0])); err == nil {
			if idx == "" {
				idx = i
			}
			if name == "" {
				name = n
			}
		}
	}
	return idx + "-" + name
}

// close waits (briefly) for unsolicited updates in flight and closes the
// event log.
func (p *plugin) close() {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log != nil {
		_ = p.log.Close()
		p.log = nil
	}
}
