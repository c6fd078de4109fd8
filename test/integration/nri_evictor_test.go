//go:build integration

package integration

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
)

// evictor is a raw external plugin that asks crind to evict containers
// (the stub cannot send evictions). It speaks the wire protocol with nri's
// own multiplexer: connection 1 serves the Plugin service with empty
// answers, connection 2 is a client of the Runtime service.
type evictor struct {
	runtime api.RuntimeService
	synced  chan struct{}
	once    sync.Once
}

// dialEvictor connects an evictor to socket as idx-name, registers it and
// waits until it has been synchronized. It is closed at cleanup.
func dialEvictor(t *testing.T, socket, idx, name string) *evictor {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("evictor: dial %s: %v", socket, err)
	}
	mux := multiplex.Multiplex(conn)
	l, err := mux.Listen(multiplex.PluginServiceConn)
	if err != nil {
		t.Fatal(err)
	}
	callConn, err := mux.Open(multiplex.RuntimeServiceConn)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	e := &evictor{synced: make(chan struct{})}
	api.RegisterPluginService(srv, evictorService{e})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(context.Background(), l)
	}()
	client := ttrpc.NewClient(callConn)
	e.runtime = api.NewRuntimeClient(client)
	t.Cleanup(func() {
		_ = client.Close()
		_ = srv.Close()
		_ = mux.Close()
		<-served
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.runtime.RegisterPlugin(ctx, &api.RegisterPluginRequest{PluginIdx: idx, PluginName: name}); err != nil {
		t.Fatalf("evictor %s-%s: register: %v", idx, name, err)
	}
	select {
	case <-e.synced:
	case <-ctx.Done():
		t.Fatalf("evictor %s-%s: not synchronized within 10s", idx, name)
	}
	return e
}

// Evict asks crind to evict a container, with reason.
func (e *evictor) Evict(ctx context.Context, containerID, reason string) error {
	_, err := e.runtime.UpdateContainers(ctx, &api.UpdateContainersRequest{
		Evict: []*api.ContainerEviction{{ContainerId: containerID, Reason: reason}},
	})
	return err
}

// evictorService answers every Plugin service call with nothing. It
// subscribes to RemoveContainer only, a notification.
type evictorService struct{ e *evictor }

var _ api.PluginService = evictorService{}

func (s evictorService) Configure(context.Context, *api.ConfigureRequest) (*api.ConfigureResponse, error) {
	var m api.EventMask
	m.Set(api.Event_REMOVE_CONTAINER)
	return &api.ConfigureResponse{Events: int32(m)}, nil
}

func (s evictorService) Synchronize(_ context.Context, req *api.SynchronizeRequest) (*api.SynchronizeResponse, error) {
	if !req.GetMore() {
		s.e.once.Do(func() { close(s.e.synced) })
	}
	return &api.SynchronizeResponse{More: req.GetMore()}, nil
}

func (evictorService) Shutdown(context.Context, *api.Empty) (*api.Empty, error) {
	return &api.Empty{}, nil
}

func (evictorService) RunPodSandbox(context.Context, *api.RunPodSandboxRequest) (*api.RunPodSandboxResponse, error) {
	return &api.RunPodSandboxResponse{}, nil
}

func (evictorService) UpdatePodSandbox(context.Context, *api.UpdatePodSandboxRequest) (*api.UpdatePodSandboxResponse, error) {
	return &api.UpdatePodSandboxResponse{}, nil
}

func (evictorService) PostUpdatePodSandbox(context.Context, *api.PostUpdatePodSandboxRequest) (*api.PostUpdatePodSandboxResponse, error) {
	return &api.PostUpdatePodSandboxResponse{}, nil
}

func (evictorService) StopPodSandbox(context.Context, *api.StopPodSandboxRequest) (*api.StopPodSandboxResponse, error) {
	return &api.StopPodSandboxResponse{}, nil
}

func (evictorService) RemovePodSandbox(context.Context, *api.RemovePodSandboxRequest) (*api.RemovePodSandboxResponse, error) {
	return &api.RemovePodSandboxResponse{}, nil
}

func (evictorService) CreateContainer(context.Context, *api.CreateContainerRequest) (*api.CreateContainerResponse, error) {
	return &api.CreateContainerResponse{}, nil
}

func (evictorService) PostCreateContainer(context.Context, *api.PostCreateContainerRequest) (*api.PostCreateContainerResponse, error) {
	return &api.PostCreateContainerResponse{}, nil
}

func (evictorService) StartContainer(context.Context, *api.StartContainerRequest) (*api.StartContainerResponse, error) {
	return &api.StartContainerResponse{}, nil
}

func (evictorService) PostStartContainer(context.Context, *api.PostStartContainerRequest) (*api.PostStartContainerResponse, error) {
	return &api.PostStartContainerResponse{}, nil
}

func (evictorService) UpdateContainer(context.Context, *api.UpdateContainerRequest) (*api.UpdateContainerResponse, error) {
	return &api.UpdateContainerResponse{}, nil
}

func (evictorService) PostUpdateContainer(context.Context, *api.PostUpdateContainerRequest) (*api.PostUpdateContainerResponse, error) {
	return &api.PostUpdateContainerResponse{}, nil
}

func (evictorService) StopContainer(context.Context, *api.StopContainerRequest) (*api.StopContainerResponse, error) {
	return &api.StopContainerResponse{}, nil
}

func (evictorService) RemoveContainer(context.Context, *api.RemoveContainerRequest) (*api.RemoveContainerResponse, error) {
	return &api.RemoveContainerResponse{}, nil
}

func (evictorService) StateChange(context.Context, *api.StateChangeEvent) (*api.Empty, error) {
	return &api.Empty{}, nil
}

func (evictorService) ValidateContainerAdjustment(context.Context, *api.ValidateContainerAdjustmentRequest) (*api.ValidateContainerAdjustmentResponse, error) {
	return &api.ValidateContainerAdjustmentResponse{}, nil
}
