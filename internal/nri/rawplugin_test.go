package nri

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/ttrpc"
)

// rawPlugin is an external plugin that speaks the wire protocol without
// pkg/stub (which cannot send evictions nor an event mask with unknown
// bits). It uses crin's own mux from the plugin's side of the trunk: conn 1
// serves the Plugin service, conn 2 is the client of the Runtime service.
type rawPlugin struct {
	// events is the mask returned from Configure; 0 means every event
	// but validation.
	events int32
	// onCreate and onUpdate answer CreateContainer and UpdateContainer;
	// nil means an empty answer.
	onCreate func(*api.CreateContainerRequest) *api.CreateContainerResponse
	onUpdate func(*api.UpdateContainerRequest) *api.UpdateContainerResponse

	rec recorder // records the events seen, nothing else of it is used

	runtime api.RuntimeService
}

// dialRaw connects p to socket as idx-name and registers it. Everything is
// torn down at cleanup.
func dialRaw(t *testing.T, socket, idx, name string, p *rawPlugin) {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	m := newMux(conn, nil, runtimeServiceConn, pluginServiceConn, runtimeServiceConn)
	serveConn, err := m.open(pluginServiceConn)
	if err != nil {
		t.Fatal(err)
	}
	callConn, err := m.open(runtimeServiceConn)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Fatal(err)
	}
	api.RegisterPluginService(srv, p)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(context.Background(), newConnListener(serveConn))
	}()
	client := ttrpc.NewClient(callConn)
	p.runtime = api.NewRuntimeClient(client)
	t.Cleanup(func() {
		_ = client.Close()
		_ = srv.Close()
		_ = m.Close()
		<-served
	})
	if _, err := p.runtime.RegisterPlugin(context.Background(), &api.RegisterPluginRequest{PluginIdx: idx, PluginName: name}); err != nil {
		t.Fatalf("register raw plugin: %v", err)
	}
}

var _ api.PluginService = (*rawPlugin)(nil)

func (p *rawPlugin) Configure(_ context.Context, req *api.ConfigureRequest) (*api.ConfigureResponse, error) {
	p.rec.add("Configure %s", req.GetRuntimeName())
	events := p.events
	if events == 0 {
		events = int32(api.ValidEvents &^ (1 << (api.Event_VALIDATE_CONTAINER_ADJUSTMENT - 1)))
	}
	return &api.ConfigureResponse{Events: events}, nil
}

func (p *rawPlugin) Synchronize(_ context.Context, req *api.SynchronizeRequest) (*api.SynchronizeResponse, error) {
	if !req.GetMore() {
		p.rec.add("Synchronized")
	}
	return &api.SynchronizeResponse{More: req.GetMore()}, nil
}

func (p *rawPlugin) Shutdown(context.Context, *api.Empty) (*api.Empty, error) {
	p.rec.add("Shutdown")
	return &api.Empty{}, nil
}

func (p *rawPlugin) RunPodSandbox(_ context.Context, req *api.RunPodSandboxRequest) (*api.RunPodSandboxResponse, error) {
	p.rec.add("RunPodSandbox %s", req.GetPod().GetId())
	return &api.RunPodSandboxResponse{}, nil
}

func (p *rawPlugin) UpdatePodSandbox(_ context.Context, req *api.UpdatePodSandboxRequest) (*api.UpdatePodSandboxResponse, error) {
	p.rec.add("UpdatePodSandbox %s", req.GetPod().GetId())
	return &api.UpdatePodSandboxResponse{}, nil
}

func (p *rawPlugin) PostUpdatePodSandbox(_ context.Context, req *api.PostUpdatePodSandboxRequest) (*api.PostUpdatePodSandboxResponse, error) {
	p.rec.add("PostUpdatePodSandbox %s", req.GetPod().GetId())
	return &api.PostUpdatePodSandboxResponse{}, nil
}

func (p *rawPlugin) StopPodSandbox(_ context.Context, req *api.StopPodSandboxRequest) (*api.StopPodSandboxResponse, error) {
	p.rec.add("StopPodSandbox %s", req.GetPod().GetId())
	return &api.StopPodSandboxResponse{}, nil
}

func (p *rawPlugin) RemovePodSandbox(_ context.Context, req *api.RemovePodSandboxRequest) (*api.RemovePodSandboxResponse, error) {
	p.rec.add("RemovePodSandbox %s", req.GetPod().GetId())
	return &api.RemovePodSandboxResponse{}, nil
}

func (p *rawPlugin) CreateContainer(_ context.Context, req *api.CreateContainerRequest) (*api.CreateContainerResponse, error) {
	p.rec.add("CreateContainer %s", req.GetContainer().GetId())
	if p.onCreate != nil {
		return p.onCreate(req), nil
	}
	return &api.CreateContainerResponse{}, nil
}

func (p *rawPlugin) PostCreateContainer(_ context.Context, req *api.PostCreateContainerRequest) (*api.PostCreateContainerResponse, error) {
	p.rec.add("PostCreateContainer %s", req.GetContainer().GetId())
	return &api.PostCreateContainerResponse{}, nil
}

func (p *rawPlugin) StartContainer(_ context.Context, req *api.StartContainerRequest) (*api.StartContainerResponse, error) {
	p.rec.add("StartContainer %s", req.GetContainer().GetId())
	return &api.StartContainerResponse{}, nil
}

func (p *rawPlugin) PostStartContainer(_ context.Context, req *api.PostStartContainerRequest) (*api.PostStartContainerResponse, error) {
	p.rec.add("PostStartContainer %s", req.GetContainer().GetId())
	return &api.PostStartContainerResponse{}, nil
}

func (p *rawPlugin) UpdateContainer(_ context.Context, req *api.UpdateContainerRequest) (*api.UpdateContainerResponse, error) {
	p.rec.add("UpdateContainer %s", req.GetContainer().GetId())
	if p.onUpdate != nil {
		return p.onUpdate(req), nil
	}
	return &api.UpdateContainerResponse{}, nil
}

func (p *rawPlugin) PostUpdateContainer(_ context.Context, req *api.PostUpdateContainerRequest) (*api.PostUpdateContainerResponse, error) {
	p.rec.add("PostUpdateContainer %s", req.GetContainer().GetId())
	return &api.PostUpdateContainerResponse{}, nil
}

func (p *rawPlugin) StopContainer(_ context.Context, req *api.StopContainerRequest) (*api.StopContainerResponse, error) {
	p.rec.add("StopContainer %s", req.GetContainer().GetId())
	return &api.StopContainerResponse{}, nil
}

func (p *rawPlugin) RemoveContainer(_ context.Context, req *api.RemoveContainerRequest) (*api.RemoveContainerResponse, error) {
	p.rec.add("RemoveContainer %s", req.GetContainer().GetId())
	return &api.RemoveContainerResponse{}, nil
}

func (p *rawPlugin) StateChange(_ context.Context, req *api.StateChangeEvent) (*api.Empty, error) {
	p.rec.add("StateChange %s", req.GetEvent().PrettyName())
	return &api.Empty{}, nil
}

func (p *rawPlugin) ValidateContainerAdjustment(context.Context, *api.ValidateContainerAdjustmentRequest) (*api.ValidateContainerAdjustmentResponse, error) {
	return nil, errors.New("not a validator")
}
