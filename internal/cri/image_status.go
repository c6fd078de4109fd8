package cri

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
)

// ImageStatus reports an image; an image that is not present is an empty
// response, not an error, as the CRI contract says.
func (s *Service) ImageStatus(ctx context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref, err := requestedImage(r.GetImage())
	if err != nil {
		return nil, err
	}
	img, err := s.opts.Images.Get(ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image.image %q: %w", ref, err)
	}
	resp := &runtimeapi.ImageStatusResponse{Image: criImage(img)}
	if r.GetVerbose() {
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"layers":%d}`, len(img.Layers))}
	}
	return resp, nil
}

// ListImages lists images, all or those matching the filter's image.
func (s *Service) ListImages(ctx context.Context, r *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	resp := &runtimeapi.ListImagesResponse{}
	if ref := r.GetFilter().GetImage().GetImage(); ref != "" {
		img, err := s.opts.Images.Get(ref)
		if errors.Is(err, errdefs.ErrNotFound) {
			return resp, nil
		}
		if err != nil {
			return nil, fmt.Errorf("filter.image.image %q: %w", ref, err)
		}
		resp.Images = append(resp.Images, criImage(img))
		return resp, nil
	}
	for _, img := range s.opts.Images.List() {
		resp.Images = append(resp.Images, criImage(img))
	}
	return resp, nil
}

// RemoveImage removes an image by tag, digest or id. Removing an image that
// is not present succeeds: the CRI contract says RemoveImage "must not
// return an error if the image has already been removed".
func (s *Service) RemoveImage(ctx context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref, err := requestedImage(r.GetImage())
	if err != nil {
		return nil, err
	}
	if err := s.opts.Images.Remove(ctx, ref); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("remove image.image %q: %w", ref, err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports the usage of the image filesystem, which also holds
// the containers' writable layers: the same figure is the container
// filesystem (same mountpoint, so kubelet sees no split disk). The image
// service keeps it from cached per-blob, per-layer and per-writable-layer
// figures, so a call costs a few directory reads, not a walk. The API has
// no capacity fields: kubelet takes capacity from the mountpoint.
func (s *Service) ImageFsInfo(ctx context.Context, r *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	u, err := s.opts.Images.FsInfo()
	if err != nil {
		return nil, err
	}
	fs := &runtimeapi.FilesystemUsage{
		Timestamp:  nowNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{fs},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{proto.Clone(fs).(*runtimeapi.FilesystemUsage)},
	}, nil
}

func criImage(img *image.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id:          img.ID,
		RepoTags:    img.RepoTags,
		RepoDigests: img.RepoDigests,
		Size:        img.Size,
		Spec:        &runtimeapi.ImageSpec{Image: img.ID},
	}
	user := img.Config.User
	if i := strings.IndexByte(user, ':'); i >= 0 {
		user = user[:i]
	}
	if uid, err := strconv.ParseInt(user, 10, 64); err == nil {
		out.Uid = &runtimeapi.Int64Value{Value: uid}
	} else {
		out.Username = user
	}
	return out
}

// imageName is the name a container's image is shown by: the tag or digest
// the user asked for when the image has it, else its first tag or digest.
func imageName(img *image.Image, ref string) string {
	for _, list := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, n := range list {
			if n == ref || strings.HasSuffix(n, "/"+ref) || strings.HasSuffix(n, "/"+ref+":latest") {
				return n
			}
		}
	}
	if len(img.RepoTags) > 0 {
		return img.RepoTags[0]
	}
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

// requestedImage is the image a request names (image.image): PullImage,
// ImageStatus and RemoveImage refuse an empty one.
func requestedImage(spec *runtimeapi.ImageSpec) (string, error) {
	if spec.GetImage() == "" {
		return "", fmt.Errorf("image.image: must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	return spec.GetImage(), nil
}
