package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"

	"github.com/crin-dev/crin/internal/nri"
)

// wantCounts is the count file after one of each event, Configure,
// Synchronize and Shutdown; validations is what ValidateContainerAdjustment
// should show.
func wantCounts(validations int) string {
	var b strings.Builder
	b.WriteString("Configure 1\nSynchronize 1\nShutdown 1\n")
	events := 0
	for e := api.Event_RUN_POD_SANDBOX; e < api.Event_LAST; e++ {
		n := 1
		if e == api.Event_VALIDATE_CONTAINER_ADJUSTMENT {
			n = validations
		}
		events += n
		fmt.Fprintf(&b, "%s %d\n", e.PrettyName(), n)
	}
	fmt.Fprintf(&b, "events %d\n", events)
	return b.String()
}

func TestConfigureMask(t *testing.T) {
	validate := api.ValidEvents
	for _, tc := range []struct {
		name   string
		events api.EventMask
		want   api.EventMask
	}{
		{"default", defaultEvents(), api.ValidEvents &^ (1 << (api.Event_VALIDATE_CONTAINER_ADJUSTMENT - 1))},
		{"validate", *validate.Set(api.Event_VALIDATE_CONTAINER_ADJUSTMENT), api.ValidEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newNop(tc.events).Configure(context.Background(), "", "crin", "dev")
			if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if got != tc.want {
				t.Errorf("Configure mask = %s (0x%x), want %s (0x%x)", got.PrettyString(), got, tc.want.PrettyString(), tc.want)
			}
			for e := api.Event_RUN_POD_SANDBOX; e < api.Event_VALIDATE_CONTAINER_ADJUSTMENT; e++ {
				if !got.IsSet(e) {
					t.Errorf("Configure mask lacks %s", e.PrettyName())
				}
			}
		})
	}
}

func TestWriteCounts(t *testing.T) {
	p := newNop(defaultEvents())
	ctx := context.Background()
	p.Synchronize(ctx, nil, nil)
	p.RunPodSandbox(ctx, nil)
	p.RunPodSandbox(ctx, nil)
	p.CreateContainer(ctx, nil, nil)
	p.Shutdown(ctx)
	var out bytes.Buffer
	if err := p.writeCounts(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Synchronize 1\n", "Shutdown 1\n", "RunPodSandbox 2\n", "CreateContainer 1\n", "StopContainer 0\n", "events 3\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("counts lack %q:\n%s", want, out.String())
		}
	}
}

// fakeEngine is the runtime side of the adaptation: no pods, no updates.
type fakeEngine struct{}

func (fakeEngine) Snapshot(context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	return nil, nil, nil
}

func (fakeEngine) UpdateContainers(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (fakeEngine) EvictContainer(context.Context, string, string) error { return nil }

// TestLaunchedByCrin builds nrinop, installs it as a pre-installed plugin of
// crin's NRI adaptation through a wrapper script (how bench/nri.sh runs
// it), sends every event once and checks what the plugin counted.
func TestLaunchedByCrin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	dir, err := os.MkdirTemp("", "nrinop")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "nrinop")
	// go test puts its own GOROOT/bin first in the test's PATH, so this
	// is the toolchain running the test.
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name     string
		flags    string
		validate int
	}{
		{"default", "", 0},
		{"validate", "-validate", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := filepath.Join(dir, tc.name)
			plugins := filepath.Join(sub, "plugins")
			if err := os.MkdirAll(plugins, 0o755); err != nil {
				t.Fatal(err)
			}
			counts := filepath.Join(sub, "10-nop.count")
			script := fmt.Sprintf("#!/bin/sh\nexec %s -count %s %s\n", bin, counts, tc.flags)
			if err := os.WriteFile(filepath.Join(plugins, "10-nop"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			a, err := nri.New(nri.Config{
				Enable:             true,
				DisableConnections: true,
				PluginPath:         plugins,
				SocketPath:         filepath.Join(sub, "nri.sock"),
			}, fakeEngine{}, nri.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := a.Start(ctx); err != nil {
				t.Fatalf("start adaptation: %v", err)
			}
			stopped := false
			defer func() {
				if !stopped {
					_ = a.Stop(ctx)
				}
			}()
			if ps := a.Plugins(); len(ps) != 1 || ps[0].State != nri.StateReady {
				t.Fatalf("plugins after start = %+v, want 10-nop ready; log:\n%s", ps, logs.String())
			}

			sendEveryEvent(ctx, t, a)
			if err := a.Stop(ctx); err != nil {
				t.Fatalf("stop adaptation: %v", err)
			}
			stopped = true
			got, err := os.ReadFile(counts)
			if err != nil {
				t.Fatalf("count file: %v; log:\n%s", err, logs.String())
			}
			if diff := cmp.Diff(wantCounts(tc.validate), string(got)); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
		})
	}
}

func sendEveryEvent(ctx context.Context, t *testing.T, a *nri.Adaptation) {
	t.Helper()
	pod := &api.PodSandbox{Id: "pod1", Name: "pod1", Uid: "uid1", Namespace: "default"}
	ctr := &api.Container{Id: "ctr1", PodSandboxId: "pod1", Name: "ctr1", State: api.ContainerState_CONTAINER_CREATED}
	res := &api.LinuxResources{}
	check := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	check("RunPodSandbox", a.RunPodSandbox(ctx, pod))
	check("UpdatePodSandbox", a.UpdatePodSandbox(ctx, pod, res, res))
	check("PostUpdatePodSandbox", a.PostUpdatePodSandbox(ctx, pod))
	_, err := a.CreateContainer(ctx, pod, ctr)
	check("CreateContainer", err)
	check("PostCreateContainer", a.PostCreateContainer(ctx, pod, ctr))
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	check("StartContainer", a.StartContainer(ctx, pod, ctr))
	check("PostStartContainer", a.PostStartContainer(ctx, pod, ctr))
	_, err = a.UpdateContainer(ctx, pod, ctr, res)
	check("UpdateContainer", err)
	check("PostUpdateContainer", a.PostUpdateContainer(ctx, pod, ctr))
	ctr.State = api.ContainerState_CONTAINER_STOPPED
	_, err = a.StopContainer(ctx, pod, ctr)
	check("StopContainer", err)
	check("RemoveContainer", a.RemoveContainer(ctx, pod, ctr))
	check("StopPodSandbox", a.StopPodSandbox(ctx, pod))
	check("RemovePodSandbox", a.RemovePodSandbox(ctx, pod))
}
