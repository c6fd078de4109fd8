package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crin-dev/crin/internal/image"
)

// PullImage pulls an image with the request's credentials and returns its
// id.
func (s *Service) PullImage(ctx context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref, err := requestedImage(r.GetImage())
	if err != nil {
		return nil, err
	}
	if err := s.checkDiskRoom(fmt.Sprintf("pull image.image %q", ref)); err != nil {
		return nil, err
	}
	var auth *image.Auth
	if a := r.GetAuth(); a != nil {
		auth = &image.Auth{
			Username: a.Username, Password: a.Password, Auth: a.Auth,
			IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken,
		}
	}
	img, err := s.opts.Images.Pull(ctx, ref, auth)
	if err != nil {
		return nil, fmt.Errorf("pull image.image %q: %w", ref, err)
	}
	s.log.InfoContext(ctx, "image pulled", "image", ref, "image_id", img.ID)
	return &runtimeapi.PullImageResponse{ImageRef: img.ID}, nil
}
