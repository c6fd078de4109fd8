package cri

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/serving"
)

// validRequests are the seed corpus: requests as kubelet sends them.
func validRequests() []proto.Message {
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1", Attempt: 1},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/default_web_u1",
		Labels:       map[string]string{"app": "web"},
		PortMappings: []*runtimeapi.PortMapping{{ContainerPort: 80, HostPort: 8080}},
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/pod-u1", SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD},
		}},
	}
	ctr := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main", Attempt: 0},
		Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:latest"},
		Command:  []string{"sleep", "3600"},
		Envs:     []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}},
		LogPath:  "main/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuShares: 512, MemoryLimitInBytes: 64 << 20, CpusetCpus: "0-1",
		}},
	}
	return []proto.Message{
		&runtimeapi.RunPodSandboxRequest{Config: pod, RuntimeHandler: "runc"},
		&runtimeapi.CreateContainerRequest{PodSandboxId: "p1", Config: ctr, SandboxConfig: pod},
		&runtimeapi.PortForwardRequest{PodSandboxId: "p1", Port: []int32{80, 8080}},
		&runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true},
		&runtimeapi.AttachRequest{ContainerId: "c1", Stdout: true, Stderr: true},
	}
}

// FuzzValidateRequests feeds arbitrary bytes, as each kind of request, to
// the validation the handlers run before touching anything, and to what
// the interceptor does with a request and its error (summary, Debug
// payload, classification): none may panic.
func FuzzValidateRequests(f *testing.F) {
	for i, m := range validRequests() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(1), []byte{0x12, 0x02, 0x0a, 0x00}) // config with empty metadata
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		var err error
		var m proto.Message
		switch kind % 5 {
		case 0:
			r := &runtimeapi.RunPodSandboxRequest{}
			m = r
			if proto.Unmarshal(b, r) != nil {
				return
			}
			err = validateRunRequest(r.GetConfig())
		case 1:
			r := &runtimeapi.CreateContainerRequest{}
			m = r
			if proto.Unmarshal(b, r) != nil {
				return
			}
			err = validateCreateRequest(r.GetConfig())
			if e := validatePodConfig(r.GetSandboxConfig()); err == nil {
				err = e
			}
		case 2:
			r := &runtimeapi.PortForwardRequest{}
			m = r
			if proto.Unmarshal(b, r) != nil {
				return
			}
			err = validatePorts(r.GetPort())
		case 3:
			r := &runtimeapi.ExecRequest{}
			m = r
			if proto.Unmarshal(b, r) != nil {
				return
			}
			err = checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr())
		default:
			r := &runtimeapi.AttachRequest{}
			m = r
			if proto.Unmarshal(b, r) != nil {
				return
			}
			err = checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr())
		}
		checkServed(t, m, err)
	})
}

// checkServed passes req and the handler's err through crind's unary
// interceptor, logging at Debug: the status message and every log line
// (the failure's summary of the request, the Debug payloads) stay small.
func checkServed(t *testing.T, req proto.Message, err error) {
	t.Helper()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	info := &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/Fuzz"}
	_, served := serving.Interceptor(log, nil)(t.Context(), req, info, func(context.Context, any) (any, error) {
		return nil, err
	})
	if n := len(status.Convert(served).Message()); n > serving.MaxStatusMessage+64 {
		t.Errorf("status message of %d bytes", n)
	}
	for _, line := range strings.Split(logged.String(), "\n") {
		if len(line) > 8<<10 {
			t.Errorf("a log line of %d bytes: %.200s", len(line), line)
		}
	}
}

// TestValidRequestsPass keeps the seed corpus honest: the seeds are valid.
func TestValidRequestsPass(t *testing.T) {
	for _, m := range validRequests() {
		var err error
		switch r := m.(type) {
		case *runtimeapi.RunPodSandboxRequest:
			err = validateRunRequest(r.GetConfig())
		case *runtimeapi.CreateContainerRequest:
			err = validateCreateRequest(r.GetConfig())
		case *runtimeapi.PortForwardRequest:
			err = validatePorts(r.GetPort())
		case *runtimeapi.ExecRequest:
			err = checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr())
		case *runtimeapi.AttachRequest:
			err = checkStreams(r.GetTty(), r.GetStdin(), r.GetStdout(), r.GetStderr())
		}
		if err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
}
