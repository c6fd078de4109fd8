package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
)

func evictions(ids ...string) []*api.ContainerEviction {
	var evs []*api.ContainerEviction
	for _, id := range ids {
		evs = append(evs, &api.ContainerEviction{ContainerId: id, Reason: "make room for " + id})
	}
	return evs
}

// failedError carries the ids of an UpdateContainersResponse's Failed list
// out of a test case's ask.
type failedError struct{ ids []string }

func (e *failedError) Error() string { return "failed: " + strings.Join(e.ids, ",") }

func failedIDs(us []*api.ContainerUpdate) error {
	fe := &failedError{}
	for _, u := range us {
		fe.ids = append(fe.ids, u.GetContainerId())
	}
	return fe
}

func TestPluginEvictions(t *testing.T) {
	tests := []struct {
		name     string
		evictErr map[string]error
		// ask makes the plugin ask for the evictions of victim and bystander;
		// it returns the error the asking side got.
		ask         func(ctx context.Context, e *env, p *rawPlugin) error
		wantEvicted []string
		wantErr     string   // in the error ask returns
		wantFailed  []string // ids in UpdateContainersResponse.Failed
		wantLog     string   // a warning naming the failed eviction
	}{
		{
			name: "from CreateContainer answer",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				_, _, err := createIn(ctx, e.a, testPod("pod1"), testCtr("pod1", "ctr1"))
				return err
			},
			wantEvicted: []string{"victim: make room for victim", "bystander: make room for bystander"},
		},
		{
			name: "from UpdateContainer answer",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				_, err := e.a.UpdateContainer(ctx, testPod("pod1"), testCtr("pod1", "ctr1"), &api.LinuxResources{})
				return err
			},
			wantEvicted: []string{"victim: make room for victim", "bystander: make room for bystander"},
		},
		{
			name: "from CreateContainer answer, engine fails",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				_, _, err := createIn(ctx, e.a, testPod("pod1"), testCtr("pod1", "ctr1"))
				return err
			},
			evictErr:    map[string]error{"victim": errors.New("victim is protected")},
			wantEvicted: []string{"bystander: make room for bystander"},
			wantLog:     "victim is protected",
		},
		{
			name: "from UpdateContainers request",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				_, err := p.runtime.UpdateContainers(ctx, &api.UpdateContainersRequest{Evict: evictions("victim", "bystander")})
				return err
			},
			wantEvicted: []string{"victim: make room for victim", "bystander: make room for bystander"},
		},
		{
			name: "from UpdateContainers request, engine fails",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				rsp, err := p.runtime.UpdateContainers(ctx, &api.UpdateContainersRequest{Evict: evictions("victim", "bystander")})
				if err != nil {
					return err
				}
				return failedIDs(rsp.GetFailed())
			},
			evictErr:    map[string]error{"victim": errors.New("victim is protected")},
			wantEvicted: []string{"bystander: make room for bystander"},
			wantFailed:  []string{"victim"},
			wantLog:     "victim is protected",
		},
		{
			name: "from UpdateContainers request, unknown container",
			ask: func(ctx context.Context, e *env, p *rawPlugin) error {
				rsp, err := p.runtime.UpdateContainers(ctx, &api.UpdateContainersRequest{Evict: evictions("ghost", "victim", "bystander")})
				if err != nil {
					return err
				}
				return failedIDs(rsp.GetFailed())
			},
			evictErr:    map[string]error{"ghost": fmt.Errorf("evict container %q: %w", "ghost", errdefs.ErrNotFound)},
			wantEvicted: []string{"victim: make room for victim", "bystander: make room for bystander"},
			wantFailed:  []string{"ghost"},
			wantLog:     "not found",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.eng.evictErr = tc.evictErr
			e.start()
			p := &rawPlugin{
				onCreate: func(*api.CreateContainerRequest) *api.CreateContainerResponse {
					return &api.CreateContainerResponse{Evict: evictions("victim", "bystander")}
				},
				onUpdate: func(*api.UpdateContainerRequest) *api.UpdateContainerResponse {
					return &api.UpdateContainerResponse{Evict: evictions("victim", "bystander")}
				},
			}
			dialRaw(t, e.cfg.SocketPath, "10", "evictor", p)
			waitPlugin(t, e.a, "10-evictor", StateReady)

			err := tc.ask(context.Background(), e, p)
			var fe *failedError
			if errors.As(err, &fe) {
				if !slices.Equal(fe.ids, tc.wantFailed) {
					t.Errorf("failed = %v, want %v", fe.ids, tc.wantFailed)
				}
				err = nil
			} else if len(tc.wantFailed) > 0 {
				t.Errorf("failed = none, want %v (error %v)", tc.wantFailed, err)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("asking for evictions: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("asking for evictions: error = %v, want one with %q", err, tc.wantErr)
			}
			e.eng.waitEvicted(t, tc.wantEvicted...)
			if tc.wantLog != "" {
				id := "victim"
				if len(tc.wantFailed) > 0 {
					id = tc.wantFailed[0]
				}
				e.waitLog("nri eviction failed", "container_id="+id, tc.wantLog)
			}
		})
	}
}
