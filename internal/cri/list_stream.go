package cri

import (
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// streamChunkBytes bounds one message of a Stream* list RPC. gRPC clients
// refuse messages over their receive limit (4 MiB by default; kubelet
// raises it), so a node with many pods or containers is sent in pieces
// well under it instead of one response that a client cannot read.
const streamChunkBytes = 1 << 20

// sendChunked sends items in order, in as many messages as it takes to
// keep each under streamChunkBytes (an item larger than that goes alone).
// wrap builds one message from a slice of items. An empty list is sent as
// one empty message, so a client always gets an answer.
func sendChunked[T proto.Message, R any](items []T, wrap func([]T) *R, send func(*R) error) error {
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it) + 8 // field tag and length
		if i > start && size+n > streamChunkBytes {
			if err := send(wrap(items[start:i])); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += n
	}
	if start < len(items) || len(items) == 0 {
		return send(wrap(items[start:]))
	}
	return nil
}

// StreamPodSandboxes is ListPodSandbox sent in chunks.
func (s *Service) StreamPodSandboxes(r *runtimeapi.StreamPodSandboxesRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	resp, err := s.ListPodSandbox(srv.Context(), &runtimeapi.ListPodSandboxRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(resp.Items, func(it []*runtimeapi.PodSandbox) *runtimeapi.StreamPodSandboxesResponse {
		return &runtimeapi.StreamPodSandboxesResponse{PodSandboxes: it}
	}, srv.Send)
}

// StreamContainers is ListContainers sent in chunks.
func (s *Service) StreamContainers(r *runtimeapi.StreamContainersRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	resp, err := s.ListContainers(srv.Context(), &runtimeapi.ListContainersRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(resp.Containers, func(it []*runtimeapi.Container) *runtimeapi.StreamContainersResponse {
		return &runtimeapi.StreamContainersResponse{Containers: it}
	}, srv.Send)
}

// StreamContainerStats is ListContainerStats sent in chunks.
func (s *Service) StreamContainerStats(r *runtimeapi.StreamContainerStatsRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	resp, err := s.ListContainerStats(srv.Context(), &runtimeapi.ListContainerStatsRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(resp.Stats, func(it []*runtimeapi.ContainerStats) *runtimeapi.StreamContainerStatsResponse {
		return &runtimeapi.StreamContainerStatsResponse{ContainerStats: it}
	}, srv.Send)
}

// StreamPodSandboxStats is ListPodSandboxStats sent in chunks.
func (s *Service) StreamPodSandboxStats(r *runtimeapi.StreamPodSandboxStatsRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	resp, err := s.ListPodSandboxStats(srv.Context(), &runtimeapi.ListPodSandboxStatsRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(resp.Stats, func(it []*runtimeapi.PodSandboxStats) *runtimeapi.StreamPodSandboxStatsResponse {
		return &runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: it}
	}, srv.Send)
}

// StreamImages is ListImages sent in chunks.
func (s *Service) StreamImages(r *runtimeapi.StreamImagesRequest, srv grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	resp, err := s.ListImages(srv.Context(), &runtimeapi.ListImagesRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return sendChunked(resp.Images, func(it []*runtimeapi.Image) *runtimeapi.StreamImagesResponse {
		return &runtimeapi.StreamImagesResponse{Images: it}
	}, srv.Send)
}
